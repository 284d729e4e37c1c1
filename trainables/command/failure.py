"""How a command trial fails: the verdict on its exit, its failure as a typed record, and the error Tune sees.

Every failure is first a `TrialFailure` (`trainables/experiment/outcome.py`): written to the trial's
`failure.json` (`records.write_failure`), reported as marks in the trial's last result (not retried,
failed before any metric, no metric), then raised as `CommandFailed`, whose text is written from the
record for the trial's `error.txt`. The sweep's gate gets the record's `signature`
(`trainables/command/failure_gate.py`); the sweep's outcome (`trainables/command/initial_failures.py`)
and `--check` read its fields, never the error's text.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

from ray import tune

from trainables.command.failure_gate import (
    EARLY_FAILURE,
    EARLY_FAILURE_METRIC,
    FAILURE_SIGNATURE_METRIC,
    WORKING_FOLDER,
    GateTicket,
    exception_line,
    missing_path,
    signature,
)
from trainables.command.parse import NO_RETRY_METRIC
from trainables.command.process import Reading, exit_status
from trainables.command.sources import no_metrics_message
from trainables.command.trackers import TrackerResults, describe_sources, sources_of
from trainables.experiment import records
from trainables.experiment.outcome import CRASHED, NO_METRIC, NOT_STARTED, OUT_OF_MEMORY, TrialFailure, failure_marks
from trainables.gpu_oom import GpuOutOfMemory, is_oom_line

QUOTED_LINES = 3  # of which the error's last line quotes this many


class CommandFailed(RuntimeError):
    """The trial's command exited with an error, or without the sweep's metric (see `TrialFailure`)."""


class CommandOutOfMemory(CommandFailed, GpuOutOfMemory):
    """The command ran out of GPU memory at the trial's share: the sweep re-queues it with twice the share."""


def crash_failure(code: int, stderr_tail, command: str, working_folder: str, blank: dict, early: bool) -> TrialFailure:
    """The record of a command that exited non-zero (`code`, its last stderr lines); `blank`: what
    `signature` replaces (the trial's folder and name), so the same error in two trials is one."""
    tail = tuple(stderr_tail)
    return TrialFailure(
        kind=CRASHED,
        signature=signature(code, tail, blank),
        exit_code=code,
        exception=exception_line(tail),
        missing_path=missing_path("\n".join(tail)),
        tail=tail,
        source="stderr",
        summary=f"command exited with {exit_status(code)}" + (f" {EARLY_FAILURE}" if early else ""),
        command=command,
        working_folder=working_folder,
        early=early,
    )


def verdict(code: int, argv: list[str], reporter, output, reading: Reading, cwd: str | None, gpus: float = 0.0) -> None:
    """Raise CommandFailed when the command exited non-zero, or exited 0 without each metric of the
    objective (`Objective.step_metrics`; or with no result at all); `cwd`: the folder it ran in (None: the
    worker's). A non-zero exit before any result, and an exit 0 without the metric (`no metric`, by its
    reason), are told to the sweep's gate (`trainables/command/failure_gate.py`): the same error as an
    earlier trial's, or the sweep's initial failures used up, is not retried; a command that exited 0 is never
    retried.
    A trial on `gpus` > 0 GPUs whose last output lines show a CUDA out-of-memory error raises
    `CommandOutOfMemory` instead (`out_of_memory`): not retried at the same share, not told to the gate."""
    cwd = cwd or os.getcwd()
    if code != 0:
        early = reporter.parsed == 0 and reporter.last_step is None
        blank = {str(reading.work_dir): "{trial_dir}", reporter.trial_folder.name: "{trial_name}"}
        failure = crash_failure(code, output.tails["ERR"], " ".join(argv), cwd, blank, early)
        oom = out_of_memory(failure, output.tails, gpus)
        if oom is not None:
            records.write_oom_marker(reporter.trial_folder, {"gpus_per_trial": gpus, "error": oom.exception})
            raise fail(oom, reporter.trial_folder, reporter.extra_metrics())
        seen, stops = (early and reporter.ticket.call("failed_early", failure.signature)) or (0, 0)  # no gate: None
        why = (
            "exit code 2 is a usage error"
            if code == 2
            else "the sweep stops"
            if stops
            else "an earlier trial failed with the same error before any metric"
            if seen
            else None
        )
        raise fail(dataclasses.replace(failure, not_retried=why), reporter.trial_folder, reporter.extra_metrics())
    missing = _missing_metric(reporter, output, reading)
    if missing is not None:
        tail, source, why = (output.tails["OUT"], "stdout", f"0: {missing[0]}")
        reporter.ticket.call("failed_early", why, True)  # that many for the same reason stop the sweep
        failure = TrialFailure(
            kind=NO_METRIC,
            signature=why,
            exit_code=0,
            exception=None,
            missing_path=None,
            tail=tuple(tail),
            source=source,
            summary=missing[0],
            detail=missing[1],
            command=" ".join(argv),
            working_folder=cwd,
            early=True,  # it never reported the sweep's metric
            not_retried="it exited 0: running it again reports the same",
        )
        raise fail(failure, reporter.trial_folder, reporter.extra_metrics())


def out_of_memory(failure: TrialFailure, tails: dict, gpus: float) -> TrialFailure | None:
    """The record of a crash (`failure`) on `gpus` > 0 GPUs whose last lines (`tails`: stream -> lines)
    show a CUDA out-of-memory error (`gpu_oom.is_oom_line`), else None. It is never an initial failure
    (a larger share may fit), and Tune does not retry it at the same share: the sweep re-runs it with twice
    the share (`sweeps/engine/run/launch.py:rerun_oom_trials`), up to a whole GPU."""
    line = next((line.strip() for name in ("ERR", "OUT") for line in reversed(tails[name]) if is_oom_line(line)), None)
    if line is None or gpus <= 0:
        return None
    again = "the sweep re-runs it with twice the GPU share" if gpus < 1 else "more than a whole GPU is data-parallel"
    return dataclasses.replace(
        failure,
        kind=OUT_OF_MEMORY,
        exception=line,
        summary=f"command ran out of GPU memory at {gpus:g} GPU (it exited with {exit_status(failure.exit_code)})",
        early=False,
        not_retried=f"it ran out of GPU memory: {again}",
    )


def _missing_metric(reporter, output, reading: Reading) -> tuple[str, str] | None:
    """(summary, detail) of a command that exited 0 without a metric it must report, else None: a
    tracker record without --metric, no result at all, or results without one of the objective's metrics
    (`Objective.step_metrics`; after a restart, an earlier attempt may have reported it: only a trial with
    no earlier result is held to it)."""
    events, key = output.events, reporter.step_key
    if isinstance(events, TrackerResults) and events.source and events.metric not in events.held:
        held = describe_sources(reading.work_dir, key, sources_of(events.source if not events.auto else "output"))
        return f"command exited 0 but --metric {events.metric} is in none of its records", held
    if reporter.parsed == 0 and reporter.last_step is None:
        message = no_metrics_message(
            key, reading.patterns, reading.metrics_from, reading.metrics_file, reading.work_dir, output.tails
        )
        return tuple(message.split(": ", 1))
    absent = [m for m in (reading.objective.step_metrics if reading.objective else ()) if m not in reporter.seen]
    if absent and not reporter.reported_before:
        held = describe_sources(reading.work_dir, key, sources_of(reading.metrics_from))
        keys = ", ".join(k for k in reporter.seen if k != key) or "only the step"
        return (
            f"command exited 0 but reported no {' or '.join(absent)}",
            f"its results held {keys} (each step's {key})" + (f"; {held}" if held else ""),
        )
    return None


def take_turn(reporter, stop_requested) -> bool:
    """Wait for this attempt's turn at the sweep's gate (`GateTicket.enter`) and keep its ticket in
    `reporter`; False when Tune ended the trial meanwhile. Raises CommandFailed (not retried) when
    the sweep stops for failures before any metric: the command does not start."""
    with warnings.catch_warnings():  # outside a Tune trial (tests): None, and a warning
        warnings.simplefilter("ignore")
        trial_id = tune.get_context().get_trial_id() or ""
    reporter.ticket, turn = GateTicket.enter(stop_requested, trial_id)
    if turn == "stop":
        failure = TrialFailure(
            kind=NOT_STARTED,
            signature=NOT_STARTED,
            exit_code=None,
            exception=None,
            missing_path=None,
            tail=(),
            source="stderr",
            summary="not started: the sweep's first trials failed before reporting any metric",
            early=True,
            not_retried="the sweep stops",
        )
        raise fail(failure, reporter.trial_folder)
    return turn == "go"


def fail(failure: TrialFailure, trial_folder: Path, extra: dict | None = None) -> CommandFailed:
    """Record `failure` (the trial's `failure.json`), report its marks when it is not retried or came
    before any metric (`failure_marks`, with `NO_RETRY_METRIC` and `EARLY_FAILURE_METRIC`, which the
    sweep's initial failures count, and a `no metric`'s signature, `FAILURE_SIGNATURE_METRIC`; `extra`:
    what every row of the trial holds, its GPU), and return the
    error to raise (`CommandOutOfMemory` for `OUT_OF_MEMORY`): the summary, the tail of its stream, and a
    last line (the one the console shows) quoting that tail."""
    records.write_failure(trial_folder, failure)
    if failure.not_retried or failure.early:  # a failure Tune retries adds no row to the trial's history
        marks = failure_marks(failure.kind) | ({NO_RETRY_METRIC: 1} if failure.not_retried else {})
        reason = {FAILURE_SIGNATURE_METRIC: failure.signature} if failure.kind == NO_METRIC else {}
        tune.report((extra or {}) | marks | ({EARLY_FAILURE_METRIC: 1} if failure.early else {}) | reason)
    return (CommandOutOfMemory if failure.kind == OUT_OF_MEMORY else CommandFailed)(failure_text(failure))


def failure_text(failure: TrialFailure) -> str:
    """The text of a failure's error (`error.txt`): what happened, where, the tail, and `failure_line`."""
    tail = list(failure.tail)
    first = f"{failure.summary}: {failure.detail or failure.command}" if failure.detail or failure.command else ""
    where = f"{WORKING_FOLDER}{failure.working_folder}\n" if failure.working_folder else ""
    lines = f"last {len(tail)} lines of {failure.source}:\n" + "".join(f"{line}\n" for line in tail) if tail else ""
    return f"{first + chr(10) if first else ''}{where}{lines}{failure_line(failure)}"


def failure_line(failure: TrialFailure) -> str:
    """One line for the console: the summary, why it is not retried, and the last lines of its stream."""
    stream, tail = failure.source, failure.tail[-QUOTED_LINES:]
    quoted = " | ".join(line.strip() for line in tail if line.strip()) or f"(no {stream} output)"
    retry = f" (not retried: {failure.not_retried})" if failure.not_retried else ""
    return f"{failure.summary}{retry}; {stream} ends: {quoted}"
