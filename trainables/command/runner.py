"""Sweep any training command: each Tune trial runs the user's own script as a subprocess.

    tune.with_parameters(train_command, template=["python", "train.py", "--noise-rate", "{noise_rate}",
                                                  "--seed", "{seed}", "--out", "{trial_dir}"])

How results are read, why the last reported step lives in a Tune `Checkpoint`, and which ends of a
trial end the command's process group: `docs/command-trial-internals.md`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import ray
from ray import tune
from ray.tune import Checkpoint

from trainables import divergence
from trainables.command.failure import fail, take_turn, verdict
from trainables.command.failure_gate import GateTicket
from trainables.command.parse import (
    METRICS_FROM,
    STEP_KEY,
    STREAMS_READ,
    StepContext,
    non_finite,
    render,
)
from trainables.command.process import (
    CommandOutput,
    Reading,
    command_env,
    command_pid,
    exit_code_soon,
    log_prefix,
    start_command,
    start_readers,
)
from trainables.command.sources import (
    OUTPUT_FILES,
    STDOUT_LOG,
    StreamLog,
    catch_up,
    last_reported_step,
    record_reader,
    recorded_steps,
    unreported_results,
    unreported_tracker_rows,
)
from trainables.command.trackers import TRACKERS, sources_of, tracker_env, trackers_named
from trainables.command.watchdog import GRACE_PERIOD_S, WRITE_WAIT_S, Writes, start_watchdog, terminate_group
from trainables.command.workdir import MissingOnNode, code_folder, fill_work_dir, keep_new_paths
from trainables.experiment import records, storage
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import MISSING_ON_NODE, TrialFailure
from trainables.gpu_share import trial_gpu_fraction
from trainables.proctitle import refresh_title, titled_trial

METRICS_FILE = "metrics.jsonl"  # <trial folder on storage>/metrics.jsonl: $RAYSWEEP_METRICS_FILE
POLL_S = 0.2  # how often the loop checks the stop event, the metrics file and the process


@titled_trial  # the worker shows `ray::<trial name>`; the command gets RAYSWEEP_TRIAL_NAME
def train_command(
    config: dict,
    *,
    template: list[str],
    step_key: str = STEP_KEY,
    metric_pattern: str | list[str] | None = None,
    metrics_from: str = METRICS_FROM,
    objective: Objective | None = None,
    grace_period_s: float = GRACE_PERIOD_S,
    write_wait_s: float = WRITE_WAIT_S,
    cwd: str | None = None,
    code_dir: str | None = None,
) -> None:
    """Run one trial's command and report what it prints (Tune Function API).

    Args:
        config: the trial's config; every key fills `{key}` in the template and `RAYSWEEP_<KEY>`.
        template: the command as argv with `{name}` placeholders (config keys, `trial_dir`,
            `trial_name`), checked beforehand by `sweeps/engine/command_sweep/command_template.py:check_template`.
        step_key: the metric counting progress (`command_parse.StepContext` groups results by it).
        metric_pattern: regex(es) with named groups for printed lines, one per line shape;
            None: `key=value` / `key: value` pairs.
        metrics_from: `output`, `stdout`, `stderr`, `jsonl`, `tensorboard`, `wandb`, `mlflow`, `csv` or
            `hf`: where results are read (docs/command-trial-internals.md).
        objective: the sweep's: the presence of its metric and test metric completes a step's result
            at once (`Objective.step_metrics`; else a step is reported when the next one starts); a command
            that exits 0 without each fails.
        grace_period_s: seconds between SIGTERM and SIGKILL when the trial's processes are ended.
        write_wait_s: before that SIGTERM, the longest wait for its writes to finish (`watchdog.wait_for_writes`).
        cwd: folder the command runs in when there is no `code_dir` (`--in-place`: the launch
            folder); None: the worker's folder, which Tune sets to the trial folder.
        code_dir: the launch's code snapshot (`sweeps/engine/command_sweep/code_snapshot.py`; `workdir.code_folder`),
            copied at the launch folder's place (`workdir.fill_work_dir`), where the command runs.
    Reports: each result's metrics, plus `epoch` (= the step) when `step_key` is not `epoch`;
        a diverged trial's last report is `divergence.diverged_metrics` plus `diverged/metrics`.
        A retry or `--resume` first reports the printed results never reported (`StepReporter`).
    Raises:
        CommandFailed: the command exited non-zero, or exited 0 without a metric of the objective (`no
            metric`); see `trainables/command/failure.py` (its record, and which failures are not retried).
    """
    patterns = [re.compile(p) for p in ([metric_pattern] if isinstance(metric_pattern, str) else metric_pattern or [])]
    trial_name, trial_folder = _trial_name_and_folder()
    work_dir, metrics_file = files = _trial_files(trial_folder, code_dir)
    reading = Reading(step_key, patterns, objective, metrics_from, metrics_file, work_dir)
    reporter = StepReporter.after_restart(step_key, trial_folder, tune.get_checkpoint())
    recovered = _report_recovered(reporter, trial_name, reading)
    if recovered or not take_turn(reporter, _stop_requested):
        return  # it diverged before the restart, or Tune ended the trial while it waited for its turn
    argv, env, cwd = _prepare_command(template, config, trial_name, files, code_dir, cwd, metrics_from)
    echo = {"OUT": sys.stdout, "ERR": sys.stderr}  # Tune's tees into this trial's files, bound now
    proc, output = _start_and_watch(argv, env, cwd, trial_name, echo, reading)
    reporter.ticket.call("started")  # the gate's survival window runs from the command's start
    writes = Writes([str(trial_folder)] + ([cwd] if cwd else []), write_wait_s)  # waited for before any SIGTERM
    watchdog = None
    try:
        watchdog = start_watchdog(proc.pid, grace_period_s, writes)  # for a worker killed before `finally` runs
        if not _read_and_report(proc, output, reporter, grace_period_s):
            verdict(proc.wait(), argv, reporter, output, reading, cwd)
            _keep_new_paths(code_dir, work_dir, trial_name)  # it exited 0
    finally:
        _end_command(proc, output, reporter, grace_period_s, writes, watchdog)


train_command.uses_failure_gate = True  # the sweep opens its failure gate (trainables/command/initial_failures.py)


@dataclasses.dataclass
class StepReporter:
    """Reports each result once, across retries and `--resume`: results at or below the last step
    reported before (the step Checkpoint, or the trial's history) are skipped."""

    step_key: str
    trial_folder: Path
    last_step: float | None = None  # the highest step reported, by this attempt or one before it
    recorded: set | None = None  # the steps in the trial's own history; a checkpoint may outlive its row
    restarted: bool = False  # a retry or --resume of this trial
    parsed: int = 0  # results seen in this run, reported or skipped as reported before
    seen: dict = dataclasses.field(default_factory=dict)  # the metric names of those results, in first-seen order
    reported_before: bool = False  # an earlier attempt reported a result (its metric names are not known here)
    last_result: dict | None = None  # the result last reported by this attempt
    ticket: GateTicket = dataclasses.field(default_factory=GateTicket)  # told of the first result reported

    @classmethod
    def after_restart(cls, step_key: str, trial_folder: Path, checkpoint) -> StepReporter:
        """The reporter of a trial whose Tune `checkpoint` (None on a first start) and folder say
        where a retry or `--resume` goes on from. Its `checkpoint_*` folders count only beside the trial's
        history (`result.json`): the worker stores a step's checkpoint before the driver logs its row, and a
        worker killed before any row was logged left a folder whose rows the history never got."""
        history = trial_folder / "result.json"
        last_step = last_reported_step(checkpoint, trial_folder if history.exists() else None)
        restarted = last_step is not None or (trial_folder / STDOUT_LOG).exists()
        recorded = None
        if restarted and history.exists():
            recorded = recorded_steps(history)
            last_step = max(recorded, default=None)
        return cls(step_key, trial_folder, last_step, recorded, restarted, reported_before=last_step is not None)

    def report_new(self, results: list[dict], final: bool = False, missing: bool = False) -> bool:
        """Report the results not reported before; True when one diverged (the trial then ends).
        A final result (printed after the last step line) may share the last reported step: it is
        then reported joined to that step's row, marked `records.JOINS_STEP_METRIC` (the tables keep only
        the joined row); `missing` results are rows the history lacks, reported whatever their step."""
        key = self.step_key
        for result in results:
            self.parsed += 1
            self.seen.update(dict.fromkeys(result))
            if non_finite(result):
                _report_divergence(result, key, self.trial_folder)
                return True
            last = self.last_step
            if not missing and last is not None and (result[key] < last or (result[key] == last and not final)):
                continue  # reported before a retry / resume; the script redid it from its own checkpoint
            if final and self.last_result is not None and self.last_result[key] == result[key]:
                result = {**self.last_result, **result, records.JOINS_STEP_METRIC: 1}
            _report(result, key)
            if self.last_result is None:
                self.ticket.call("reported")  # the command works: the sweep's other trials may start
            self.last_result = result
            self.last_step = result[key] if last is None else max(last, result[key])
        return False


def _trial_files(trial_folder: Path, code_dir: str | None) -> tuple[Path, Path]:
    """The trial's `{trial_dir}` (made by `_prepare_command`) and its (empty) metrics file, made if missing.
    With object storage, Tune uploads the trial's folder and follows links: a working folder in a
    mirror of the folders around the launch folder (`code_dir`) then lies on the node, outside it."""
    work_dir = records.work_dir(trial_folder)
    if code_dir and storage.trial_storage_dir() is None:
        work_dir = records.node_work_dir(trial_folder)
    metrics_file = trial_folder / METRICS_FILE
    metrics_file.touch()
    return work_dir, metrics_file


def _report_recovered(reporter: StepReporter, trial_name: str, reading: Reading) -> bool:
    """On a restart, report the rows printed before it (`command_stdout.txt`, first caught up with the
    lines a killed worker never read: `catch_up`), or else written to the tracker records
    --metrics-from reads under `{trial_dir}`, but never reported, before the command starts again;
    True when one diverged (the trial then ends)."""
    metrics_from, patterns, objective = reading.metrics_from, reading.patterns, reading.objective
    streams = STREAMS_READ.get(metrics_from, ())
    catch_up(reporter.trial_folder)
    stdout_log = reporter.trial_folder / STDOUT_LOG
    last_step, key = reporter.last_step, reporter.step_key
    restarted, metric = reporter.restarted, objective.metric if objective else None
    printed = unreported_results(stdout_log, -math.inf, key, patterns, objective, streams) if restarted else []
    trackers = metrics_from in TRACKERS or metrics_from == "output"
    recovered, origin = [], stdout_log.name
    if printed and (not trackers or any(metric is None or metric in row for row in printed)):
        last = last_step if last_step is not None else -math.inf
        recovered = unreported_results(stdout_log, last, key, patterns, objective, streams, reporter.recorded)
    elif restarted and trackers:  # `output`: the printed rows hold no --metric; a tracker's may
        recovered, origin = unreported_tracker_rows(reading.work_dir, reporter, sources_of(metrics_from), objective)
    if recovered:
        print(
            f"{trial_name}: reporting {len(recovered)} row(s) written before the restart but never reported "
            f"(steps {recovered[0][key]}..{recovered[-1][key]}, from {origin})",
            flush=True,
        )
    diverged = reporter.report_new(recovered, missing=True)
    reporter.parsed = 0  # counts the results of this run only
    return diverged


def _prepare_command(template, config, trial_name, files, code_dir, cwd, metrics_from) -> tuple[list, dict, str]:
    """The command's argv, environment and folder: `{trial_dir}` filled with the code snapshot when
    there is one (`code_dir`, `fill_work_dir`), else `cwd`; `files`: `{trial_dir}` and the metrics
    file. A folder around the launch folder missing on this node fails the trial once, not retried
    (`workdir.MissingOnNode`). W&B and MLflow point at `{trial_dir}` where the environment leaves them
    unset (`tracker_env`), said in the log."""
    work_dir, metrics_file = files
    if code_dir:
        try:
            cwd = str(fill_work_dir(code_folder(code_dir), work_dir))
        except MissingOnNode as e:
            why = "the path is missing on this node"
            failure = TrialFailure(MISSING_ON_NODE, MISSING_ON_NODE, None, None, None, (), "stderr", str(e))
            raise fail(dataclasses.replace(failure, not_retried=why), metrics_file.parent) from None
    else:
        work_dir.mkdir(parents=True, exist_ok=True)
    argv = render(template, config, str(work_dir), trial_name, gpu=",".join(map(str, ray.get_gpu_ids())))
    env = command_env(config, work_dir, trial_name, metrics_file, trial_gpu_fraction())
    set_now = tracker_env(env, work_dir, metrics_from, trackers_named(argv, Path(cwd or os.getcwd()), metrics_from))
    if set_now:
        print(f"{trial_name}: {' '.join(set_now)} (unset in the environment; the trackers' records stay in the trial)")
    return argv, env, cwd


def _keep_new_paths(code_dir: str | None, work_dir: Path, trial_name: str) -> None:
    """Move what a command that exited 0 created through `..` to the real folders (`workdir.keep_new_paths`)."""
    moved = keep_new_paths(code_folder(code_dir), work_dir) if code_dir else []
    if moved:
        print(f"{trial_name}: what the command created through `..` moved to {', '.join(map(str, moved))}", flush=True)


def _start_and_watch(argv, env: dict, cwd, trial_name: str, echo: dict, reading: Reading) -> tuple:
    """Start the command, its stdout and stderr going to the trial folder's `OUTPUT_FILES`, and read
    them into `command_stdout.txt` (both streams, in the order read, for a retry and --resume; this
    attempt's first line is written before the command starts) and into a `CommandOutput`;
    `reading`: how the results are read (the metrics file's folder, the trial's, holds the output files;
    TensorBoard events and tracker records are read under `{trial_dir}`). Returns (the process, its output)."""
    step_key, metrics_from, metrics_file = reading.step_key, reading.metrics_from, reading.metrics_file
    records_read = record_reader(metrics_from, reading.work_dir, step_key, reading.objective, since=time.time() - 2.0)
    log = StreamLog(metrics_file.parent / STDOUT_LOG)
    outputs = {name: metrics_file.parent / file for name, file in OUTPUT_FILES.items()}
    try:
        proc = start_command(argv, env, cwd, outputs)
    except BaseException:
        log.close()
        raise
    pid = command_pid(proc)  # the script's, not the shim's
    return proc, CommandOutput(
        start_readers(proc, log, outputs),
        {name: log_prefix(trial_name, name, env.get("CUDA_VISIBLE_DEVICES", ""), pid) for name in echo},
        echo,
        StepContext(step_key, reading.patterns, reading.objective),
        STREAMS_READ.get(metrics_from, ()),
        None if metrics_from in TRACKERS else metrics_file,
        records_read,
        step_key,
        log,
    )


def _read_and_report(proc, output: CommandOutput, reporter: StepReporter, grace_period_s: float) -> bool:
    """Report each result as the command's output arrives, until its pipes close (or a process that
    left the group holds them open) and the last lines are read; True when the trial ends early (a
    diverged result, or Tune asked it to stop)."""
    exited_at = None
    while output.open_streams:
        if reporter.report_new(output.poll(POLL_S)) or _stop_requested():
            return True  # the caller's finally block ends the command
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
            terminate_group(proc, grace_period_s)  # what the command left behind; its pipes then close
        if exited_at is not None and time.monotonic() - exited_at > grace_period_s + 5:
            break  # a process that left the group holds the pipes open; stop waiting for it
    events, written = output.events, output.written_since()
    if reporter.report_new(events.poll(written) if events else written):  # written just before the exit
        return True
    # what the last step printed; a script that crashed before its first step printed no result (a config dump)
    last = output.context.close(exit_code_soon(proc) not in (None, 0))
    return reporter.report_new(events.close(last) if events else last, final=True)


def _end_command(
    proc, output: CommandOutput, reporter: StepReporter, grace_period_s: float, writes: Writes, watchdog: int | None
) -> None:
    """End what is left of the command's group (after its writes, within the grace period; `watchdog`: the
    watchdog's pipe), leave the sweep's gate, close `command_stdout.txt` and flush the trial's stdout/stderr."""
    terminate_group(proc, grace_period_s, writes)
    reporter.ticket.call("left")
    output.log.close()
    if watchdog is not None:
        os.close(watchdog)
    for stream in output.echo.values():
        stream.flush()


def _report(result: dict, step_key: str) -> None:
    """`tune.report` one result with a `Checkpoint` holding its step (see the module docstring)."""
    metrics = {**result, "epoch": result[step_key]} if step_key != "epoch" else result
    with tempfile.TemporaryDirectory() as folder:
        records.write_command_step(folder, result[step_key])
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


def _trial_name_and_folder() -> tuple[str, Path]:
    """Tune's name of the running trial and the folder that holds `{trial_dir}` and the metrics file
    (`trainables/experiment/storage.py:trial_folder`: the same for a retry and for `--resume`, on any node)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tune.get_context().get_trial_name(), storage.trial_folder()
