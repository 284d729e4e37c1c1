"""A command trial's process: its environment, its start in a process group of its own, its output read line by line.

The command writes its stdout and stderr straight to files in the trial folder (`OUTPUT_FILES`), not to
pipes: a line it printed is in the file at once, so a worker killed before reading it loses nothing
(a pipe's unread bytes die with the worker). A thread per file tails it (`tail_lines`).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainables.command.gpu_sharing import CAP_HOOK_DIR
from trainables.command.key_sources import trial_origins
from trainables.command.parse import StepContext, format_value
from trainables.command.sources import StreamLog, decode_line, read_metrics_file
from trainables.command.trackers import TrackerResults
from trainables.command.user_metrics import METRICS_FILE_ENV
from trainables.command.watchdog import group_alive
from trainables.config import TrainConfig
from trainables.experiment.objective import Objective
from trainables.experiment.records import MLFLOW_STORE
from trainables.gpu_share import memory_fraction_for

TAIL_LINES = 30  # stderr / stdout lines quoted in a trial's error
STREAM_NAMES = {"OUT": "stdout", "ERR": "stderr"}  # the log prefix's name of a stream -> --metrics-from's
TAIL_POLL_S = 0.02  # how long a reader waits for more output at the end of its file

SHIM = Path(__file__).with_name("shim.py")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


ENV_TRACKERS = ("wandb", "mlflow")  # the trackers `tracker_env` points at the trial's folder


def tracker_env(env: dict, work_dir: Path, metrics_from: str, shown=ENV_TRACKERS) -> list[str]:
    """Point the trackers `metrics_from` may read at the trial's folder, where `env` leaves them unset.

    Sets (in `env`) `WANDB_MODE=offline` (not with a `WANDB_API_KEY`: online runs write the same log)
    and `WANDB_DIR={trial_dir}` (W&B's run folder then is `{trial_dir}/wandb/offline-run-*`, which
    `wandb sync` uploads later), and
    `MLFLOW_TRACKING_URI=sqlite:///{trial_dir}/mlflow.db`, for `output` and the matching source.
    Args:
        shown: the trackers whose settings are returned (`trackers_named`); all are set.
    Returns:
        `NAME=value` for each variable set of a tracker in `shown`, to be said once in the trial's log.
    """
    wanted = {
        "wandb": {"WANDB_MODE": "offline", "WANDB_DIR": str(work_dir)},
        "mlflow": {"MLFLOW_TRACKING_URI": f"sqlite:///{work_dir / MLFLOW_STORE}"},
    }
    if env.get("WANDB_API_KEY"):  # logged in for online runs: they also write their log under WANDB_DIR
        del wanted["wandb"]["WANDB_MODE"]
    set_now = []
    for source, values in wanted.items():
        for name, value in values.items() if metrics_from in ("output", source) else ():
            if not env.get(name):
                env[name] = value
                set_now += [f"{name}={value}"] if source in shown else []
    return set_now


def trackers_named(argv: list[str], cwd: Path, metrics_from: str) -> tuple:
    """The trackers of `ENV_TRACKERS` that the command names (`--log-wandb`, `WandbLogger`) or whose
    name its script's source holds (`import wandb`, `import mlflow`), and the one --metrics-from names.

    Args:
        argv: the command; each word ending in `.py` is read as a file relative to `cwd` (when it is one).
    """
    text = " ".join(argv)
    for word in argv:
        path = Path(cwd, word)
        if word.endswith(".py") and path.is_file():
            text += path.read_text(errors="replace")
    return tuple(t for t in ENV_TRACKERS if t == metrics_from or re.search(t, text, re.IGNORECASE))


def command_env(
    config: dict, work_dir: Path, trial_name: str, metrics_file: Path, gpus: float, memory_cap: bool = True
) -> dict:
    """The command's environment: the worker's (with Ray's `CUDA_VISIBLE_DEVICES`) plus raysweep's.

    Args:
        config: the trial's config; each key becomes `RAYSWEEP_<KEY>` (upper case, non-alphanumerics
            as `_`), e.g. `RAYSWEEP_NOISE_RATE=0.4`.
        work_dir, trial_name, metrics_file: `RAYSWEEP_TRIAL_DIR`, `RAYSWEEP_TRIAL_NAME`, `RAYSWEEP_METRICS_FILE`.
        gpus: the trial's GPU share; for 0 < gpus < 1 `RAYSWEEP_GPU_MEMORY_FRACTION` = gpus * 0.9,
            the value a cooperative script passes to `torch.cuda.set_per_process_memory_fraction`.
        memory_cap: for 0 < gpus < 1, put `CAP_HOOK_DIR` first on PYTHONPATH: the command's PyTorch then
            caps itself at that fraction when CUDA starts in it (`gpu_cap/sitecustomize.py`); False: --no-memory-cap.
    Also sets `PYTHONUNBUFFERED=1` (unless set), so a Python script's lines arrive as it prints them.
    """
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    for key, value in config.items():
        env["RAYSWEEP_" + re.sub(r"\W", "_", str(key)).upper()] = format_value(value)
    env.update(
        {"RAYSWEEP_TRIAL_DIR": str(work_dir), "RAYSWEEP_TRIAL_NAME": trial_name, METRICS_FILE_ENV: str(metrics_file)}
    )
    fraction = memory_fraction_for(gpus, TrainConfig.gpu_memory_headroom)  # the built-in trainable's default
    if fraction is not None:
        env["RAYSWEEP_GPU_MEMORY_FRACTION"] = format_value(fraction)
        if memory_cap:
            env["PYTHONPATH"] = os.pathsep.join([str(CAP_HOOK_DIR), *filter(None, [env.get("PYTHONPATH")])])
    else:
        env.pop("RAYSWEEP_GPU_MEMORY_FRACTION", None)
    return env


def start_command(argv: list[str], env: dict, cwd: str | None = None, outputs: dict | None = None) -> subprocess.Popen:
    """Start `argv` in a new session / process group under `trainables/command/shim.py` (the group's
    leader and the returned `Popen`: its exit status is the command's), so that a dying Ray worker's
    SIGKILL of its children misses the command itself.

    Args:
        outputs: {"OUT": path, "ERR": path}: the files its stdout and stderr go to (emptied first);
            None: pipes (bytes), as `--check` reads them.
    Returns:
        the shim's `Popen`, with `command_pid` set: the pid of the command itself (the shim's child: the pid
        `nvidia-smi` shows, and the one the trial's log prefix names), as the shim wrote it to a pipe when it
        forked the command (`read_command_pid`), so it is known even when the command has already exited.
    The shim asks the kernel for SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG),
    and ignores it, as it ignores every SIGTERM: the watchdog ends the group. The preexec function
    only makes one libc call, prepared before the fork, so it is safe in the threaded Ray worker.
    """
    files = {name: open(path, "wb") for name, path in (outputs or {}).items()}
    pid_read, pid_write = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-S", str(SHIM), str(pid_write), *argv],
            stdin=subprocess.DEVNULL,
            stdout=files.get("OUT", subprocess.PIPE),
            stderr=files.get("ERR", subprocess.PIPE),
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if _LIBC else None,
            pass_fds=(pid_write,),
        )
    except BaseException:
        os.close(pid_read)
        raise
    finally:
        os.close(pid_write)  # the shim holds its own copy: its exit ends the pipe
        for file in files.values():
            file.close()  # the command holds its own copies
    proc.command_pid = read_command_pid(pid_read, proc.pid)
    return proc


def read_command_pid(pid_read: int, shim_pid: int, timeout_s: float = 30.0) -> int:
    """The pid the shim writes to the pipe `pid_read` (closed here) right after it forks the command.

    The shim writes it before the command runs, so a command that ends at once is no race (the psutil
    lookup of the shim's child this replaces named the shim's pid in a CI run when the Ray worker, starved
    on a loaded machine, looked only after the 0.3 s script had ended). Its `python -S` start takes tens of
    milliseconds, seconds on a loaded machine. Returns `shim_pid` when the shim exits without writing (it
    could not fork) or has written nothing after `timeout_s` seconds.
    """
    try:
        poller = select.poll()  # not select.select: a Ray worker's descriptors may number past its 1024
        poller.register(pid_read, select.POLLIN)
        written = os.read(pid_read, 32) if poller.poll(timeout_s * 1000) else b""  # data, or the shim's exit
    finally:
        os.close(pid_read)
    return int(written) if written.strip().isdigit() else shim_pid


def log_prefix(trial_name: str, stream: str, gpu_ids: str, pid: int) -> str:
    """`<trial>:<stream> | [GPU <ids> | pid <pid>]`, the grid's log prefix (`trainables/logs.py`) for a
    line the command printed: stream `OUT` or `ERR`, the GPU ids Ray gave (`CPU` when none), its pid."""
    where = f"GPU {gpu_ids}" if gpu_ids else "CPU"
    return f"{trial_name}:{stream} | [{where} | pid {pid}]"


@dataclasses.dataclass(frozen=True)
class Reading:
    """How one command trial's results are read: the flags of `trainables/command/runner.py:train_command`
    and the trial's files, given once to what starts, watches, recovers and judges the command."""

    step_key: str  # the metric counting progress (`--step-key`)
    patterns: list[re.Pattern]  # the compiled `--metric-pattern`s; []: `key=value` / `key: value` pairs
    objective: Objective | None  # the sweep's: its metrics complete a step (`Objective.step_metrics`)
    metrics_from: str  # `--metrics-from`: output, stdout, stderr, jsonl, tensorboard or a tracker
    metrics_file: Path  # $RAYSWEEP_METRICS_FILE, in the trial folder beside the output files
    work_dir: Path  # `{trial_dir}`, where TensorBoard events and tracker records are read


@dataclasses.dataclass
class CommandOutput:
    """A running command's output: its lines echoed with the grid's prefix into the trial's logs,
    the last lines of each stream kept for an error, and the results read from them, from the
    metrics file and from TensorBoard events."""

    lines: queue.Queue  # (stream, line) from both reader threads, (stream, None) at a stream's end
    prefixes: dict  # OUT / ERR -> `log_prefix`
    echo: dict  # OUT / ERR -> Tune's tee into the trial's stdout / stderr file, bound at the start
    context: StepContext  # groups the printed lines into one result per step
    streams: tuple  # the streams --metrics-from reads ("stdout", "stderr")
    metrics_file: Path | None  # $RAYSWEEP_METRICS_FILE; None with --metrics-from tensorboard or a tracker
    events: TrackerResults | None  # `sources.record_reader`: chooses the rows reported (printed or a tracker's)
    step_key: str
    log: StreamLog  # command_stdout.txt: both streams in the order read, closed by the trial
    tails: dict = dataclasses.field(
        default_factory=lambda: {n: collections.deque(maxlen=TAIL_LINES) for n in STREAM_NAMES}
    )
    file_offset: int = 0  # bytes of the metrics file read so far
    file_keys: dict = dataclasses.field(default_factory=dict)  # the names read from the metrics file
    open_streams: int = 2

    def poll(self, timeout_s: float) -> list[dict]:
        """The results of the lines queued within `timeout_s` seconds, the metrics file and the events
        (`events` chooses between the printed rows and a tracker's, `trackers.TrackerResults.poll`)."""
        results = []
        for name, line in next_lines(self.lines, timeout_s):
            if line is None:
                self.open_streams -= 1
                continue
            self.echo[name].write(f"{self.prefixes[name]} {line}\n")
            self.tails[name].append(line)
            if STREAM_NAMES[name] in self.streams:
                results += self.context.feed(line, STREAM_NAMES[name])
        results += self.written_since()
        return self.events.poll(results) if self.events else results

    def written_since(self) -> list[dict]:
        """The results appended to the metrics file since the last read."""
        if self.metrics_file is None:
            return []
        results, self.file_offset = read_metrics_file(self.metrics_file, self.file_offset, self.step_key)
        self.file_keys.update(dict.fromkeys(k for row in results for k in row))
        return results

    def origins(self) -> dict:
        """{metric: where it was read} of the rows reported (`key_sources.trial_origins`)."""
        return trial_origins(self.context, self.events, self.file_keys, self.metrics_file)


def start_readers(proc: subprocess.Popen, log: StreamLog, outputs: dict) -> queue.Queue:
    """Start a thread per output file of `proc` (`outputs`: {"OUT": path, "ERR": path}) putting its lines
    on the returned queue (unbounded: the script never waits for Tune to take a result) and in `log`
    (both streams, in the order read)."""
    lines: queue.Queue = queue.Queue()
    for name, path in outputs.items():
        threading.Thread(target=tail_lines, args=(path, name, proc.pid, lines, log), daemon=True).start()
    return lines


def tail_lines(path: Path, name: str, pgid: int, lines: queue.Queue, log: StreamLog) -> None:
    """Put each line written to `path` on `lines` and in `log` as soon as it is complete (`StreamLog.put`);
    once process group `pgid` is gone and the file is read to its end (a last line without a newline
    included), put `(name, None)`."""
    pending = b""
    with open(path, "rb") as file:
        while True:
            chunk = file.read()
            ended = not chunk and not group_alive(pgid)
            if ended:
                chunk = file.read()  # written just before the group's end
            elif not chunk:
                time.sleep(TAIL_POLL_S)
                continue
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                log.put(name, decode_line(raw), lines)
            if ended:
                if pending:
                    log.put(name, decode_line(pending), lines)
                break
    lines.put((name, None))


def next_lines(lines: queue.Queue, timeout_s: float) -> list[tuple[str, str | None]]:
    """Every `(stream, line)` queued now, waiting up to `timeout_s` seconds for the first one."""
    try:
        batch = [lines.get(timeout=timeout_s)]
    except queue.Empty:
        return []
    while True:
        try:
            batch.append(lines.get_nowait())
        except queue.Empty:
            return batch


def _die_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def exit_status(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
    return f"exit code {code}"


def exit_code_soon(proc: subprocess.Popen, timeout_s: float = 5.0) -> int | None:
    """`proc`'s exit code once its pipes have closed (it is exiting); None if it still runs after `timeout_s`."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
