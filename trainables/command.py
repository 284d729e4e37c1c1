"""Sweep any training command: each Tune trial runs the user's own script as a subprocess.

    tune.with_parameters(train_command, template=["python", "train.py", "--noise-rate", "{noise_rate}",
                                                  "--seed", "{seed}", "--out", "{trial_dir}"])

`train_command(config, ...)` is a Tune Function-API trainable. Per trial it fills the template
(`trainables/command_parse.py:render`), starts the command in a session of its own, copies its
stdout/stderr lines into the trial's `stdout`/`stderr` files with the grid's log prefix, turns
every result it finds into one `tune.report`, and ends the whole process group when the trial ends.

Results (no SDK needed), by `metrics_from`:
- `stdout`: lines `epoch=3 val_acc=0.81`, `Epoch [3/50]` then `val_acc: 81.2%`, a final-result
  block after the last step (or `metric_pattern` regexes), grouped per step by
  `command_parse.StepContext`; and JSON lines appended to `$RAYSWEEP_METRICS_FILE`
  (`trainables/report.py:report` does that);
- `jsonl`: only that file; `tensorboard`: the event files under `{trial_dir}` (`TensorBoardResults`).
A result holds the step key (default `epoch`); its value also goes to `epoch` so the progress
table and ASHA's `time_attr` work unchanged. Every stdout line is also appended to the trial's
`command_stdout.txt` as soon as it is read, so a retried or resumed trial reports the rows printed
after Tune's last record (`unreported_results`) before its command starts again.

Why the last reported step lives in a Tune `Checkpoint` (`command_step.json`, a few bytes, with
every report): Tune records a result and its checkpoint together, restores that checkpoint to a
retried trial (`FailureConfig`) and to a resumed experiment (`--resume`), on any node, just as for
the built-in trainable. A file written after `tune.report` returns could be lost, or written for a
result Tune never recorded, when the worker dies between the two. Tune's experiment state may be
older than the trial's newest checkpoint after the driver is killed (see `trainables/checkpoints.py`),
so the `checkpoint_*` folders of the trial are read as well and the highest step wins. A resumed
script re-printing results at or below that step is skipped: no epoch is reported twice.

Which ends of a trial end the command's process group (SIGTERM, SIGKILL after `grace_period_s`):
- the command exits by itself: any process it left behind in its group;
- Tune stops the trial (ASHA, a stopper, end of sweep, Ctrl-C, fail-fast), with or without
  `reuse_actors`: Tune sets the session's stop event and the next `tune.report` raises SystemExit
  (`ray/train/_internal/session.py`); this loop polls the stop event every 0.2 s as well, so a
  trial stopped while its script is mid-epoch ends at once, not at its next result;
- the trial raises (NaN metric, bad exit code, a bug here): the `finally` block;
- the worker process exits or is killed before that `finally` block runs (Tune terminates the
  actor right after `stop`, which returns at once; SIGKILL of the actor; OOM killer;
  `ray.shutdown()`): Ray itself SIGKILLs the worker's direct children (the command, with no grace
  period; `RAY_kill_child_processes_on_worker_exit`, default on), the direct child also gets
  SIGTERM from `prctl(PR_SET_PDEATHSIG)` where that Ray setting is off, and a detached watchdog
  (`trainables/watchdog.py`: not a child of the worker, woken when the worker's end of a pipe closes)
  sends SIGTERM, then SIGKILL, to what is left of the group (the script's own children).
Not covered: processes that leave the group themselves (`setsid`, daemons), and the watchdog
killed by hand before the worker.
"""

from __future__ import annotations

import collections
import ctypes
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import ray
from ray import tune
from ray.tune import Checkpoint

from trainables import divergence, storage
from trainables.command_parse import NO_RETRY_METRIC, StepContext, format_value, line_metrics, non_finite, render
from trainables.config import TrainConfig
from trainables.gpu import memory_fraction_for, trial_gpu_fraction
from trainables.proctitle import refresh_title, titled_trial
from trainables.report import METRICS_FILE_ENV
from trainables.watchdog import end_group
from trainables.workdir import fill_work_dir

WORK_DIR = "work"  # <trial folder on storage>/work: {trial_dir}, kept across retries and --resume
METRICS_FILE = "metrics.jsonl"  # <trial folder on storage>/metrics.jsonl: $RAYSWEEP_METRICS_FILE
STEP_FILE = "command_step.json"  # in each reported Checkpoint: {"step": last reported step}
STDOUT_LOG = "command_stdout.txt"  # <trial folder on storage>/command_stdout.txt: the command's stdout, every attempt
ATTEMPT_LINE = "# raysweep: command started "  # first line of each attempt in STDOUT_LOG
TAIL_LINES = 30  # stderr / stdout lines quoted in a trial's error
QUOTED_LINES = 3  # of which the error's last line quotes this many
POLL_S = 0.2  # how often the loop checks the stop event, the metrics file and the process

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class CommandFailed(RuntimeError):
    """The trial's command exited with an error, or reported no metric at all."""


@titled_trial  # the worker shows `ray::<trial name>`; the command gets RAYSWEEP_TRIAL_NAME
def train_command(
    config: dict,
    *,
    template: list[str],
    step_key: str = "epoch",
    metric_pattern: str | list[str] | None = None,
    metrics_from: str = "stdout",
    complete_when: tuple = (),
    grace_period_s: float = 10.0,
    cwd: str | None = None,
    code_dir: str | None = None,
) -> None:
    """Run one trial's command and report what it prints (Tune Function API).

    Args:
        config: the trial's config; every key fills `{key}` in the template and `RAYSWEEP_<KEY>`.
        template: the command as argv with `{name}` placeholders (config keys, `trial_dir`,
            `trial_name`), checked beforehand by `sweeps/engine/command_template.py:check_template`.
        step_key: the metric counting progress (`command_parse.StepContext` groups results by it).
        metric_pattern: regex(es) with named groups for stdout lines, one per line shape;
            None: `key=value` / `key: value` pairs.
        metrics_from: `stdout` (stdout lines and the JSON-lines file), `jsonl` (the file only) or
            `tensorboard` (event files the command writes under `{trial_dir}`, step = global step,
            tags as metric names, read with `tensorboard`'s `EventFileLoader` while it runs).
        complete_when: metric names whose presence completes a step's result at once (the sweep's
            metric and test metric); otherwise a step is reported when the next one starts.
        grace_period_s: seconds between SIGTERM and SIGKILL when the trial's processes are ended.
        cwd: folder the command runs in when there is no `code_dir` (`--in-place`: the launch
            folder); None: the worker's folder, which Tune sets to the trial folder.
        code_dir: the code snapshot of the launch (`sweeps/engine/code_snapshot.py`): copied into
            `{trial_dir}` (`trainables/workdir.py:fill_work_dir`, what the trial wrote kept), where
            the command then runs, so every relative write of the script is the trial's own.
    Reports: each result's metrics, plus `epoch` (= the step) when `step_key` is not `epoch`;
        a diverged trial's last report is `divergence.diverged_metrics` plus `diverged/metrics`.
        On a retry or `--resume`, results the command printed before (in `command_stdout.txt`)
        but that were never reported are reported first, so each printed step is reported once.
    Raises:
        CommandFailed: the command exited non-zero (its code and the last 30 stderr lines), or
            exited 0 without any result (which pattern / file was expected, the last stdout lines).
            Exit code 2 (a usage error) and "no result" are reported with `NO_RETRY_METRIC` first,
            so that `sweeps/engine/no_retry.py` stops Tune from retrying them.
    """
    patterns = [re.compile(p) for p in ([metric_pattern] if isinstance(metric_pattern, str) else metric_pattern or [])]
    trial_name, trial_folder = _trial_name_and_folder()
    work_dir = trial_folder / WORK_DIR
    work_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = trial_folder / METRICS_FILE
    metrics_file.touch()
    stdout_log = trial_folder / STDOUT_LOG
    last_step = _last_reported_step(tune.get_checkpoint(), trial_folder)
    restarted = last_step is not None or stdout_log.exists()  # a retry or --resume of this trial
    if restarted and (trial_folder / "result.json").exists():  # the history itself: a checkpoint may outlive its row
        last_step = _recorded_step(trial_folder / "result.json")
    parsed = 0  # results seen in this run, reported or skipped as reported before

    def report_new(results: list[dict], final: bool = False) -> bool:
        """Report the results not reported before; True when one diverged (the trial then ends).
        A final result (printed after the last step line) may share the last reported step."""
        nonlocal last_step, parsed
        for result in results:
            parsed += 1
            if non_finite(result):
                _report_divergence(result, step_key, trial_folder)
                return True
            if last_step is not None and (
                result[step_key] < last_step or (result[step_key] == last_step and not final)
            ):
                continue  # reported before a retry / resume; the script redid it from its own checkpoint
            _report(result, step_key)
            last_step = result[step_key]
        return False

    recovered = (
        unreported_results(
            stdout_log, last_step if last_step is not None else -math.inf, step_key, patterns, complete_when
        )
        if restarted and metrics_from == "stdout"
        else []
    )
    if recovered:
        print(
            f"{trial_name}: reporting {len(recovered)} row(s) printed before the restart but never reported "
            f"(steps {recovered[0][step_key]}..{recovered[-1][step_key]}, from {stdout_log.name})",
            flush=True,
        )
    if report_new(recovered):
        return
    parsed = 0
    context = StepContext(step_key, patterns, complete_when)
    events = TensorBoardResults(work_dir, step_key, complete_when) if metrics_from == "tensorboard" else None
    if code_dir:
        fill_work_dir(Path(code_dir), work_dir)
        cwd = str(work_dir)
    argv = render(template, config, str(work_dir), trial_name, gpu=",".join(map(str, ray.get_gpu_ids())))
    env = command_env(config, work_dir, trial_name, metrics_file, trial_gpu_fraction())
    out, err = sys.stdout, sys.stderr  # Tune's tees into this trial's files, bound now
    proc = start_command(argv, env, cwd)
    watchdog = None
    gpu_ids = env.get("CUDA_VISIBLE_DEVICES", "")
    prefixes = {name: log_prefix(trial_name, name, gpu_ids, proc.pid) for name in ("OUT", "ERR")}
    lines: queue.Queue = queue.Queue()  # unbounded: the script never waits for Tune to take a result
    with open(stdout_log, "a", encoding="utf-8") as log:
        log.write(ATTEMPT_LINE + time.strftime("%Y-%m-%d %H:%M:%S") + "\n")
    for stream, name in ((proc.stdout, "OUT"), (proc.stderr, "ERR")):
        threading.Thread(
            target=_read_lines, args=(stream, name, lines, stdout_log if name == "OUT" else None), daemon=True
        ).start()
    tails = {"OUT": collections.deque(maxlen=TAIL_LINES), "ERR": collections.deque(maxlen=TAIL_LINES)}
    file_offset, open_streams, exited_at = 0, 2, None
    try:
        watchdog = start_watchdog(proc.pid, grace_period_s)  # for a worker killed before `finally` runs
        while open_streams:
            results = []
            for name, line in _next_lines(lines, POLL_S):
                if line is None:
                    open_streams -= 1
                    continue
                (out if name == "OUT" else err).write(f"{prefixes[name]} {line}\n")
                tails[name].append(line)
                if name == "OUT" and metrics_from == "stdout":
                    results += context.feed(line)
            if metrics_from != "tensorboard":
                new_results, file_offset = read_metrics_file(metrics_file, file_offset, step_key)
                results += new_results
            results += events.poll() if events else []
            if report_new(results) or _stop_requested():
                return  # the finally block ends the command
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
                terminate_group(proc, grace_period_s)  # what the command left behind; its pipes then close
            if exited_at is not None and time.monotonic() - exited_at > grace_period_s + 5:
                break  # a process that left the group holds the pipes open; stop waiting for it
        written_late = (
            read_metrics_file(metrics_file, file_offset, step_key)[0] if metrics_from != "tensorboard" else []
        )
        if report_new(written_late + (events.poll() if events else [])):  # written just before the exit
            return
        if report_new(context.close() + (events.close() if events else []), final=True):  # what the last step printed
            return
        code = proc.wait()
        if code != 0:
            raise _failed(
                f"command exited with {_exit_status(code)}: {' '.join(argv)}",
                tails["ERR"],
                "stderr",
                no_retry=code == 2,
                why="exit code 2 is a usage error",
            )
        if parsed == 0 and last_step is None:
            raise _failed(
                _no_metrics_message(step_key, patterns, metrics_from, metrics_file, work_dir, tails),
                tails["OUT"],
                "stdout",
                no_retry=True,
                why="it exited 0: running it again prints the same",
            )
    finally:
        terminate_group(proc, grace_period_s)
        if watchdog is not None:
            os.close(watchdog)
        out.flush()
        err.flush()


def unreported_results(
    stdout_log: Path, last_step, step_key: str, patterns: list[re.Pattern], complete_when=()
) -> list[dict]:
    """Results in the stdout lines of earlier attempts (`command_stdout.txt`) past `last_step`.

    After a driver kill the command may have printed rows Tune never recorded; a resumed script
    restarts from its own checkpoint, which may be later. Each attempt's lines (after its
    `ATTEMPT_LINE`) are read with their own `StepContext`, as the trial read them.
    Returns:
        The results with step > `last_step`, in the order printed, each step once.
    """
    try:
        text = stdout_log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    found = {}
    for attempt in text.split(ATTEMPT_LINE)[1:]:
        context = StepContext(step_key, patterns, complete_when)
        for result in [r for line in attempt.splitlines()[1:] for r in context.feed(line)] + context.close():
            if result[step_key] > last_step:
                found.setdefault(result[step_key], result)
    return [found[step] for step in sorted(found)]


class TensorBoardResults:
    """Results from the TensorBoard event files a command writes under its `{trial_dir}`.

    Each scalar event is `{tag: value, step_key: event.step}`; events are grouped per step by a
    `StepContext` (a step is complete when a later step appears, or at `close`). Files are read
    incrementally with `tensorboard`'s `EventFileLoader`, which stops at a record still being
    written and continues from there at the next `poll`.
    """

    def __init__(self, folder: Path, step_key: str, complete_when=()):
        self.folder, self.step_key = folder, step_key
        self.context = StepContext(step_key, None, complete_when)
        self.loaders: dict = {}  # event file -> its EventFileLoader

    def poll(self) -> list[dict]:
        """Results completed by the events written since the last call."""
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util

        for path in sorted(self.folder.rglob("*tfevents*")):
            if path not in self.loaders:
                self.loaders[path] = EventFileLoader(str(path))
        scalars = []
        for loader in self.loaders.values():
            for event in loader.Load():
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name in ("scalars", "") and value.HasField("tensor"):
                        array = tensor_util.make_ndarray(value.tensor)
                        if array.size == 1 and array.dtype.kind in "fiu":
                            scalars.append((event.step, value.tag, array.item()))
        results = []
        for step, tag, number in sorted(scalars, key=lambda s: s[0]):  # stable: a step's tags in file order
            results += self.context.add({tag: number, self.step_key: step})
        return results

    def close(self) -> list[dict]:
        """The last step's result, after a final `poll`."""
        return self.poll() + self.context.close()


def command_env(config: dict, work_dir: Path, trial_name: str, metrics_file: Path, gpus: float) -> dict:
    """The command's environment: the worker's (with Ray's `CUDA_VISIBLE_DEVICES`) plus raysweep's.

    Args:
        config: the trial's config; each key becomes `RAYSWEEP_<KEY>` (upper case, non-alphanumerics
            as `_`), e.g. `RAYSWEEP_NOISE_RATE=0.4`.
        work_dir, trial_name, metrics_file: `RAYSWEEP_TRIAL_DIR`, `RAYSWEEP_TRIAL_NAME`, `RAYSWEEP_METRICS_FILE`.
        gpus: the trial's GPU share; for 0 < gpus < 1 `RAYSWEEP_GPU_MEMORY_FRACTION` = gpus * 0.9,
            the value a cooperative script passes to `torch.cuda.set_per_process_memory_fraction`.
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
    else:
        env.pop("RAYSWEEP_GPU_MEMORY_FRACTION", None)
    return env


def start_command(argv: list[str], env: dict, cwd: str | None = None) -> subprocess.Popen:
    """Start `argv` as the leader of a new session / process group, its pipes captured (bytes).

    The child asks the kernel for SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG),
    i.e. when the worker process is killed. The preexec function only makes one libc call,
    prepared before the fork, so it is safe in the threaded Ray worker.
    """
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_die_with_parent if _LIBC else None,
    )


def start_watchdog(pgid: int, grace_period_s: float) -> int:
    """Start a detached process that ends group `pgid` (SIGTERM, then SIGKILL after the grace
    period) as soon as this process dies or closes the returned file descriptor.

    Returns:
        The pipe's write end; `os.close` it when the trial is over (the watchdog then exits, after
        ending whatever is still left in the group).
    """
    read_end, write_end = os.pipe()  # not inheritable (PEP 446): only this process holds the write end
    try:
        launcher = subprocess.Popen(
            [
                sys.executable,
                "-S",
                str(Path(__file__).with_name("watchdog.py")),
                str(read_end),
                str(pgid),
                str(grace_period_s),
            ],
            pass_fds=(read_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        launcher.wait()  # it forks the watchdog and exits at once
    finally:
        os.close(read_end)
    return write_end


def terminate_group(proc: subprocess.Popen, grace_period_s: float) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL what is left after `grace_period_s` seconds;
    reap `proc`. Safe to call twice."""
    end_group(proc.pid, grace_period_s, reap=proc.poll)
    proc.wait()


def read_metrics_file(path: Path, offset: int, step_key: str) -> tuple[list[dict], int]:
    """Results appended to the JSON-lines file `path` since byte `offset`.

    Returns:
        (results, new offset). Only complete lines are read (a line being written stays for the
        next call); lines that are not a JSON object holding `step_key` are skipped.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    results = []
    for raw in chunk[:end].splitlines():
        try:
            result = json.loads(raw)
        except ValueError:
            continue
        if isinstance(result, dict) and isinstance(result.get(step_key), (int, float)):
            results.append(result)
    return results, offset + end


def log_prefix(trial_name: str, stream: str, gpu_ids: str, pid: int) -> str:
    """`<trial>:<stream> | [GPU <ids> | pid <pid>]`, the grid's log prefix (`trainables/logs.py`) for a
    line the command printed: stream `OUT` or `ERR`, the GPU ids Ray gave (`CPU` when none), its pid."""
    where = f"GPU {gpu_ids}" if gpu_ids else "CPU"
    return f"{trial_name}:{stream} | [{where} | pid {pid}]"


def _report(result: dict, step_key: str) -> None:
    """`tune.report` one result with a `Checkpoint` holding its step (see the module docstring)."""
    metrics = {**result, "epoch": result[step_key]} if step_key != "epoch" else result
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / STEP_FILE).write_text(json.dumps({"step": result[step_key]}))
        tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
    refresh_title()  # Ray retitled the worker around the report


def _report_divergence(result: dict, step_key: str, trial_folder: Path) -> None:
    """End a trial whose result holds NaN/inf: `divergence.json` and one last `diverged` report."""
    bad = non_finite(result)
    dump = {
        "epoch": result.get("epoch", result[step_key]),
        "step": result[step_key],
        "last_finite_loss": None,
        "parameters": [],
        "gradients": [],
        "non_finite_metrics": bad,
        "result": {k: v if k not in bad else str(v) for k, v in result.items()},
    }
    divergence.write_dump(trial_folder, dump)
    tune.report({**divergence.diverged_metrics(dump), "diverged/metrics": ",".join(bad)})


def _last_reported_step(checkpoint: Checkpoint | None, trial_folder: Path) -> float | None:
    """The highest step in Tune's checkpoint for this trial and in its `checkpoint_*` folders; None: none yet."""
    steps = []
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            steps += _read_step(Path(folder) / STEP_FILE)
    for path in trial_folder.glob(f"checkpoint_*/{STEP_FILE}"):
        steps += _read_step(path)
    return max(steps) if steps else None


def _recorded_step(result_file: Path) -> float | None:
    """The highest `epoch` (= step) in the trial's history, Tune's `result.json` (one JSON object a
    line; a line torn by a killed driver is skipped); None when it holds none.

    A step's checkpoint is stored by the worker before the driver logs its row, so after a driver
    kill the newest `checkpoint_*` folder may belong to a row the history never got: that row is
    then reported again (from `command_stdout.txt`), not lost."""
    steps = []
    for line in result_file.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("epoch"), (int, float)):
            steps.append(row["epoch"])
    return max(steps) if steps else None


def _read_step(path: Path) -> list:
    try:
        return [json.loads(path.read_text())["step"]]
    except (OSError, ValueError, KeyError, TypeError):  # a torn or foreign file: not a step
        return []


def _read_lines(stream, name: str, lines: queue.Queue, log_path: Path | None = None) -> None:
    """Put each line of `stream` (decoded, newline stripped) on `lines`, then `(name, None)` at EOF;
    append it to `log_path` (flushed) as soon as it is read: while the trial waits in `tune.report`
    for a driver that was killed, the lines still reach the file that `--resume` reads back."""
    log = open(log_path, "a", encoding="utf-8") if log_path else None
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if log:
            log.write(line + "\n")
            log.flush()
        lines.put((name, line))
    stream.close()
    if log:
        log.close()
    lines.put((name, None))


def _next_lines(lines: queue.Queue, timeout_s: float) -> list[tuple[str, str | None]]:
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


def _stop_requested() -> bool:
    """Whether Tune asked this trial to stop (the session's stop event, `session.finish`).

    Tune's public API only raises SystemExit at the next `tune.report`; reading the event lets a
    trial stopped mid-epoch end its command at once. Without that internal attribute: False.
    """
    try:
        from trainables import ray_private

        session = ray_private.train_session()
        return bool(session and session.stop_event.is_set())
    except (ImportError, AttributeError):
        return False


def _die_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _exit_status(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
    return f"exit code {code}"


def _no_metrics_message(
    step_key: str, patterns: list, metrics_from: str, metrics_file: Path, work_dir: Path, tails: dict
) -> str:
    if metrics_from == "tensorboard":
        expected = f"TensorBoard scalars in event files under {work_dir} (write them to {{trial_dir}})"
    else:
        expected = (
            f"stdout lines matching --metric-pattern {' or '.join(repr(p.pattern) for p in patterns)}"
            if patterns
            else f"stdout lines with `name=<number>` or `name: <number>` (e.g. `{step_key}=3 val_acc=0.81`)"
        )
        expected = (
            expected + " or " if metrics_from == "stdout" else ""
        ) + f"JSON lines in ${METRICS_FILE_ENV} ({metrics_file})"
    hint = ""
    if metrics_from == "stdout" and any(line_metrics(line, step_key, patterns) for line in tails["ERR"]):
        hint = " (such lines went to stderr, which is not read for metrics: print them to stdout)"
    return f"command exited 0 but reported no metric: expected {expected}{hint}"


def _failed(summary: str, tail, stream: str, no_retry: bool, why: str) -> CommandFailed:
    """The error of a failed command: `summary`, the tail of `stream`, and a last line (the one the
    console shows) quoting that tail. With `no_retry`, first a report that tells Tune not to retry."""
    tail = list(tail)
    if no_retry:
        tune.report({NO_RETRY_METRIC: 1})
    quoted = " | ".join(line.strip() for line in tail[-QUOTED_LINES:] if line.strip()) or f"(no {stream} output)"
    last = summary.split(": ", 1)[0] if summary.startswith("command exited with") else summary.split(": expected")[0]
    return CommandFailed(
        f"{summary}\nlast {len(tail)} lines of {stream}:\n"
        + "\n".join(tail)
        + "\n"
        + f"{last}{f' (not retried: {why})' if no_retry else ''}; {stream} ends: {quoted}"
    )


def _trial_name_and_folder() -> tuple[str, Path]:
    """Tune's name of the running trial and the folder that holds `{trial_dir}` and the metrics file
    (`trainables/storage.py:trial_folder`: the same for a retry and for `--resume`, on any node)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tune.get_context().get_trial_name(), storage.trial_folder()
