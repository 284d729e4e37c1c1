"""How a command trial fails: its error (`CommandFailed`, with the stderr tail and a one-line summary), the
reports that tell Tune not to retry it and the sweep that it failed before any metric, and its turn at the
sweep's failure gate (`trainables/command/failure_gate.py`). `trainables/command/runner.py` calls
`take_turn` before the command starts and `verdict` when it has exited."""

from __future__ import annotations

import os

from ray import tune

from trainables.command.failure_gate import EARLY_FAILURE, EARLY_FAILURE_METRIC, WORKING_FOLDER, GateTicket, signature
from trainables.command.parse import NO_RETRY_METRIC
from trainables.command.process import Reading, exit_status
from trainables.command.sources import no_metrics_message
from trainables.command.trackers import TrackerResults, describe_sources, sources_of

QUOTED_LINES = 3  # of which the error's last line quotes this many


class CommandFailed(RuntimeError):
    """The trial's command exited with an error, or reported no metric at all."""


def verdict(code: int, argv: list[str], reporter, output, reading: Reading, cwd: str | None) -> None:
    """Raise CommandFailed when the command exited non-zero, or exited 0 with no result at all
    (`reading`: how its results were read; `cwd`: the folder it ran in, None: this process's).
    A non-zero exit before any result is told to the sweep's gate (`trainables/command/failure_gate.py`): the
    same error as an earlier trial's, or the sweep's initial failures used up, is not retried."""
    work_dir = reading.work_dir
    if code != 0:
        early = reporter.parsed == 0 and reporter.last_step is None
        sig = signature(
            code, output.tails["ERR"], {str(work_dir): "{trial_dir}", reporter.trial_folder.name: "{trial_name}"}
        )
        seen, stops = (early and reporter.ticket.call("failed_early", sig)) or (0, 0)  # no gate: None
        raise command_failed(
            f"command exited with {exit_status(code)}{' ' + EARLY_FAILURE if early else ''}: {' '.join(argv)}\n"
            f"{WORKING_FOLDER}{cwd or os.getcwd()}",
            output.tails["ERR"],
            "stderr",
            no_retry=code == 2 or seen or stops,
            why="exit code 2 is a usage error"
            if code == 2
            else ("the sweep stops" if stops else "an earlier trial failed with the same error before any metric"),
            early=early,
        )
    events = output.events
    if isinstance(events, TrackerResults) and events.source and events.metric not in events.held:
        raise command_failed(
            f"command exited 0 but --metric {events.metric} is in none of its records: "
            + describe_sources(work_dir, reporter.step_key, sources_of(events.source if not events.auto else "output")),
            output.tails["OUT"],
            "stdout",
            no_retry=True,
            why="it exited 0: running it again logs the same",
        )
    if reporter.parsed == 0 and reporter.last_step is None:
        raise command_failed(
            no_metrics_message(
                reporter.step_key, reading.patterns, reading.metrics_from, reading.metrics_file, work_dir, output.tails
            ),
            output.tails["OUT"],
            "stdout",
            no_retry=True,
            why="it exited 0: running it again prints the same",
        )


def take_turn(reporter, stop_requested) -> bool:
    """Wait for this attempt's turn at the sweep's gate (`GateTicket.enter`) and keep its ticket in
    `reporter`; False when Tune ended the trial meanwhile. Raises CommandFailed (not retried) when
    the sweep stops for failures before any metric: the command does not start."""
    reporter.ticket, turn = GateTicket.enter(stop_requested)
    if turn == "stop":
        why, what = "the sweep stops", "not started: the sweep's first trials failed before reporting any metric"
        raise command_failed(what, [], "stderr", True, why)
    return turn == "go"


def command_failed(summary: str, tail, stream: str, no_retry: bool, why: str, early: bool = False) -> CommandFailed:
    """The error of a failed command: `summary`, the tail of `stream`, and a last line (the one the
    console shows) quoting that tail. First a report marking it: with `no_retry`, one that tells
    Tune not to retry (`NO_RETRY_METRIC`); when `early` (before any metric), one the sweep counts
    (`EARLY_FAILURE_METRIC`, `trainables/command/initial_failures.py`)."""
    tail = list(tail)
    marks = {NO_RETRY_METRIC: 1} if no_retry else {}
    if marks or early:
        tune.report(marks | ({EARLY_FAILURE_METRIC: 1} if early else {}))
    quoted = " | ".join(line.strip() for line in tail[-QUOTED_LINES:] if line.strip()) or f"(no {stream} output)"
    last = summary.split(": ", 1)[0] if summary.startswith("command exited with") else summary.split(": expected")[0]
    return CommandFailed(
        f"{summary}\nlast {len(tail)} lines of {stream}:\n"
        + "\n".join(tail)
        + "\n"
        + f"{last}{f' (not retried: {why})' if no_retry else ''}; {stream} ends: {quoted}"
    )
