"""Sweep any training command: each Tune trial runs the user's own script as a subprocess.

    tune.with_parameters(train_command, template=["python", "train.py", "--noise-rate", "{noise_rate}",
                                                  "--seed", "{seed}", "--out", "{trial_dir}"])

How results are read, why the last reported step lives in a Tune `Checkpoint`, and which ends of a
trial end the command's process group: `docs/command-trial-internals.md`.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import ray
from ray import tune

from trainables.command.failure import take_turn, verdict
from trainables.command.gpu_sharing import GpuSharing, cap_line, mps_env
from trainables.command.key_sources import SourceRecord
from trainables.command.parse import (
    METRICS_FROM,
    STEP_KEY,
    STREAMS_READ,
    StepContext,
    render,
)
from trainables.command.process import (
    CommandOutput,
    Reading,
    command_env,
    exit_code_soon,
    log_prefix,
    start_command,
    start_readers,
    tracker_env,
    trackers_named,
)
from trainables.command.sources import (
    OUTPUT_FILES,
    STDOUT_LOG,
    StreamLog,
    catch_up,
    record_reader,
    unreported_results,
    unreported_tracker_rows,
)
from trainables.command.startup import Startup, before_command
from trainables.command.step_reporter import StepReporter
from trainables.command.trackers import TRACKERS
from trainables.command.watchdog import GRACE_PERIOD_S, WRITE_WAIT_S, Writes, start_watchdog, terminate_group
from trainables.command.workdir import code_folder, fill_work_dir, keep_new_paths
from trainables.experiment import records, storage
from trainables.experiment.objective import Objective
from trainables.experiment.trial_end import ended_before_restart
from trainables.gpu_share import trial_gpu_fraction
from trainables.gpu_use import gpu_report, process_tree_reader, record_placement, sample_gpu_utilization
from trainables.proctitle import titled_trial

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
    gpu_sharing: GpuSharing = GpuSharing(),
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
        gpu_sharing: a fractional trial's memory cap at CUDA start and MPS (`trainables/command/gpu_sharing.py`).
    Reports: each result's metrics, plus `epoch` (= the step) when `step_key` is not `epoch`;
        a diverged trial's last report is `divergence.diverged_metrics` plus `diverged/metrics`.
        A retry or `--resume` first reports the printed results never reported (`StepReporter`).
    Raises:
        CommandFailed: the command exited non-zero, or exited 0 without a metric of the objective (`no
            metric`); see `trainables/command/failure.py` (its record, and which failures are not retried).
    """
    patterns = [re.compile(p) for p in ([metric_pattern] if isinstance(metric_pattern, str) else metric_pattern or [])]
    trial_name, trial_folder = _trial_name_and_folder()
    gpus = trial_gpu_fraction()
    gpu_ids = record_placement(trial_folder, gpus)  # the progress line names its GPU from now on
    work_dir, metrics_file = files = _trial_files(trial_folder, code_dir)
    reading = Reading(step_key, patterns, objective, metrics_from, metrics_file, work_dir)
    reporter = StepReporter.after_restart(step_key, trial_folder, tune.get_checkpoint())
    reporter.extra_metrics = gpu_report(gpu_ids, gpus, [])
    reporter.works_when = (objective.metric,) if objective else ()
    with reporter.holding_stop():  # Tune's stop waits (at most 5 s) for the rows read with it (and read after it)
        recovered = _report_recovered(reporter, trial_name, reading)
        if recovered or (reporter.restarted and ended_before_restart(trial_name)):
            return  # it diverged, or it ended, before the restart: its command is not run again
        if not take_turn(reporter, _stop_requested):
            return  # Tune ended the trial while it waited for its turn
        echo = {"OUT": sys.stdout, "ERR": sys.stderr}  # Tune's tees into this trial's files, bound now
        with before_command(reporter, trial_name) as startup:  # each failure until the command runs ends the ticket
            argv, env, cwd = _prepare_command(
                template, config, trial_name, files, code_dir, cwd, metrics_from, gpu_sharing, startup
            )
            startup.enter("program")
            proc, output = _start_and_watch(argv, env, cwd, trial_name, echo, reading)
        reporter.ticket.call("started")  # the gate's survival window runs from the command's start
        reporter.command_exited = lambda: proc.poll() is not None  # a stop then waits for its last rows
        writes = Writes([str(trial_folder)] + ([cwd] if cwd else []), write_wait_s)  # waited for before any SIGTERM
        watchdog = None
        try:
            watchdog = start_watchdog(proc.pid, grace_period_s, writes)  # for a worker killed before `finally` runs
            with sample_gpu_utilization(process_tree_reader(proc.pid, gpu_ids) if gpu_ids else None) as samples:
                reporter.extra_metrics = gpu_report(gpu_ids, gpus, samples)  # NVML, once a second
                if not _read_and_report(proc, output, reporter, grace_period_s, writes):
                    verdict(proc.wait(), argv, reporter, output, reading, cwd, gpus)
                    _keep_new_paths(code_dir, work_dir, trial_name)  # it exited 0
        finally:
            _end_command(proc, output, reporter, grace_period_s, writes, watchdog)


train_command.uses_failure_gate = True  # the sweep opens its failure gate (trainables/command/initial_failures.py)


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
    """On a restart, report the rows written before it but never reported, before the command starts
    again: as the live read chooses (`unreported_tracker_rows`), the rows of the tracker records
    --metrics-from reads under `{trial_dir}` when one holds --metric (printed values, rounded, are then
    not rows), else those printed (`command_stdout.txt`, first caught up with the lines a killed worker
    never read: `catch_up`); True when one diverged (the trial then ends)."""
    metrics_from, patterns, objective = reading.metrics_from, reading.patterns, reading.objective
    streams = STREAMS_READ.get(metrics_from, ())
    catch_up(reporter.trial_folder)
    stdout_log = reporter.trial_folder / STDOUT_LOG
    last_step, key, restarted = reporter.last_step, reporter.step_key, reporter.restarted
    metric = objective.metric if objective else None
    printed = unreported_results(stdout_log, -math.inf, key, patterns, objective, streams) if restarted else []
    recovered, origin = [], stdout_log.name
    if restarted and (metrics_from in TRACKERS or metrics_from == "output"):
        recovered, origin = unreported_tracker_rows(reading.work_dir, reporter, metrics_from, objective, printed)
    elif any(metric is None or metric in row for row in printed):
        last = last_step if last_step is not None else -math.inf
        recovered = unreported_results(stdout_log, last, key, patterns, objective, streams, reporter.recorded)
    if recovered:
        print(
            f"{trial_name}: reporting {len(recovered)} row(s) written before the restart but never reported "
            f"(steps {recovered[0][key]}..{recovered[-1][key]}, from {origin})",
            flush=True,
        )
    diverged = reporter.report_new(recovered, missing=True)
    reporter.parsed = 0  # counts the results of this run only
    return diverged


def _prepare_command(
    template, config, trial_name, files, code_dir, cwd, metrics_from, sharing: GpuSharing, startup: Startup
) -> tuple[list, dict, str]:
    """The command's argv, environment and folder: `{trial_dir}` filled with the code snapshot when
    there is one (`code_dir`, `fill_work_dir`; a linked data path the command names and this node
    lacks raises `workdir.MissingOnNode`), else `cwd`; `files`: `{trial_dir}` and the metrics file;
    `startup`: each step is entered there (`startup.STEPS`). W&B and MLflow point at `{trial_dir}`
    where the environment leaves them unset (`tracker_env`), said in the log; so is a fractional
    trial's GPU sharing (`sharing`)."""
    work_dir, metrics_file = files
    startup.enter("snapshot")
    snapshot = code_folder(code_dir) if code_dir else None
    startup.enter("work folder")
    argv = render(template, config, str(work_dir), trial_name, gpu=",".join(map(str, ray.get_gpu_ids())))
    if snapshot is not None:
        cwd = str(fill_work_dir(snapshot, work_dir, argv))
    else:
        work_dir.mkdir(parents=True, exist_ok=True)
    startup.enter("environment")
    share = trial_gpu_fraction()
    env = command_env(config, work_dir, trial_name, metrics_file, share, sharing.memory_cap)
    for line in filter(None, (cap_line(env), mps_env(env, share, sharing))):
        print(f"{trial_name}: {line}", flush=True)
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
    return proc, CommandOutput(
        start_readers(proc, log, outputs),
        {
            name: log_prefix(trial_name, name, os.environ.get("CUDA_VISIBLE_DEVICES", ""), proc.command_pid)
            for name in echo
        },
        echo,
        StepContext(step_key, reading.patterns, reading.objective),
        STREAMS_READ.get(metrics_from, ()),
        None if metrics_from in TRACKERS else metrics_file,
        records_read,
        step_key,
        log,
    )


def _read_and_report(proc, output: CommandOutput, reporter: StepReporter, grace_period_s: float, writes) -> bool:
    """Report each result as the command's output arrives, until its pipes close (or a process that left the group
    holds them open) and the last lines are read; True when the trial ends early (it diverged, or Tune stopped it:
    the command is then ended after its `writes`, and what it wrote is still read, into `late_rows.json`)."""
    exited_at = cut = None  # cut: Tune stopped the trial while its command still ran
    sources = SourceRecord(reporter.trial_folder)  # where each reported metric was read: metric_sources.json
    while output.open_streams:
        if reporter.report_new(output.poll(POLL_S)):
            return True  # the caller's finally block ends the command
        sources.update(reporter.seen, output.origins())
        reporter.stopped = reporter.stopped or _stop_requested()
        if reporter.stopped and cut is None:
            cut = reporter.cut = proc.poll() is None  # still training: the step it was in is not kept
            reporter.keep_late()  # at once: the worker may be ended before the last lines are read
            terminate_group(proc, grace_period_s, writes)
            exited_at = time.monotonic() - grace_period_s - 4  # its last lines: 1 s more (Tune reuses workers in 2)
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
            terminate_group(proc, grace_period_s)  # what the command left behind; its pipes then close
        if exited_at is not None and time.monotonic() - exited_at > grace_period_s + 5:
            break  # a process that left the group holds the pipes open; stop waiting for it
    reporter.cut = bool(cut)  # not stopped while it ran: a stop from now on finds it ended by itself
    events, written = output.events, output.written_since()
    if reporter.report_new(events.poll(written) if events else written):  # written just before the exit
        return True
    # what the last step printed (not a step a stopped command was cut in; a crash before any step: a config dump)
    last = output.context.close(exit_code_soon(proc) not in (None, 0), cut=bool(cut))
    ended = reporter.report_new(events.close(last) if events else last, final=True)
    sources.update(reporter.seen, output.origins())
    return ended or reporter.stopped


def _end_command(
    proc, output: CommandOutput, reporter: StepReporter, grace_period_s: float, writes: Writes, watchdog: int | None
) -> None:
    """End what is left of the command's group (after its writes, within the grace period; `watchdog`: its pipe),
    keep a stopped trial's last rows, leave the sweep's gate, close `command_stdout.txt`, flush stdout/stderr."""
    terminate_group(proc, grace_period_s, writes)
    reporter.keep_late()
    reporter.ticket.call("left")
    output.log.close()
    if watchdog is not None:
        os.close(watchdog)
    for stream in output.echo.values():
        stream.flush()
    if reporter.stopped:  # end as Tune's report does (it cleared its stop event): else Tune waits for a last result
        raise SystemExit(0)


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
