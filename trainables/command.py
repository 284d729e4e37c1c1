"""Sweep any training command: each Tune trial runs the user's own script as a subprocess.

    tune.with_parameters(train_command, template=["python", "train.py", "--noise-rate", "{noise_rate}",
                                                  "--seed", "{seed}", "--out", "{trial_dir}"])

How results are read, why the last reported step lives in a Tune `Checkpoint`, and which ends of a
trial end the command's process group: `docs/command-trial-internals.md`.
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
from trainables.command_parse import (
    JOINS_STEP_METRIC,
    NO_RETRY_METRIC,
    STREAMS_READ,
    StepContext,
    format_value,
    non_finite,
    render,
)
from trainables.command_sources import (  # noqa: F401  (read_metrics_file, TensorBoardResults: also for --check)
    STDOUT_LOG,
    STEP_FILE,
    StreamLog,
    TensorBoardResults,
    last_reported_step,
    no_metrics_message,
    read_metrics_file,
    recorded_steps,
    unreported_results,
)
from trainables.config import TrainConfig
from trainables.gpu import memory_fraction_for, trial_gpu_fraction
from trainables.proctitle import refresh_title, titled_trial
from trainables.report import METRICS_FILE_ENV
from trainables.watchdog import end_group, start_watchdog, terminate_group  # noqa: F401  (terminate_group: also for --check)
from trainables.workdir import fill_work_dir

WORK_DIR = "work"  # <trial folder on storage>/work: {trial_dir}, kept across retries and --resume
METRICS_FILE = "metrics.jsonl"  # <trial folder on storage>/metrics.jsonl: $RAYSWEEP_METRICS_FILE
TAIL_LINES = 30  # stderr / stdout lines quoted in a trial's error
QUOTED_LINES = 3  # of which the error's last line quotes this many
POLL_S = 0.2  # how often the loop checks the stop event, the metrics file and the process
STREAM_NAMES = {"OUT": "stdout", "ERR": "stderr"}  # the log prefix's name of a stream -> --metrics-from's

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
    metrics_from: str = "output",
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
        metrics_from: `output` (stdout and stderr lines, interleaved as read, and the JSON-lines
            file), `stdout` or `stderr` (that stream's lines and the file), `jsonl` (the file only) or
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
    streams = STREAMS_READ.get(metrics_from, ())
    last_step = last_reported_step(tune.get_checkpoint(), trial_folder)
    restarted = last_step is not None or stdout_log.exists()  # a retry or --resume of this trial
    recorded = None  # the steps in the trial's own history; a checkpoint may outlive its row
    if restarted and (trial_folder / "result.json").exists():
        recorded = recorded_steps(trial_folder / "result.json")
        last_step = max(recorded, default=None)
    parsed = 0  # results seen in this run, reported or skipped as reported before
    last_result = None  # the result last reported by this attempt

    def report_new(results: list[dict], final: bool = False, missing: bool = False) -> bool:
        """Report the results not reported before; True when one diverged (the trial then ends).
        A final result (printed after the last step line) may share the last reported step: it is
        then reported joined to that step's row, marked `JOINS_STEP_METRIC` (the tables keep only
        the joined row); `missing` results are rows the history lacks, reported whatever their step."""
        nonlocal last_step, parsed, last_result
        for result in results:
            parsed += 1
            if non_finite(result):
                _report_divergence(result, step_key, trial_folder)
                return True
            if (
                not missing
                and last_step is not None
                and (result[step_key] < last_step or (result[step_key] == last_step and not final))
            ):
                continue  # reported before a retry / resume; the script redid it from its own checkpoint
            if final and last_result is not None and last_result[step_key] == result[step_key]:
                result = {**last_result, **result, JOINS_STEP_METRIC: 1}
            _report(result, step_key)
            last_result = result
            last_step = result[step_key] if last_step is None else max(last_step, result[step_key])
        return False

    recovered = (
        unreported_results(
            stdout_log,
            last_step if last_step is not None else -math.inf,
            step_key,
            patterns,
            complete_when,
            streams,
            recorded,
        )
        if restarted and streams
        else []
    )
    if recovered:
        print(
            f"{trial_name}: reporting {len(recovered)} row(s) printed before the restart but never reported "
            f"(steps {recovered[0][step_key]}..{recovered[-1][step_key]}, from {stdout_log.name})",
            flush=True,
        )
    if report_new(recovered, missing=True):
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
    log = StreamLog(stdout_log)  # both streams, in the order read, for a retry and --resume
    for stream, name in ((proc.stdout, "OUT"), (proc.stderr, "ERR")):
        threading.Thread(target=_read_lines, args=(stream, name, lines, log), daemon=True).start()
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
                if STREAM_NAMES[name] in streams:
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
                no_metrics_message(step_key, patterns, metrics_from, metrics_file, work_dir, tails),
                tails["OUT"],
                "stdout",
                no_retry=True,
                why="it exited 0: running it again prints the same",
            )
    finally:
        terminate_group(proc, grace_period_s)
        log.close()
        if watchdog is not None:
            os.close(watchdog)
        out.flush()
        err.flush()


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


def _read_lines(stream, name: str, lines: queue.Queue, log: StreamLog) -> None:
    """Put each line of `stream` (decoded, newline stripped) on `lines` and in `log` as soon as it is
    read (`StreamLog.put`), then `(name, None)` at EOF."""
    for raw in iter(stream.readline, b""):
        log.put(name, raw.decode("utf-8", errors="replace").rstrip("\r\n"), lines)
    stream.close()
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
