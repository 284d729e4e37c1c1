"""A command trial from its turn at the sweep's failure gate to its command's start: every way it can fail
there ends its ticket, and a trial stuck there is ended.

Why: a trial holds its ticket (`failure_gate.GateTicket`) from its turn until its command ends. A step
that failed in between (the code snapshot, the work folder, the environment, the program) used to leave the
ticket held, so the gate waited forever for a command that never ran, and its stop after
`--max-initial-failures` never fired. `before_command` wraps those steps:
- a failure there is the trial's failure before any metric (`SET_UP`, or `MISSING_ON_NODE`, naming its step
  and exception): told to the gate (`failed_early`, so it counts as a start for --max-initial-failures and
  the same failure in another trial is not retried), recorded, and raised: the trial ends errored at once;
- a watchdog of last resort: a trial whose command has not started `STARTUP_LIMIT_S` after its turn is
  stuck in a call that no exception reaches (a file system that stopped answering): the watchdog records
  why, says it in the trial's log and ends the worker; the driver then releases the ticket of the dead
  worker and counts it (`initial_failures.InitialFailures`, which does so for every trial that errors).

Tests inject a fault at each step (test-only, through the environment, which reaches the trials):
`RAYSWEEP_FAULT_INJECT="work folder:fail"` raises there, `:kill` SIGKILLs the worker, `:hang` blocks until
the watchdog ends it; `RAYSWEEP_STARTUP_LIMIT_S` shortens the watchdog's limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from trainables.command.failure import fail
from trainables.command.workdir import MissingOnNode
from trainables.experiment import records
from trainables.experiment.outcome import MISSING_ON_NODE, SET_UP, TrialFailure

STEPS = ("snapshot", "work folder", "environment", "program")  # in order; `Startup.step` names the one running
STARTUP_LIMIT_S = 120.0  # no command this long after the trial's turn: the watchdog ends the trial
FAULT_ENV = "RAYSWEEP_FAULT_INJECT"  # tests only: "STEP:fail", "STEP:kill" or "STEP:hang"
LIMIT_ENV = "RAYSWEEP_STARTUP_LIMIT_S"  # tests only: the watchdog's limit in seconds
TAIL_FRAMES = 6  # traceback lines kept in the failure's tail


class InjectedFault(RuntimeError):
    """The failure `FAULT_ENV` asked for (tests only)."""


@dataclasses.dataclass
class Startup:
    """Where a trial is between its turn and its command's start (`before_command` yields it)."""

    trial_folder: Path
    trial_name: str
    step: str = "turn"  # the step running now, one of `STEPS` once the first has begun

    def enter(self, step: str) -> None:
        """Begin `step` (one of `STEPS`): named by a failure or the watchdog; a fault injected there runs."""
        self.step = step
        inject(step)


@contextlib.contextmanager
def before_command(reporter, trial_name: str, limit_s: float | None = None):
    """Run the steps between a trial's turn at the gate and its command's start (the with-block), so
    that each way they can fail ends the ticket and the trial.

    Args:
        reporter: the trial's `step_reporter.StepReporter` (its `ticket`, taken; its `trial_folder`).
        trial_name: Tune's name of the trial (blanked in a failure's signature).
        limit_s: seconds until the watchdog ends a trial whose block has not finished; default
            `STARTUP_LIMIT_S` (or `LIMIT_ENV`).
    Yields:
        the `Startup`, whose `enter(step)` the block calls at each step.
    Raises:
        CommandFailed: an exception in the block, as the trial's failure (`setup_failure`), not retried
            when the path is missing on this node, the same failure came before, or the sweep stops.
        KeyboardInterrupt, SystemExit: as they came, the ticket released (`left`).
    """
    startup = Startup(reporter.trial_folder, trial_name)
    limit_s = float(os.environ.get(LIMIT_ENV) or STARTUP_LIMIT_S) if limit_s is None else limit_s
    watchdog = Watchdog(startup, limit_s)
    watchdog.start()
    try:
        yield startup
    except Exception as error:
        watchdog.finish()
        failure = setup_failure(error, startup)
        seen, stops = reporter.ticket.call("failed_early", failure.signature) or (False, False)  # no gate: None
        why = (
            "the path is missing on this node"
            if failure.kind == MISSING_ON_NODE
            else "the sweep stops"
            if stops
            else "an earlier trial failed the same way before its command started"
            if seen
            else None
        )
        raise fail(dataclasses.replace(failure, not_retried=why), reporter.trial_folder) from None
    except BaseException:
        watchdog.finish()
        reporter.ticket.call("left")
        raise
    watchdog.finish()


def setup_failure(error: BaseException, startup: Startup) -> TrialFailure:
    """The record of `error` raised at `startup.step`: its exception line (the trial's folder and name
    blanked in the signature, so the same failure in two trials is one) and the traceback's last lines."""
    line = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    signature = line.replace(str(startup.trial_folder), "{trial_folder}").replace(startup.trial_name, "{trial_name}")
    kind = MISSING_ON_NODE if isinstance(error, MissingOnNode) else SET_UP
    frames = "".join(traceback.format_exception(type(error), error, error.__traceback__)).splitlines()
    return TrialFailure(
        kind=kind,
        signature=f"{kind} at the {startup.step}: {signature}",
        exit_code=None,
        exception=line,
        missing_path=None,
        tail=tuple(frames[-TAIL_FRAMES:]),
        source="traceback",
        summary=f"failed before its command started, at its {startup.step}",
        working_folder=str(startup.trial_folder),
        early=True,
    )


class Watchdog(threading.Thread):
    """Ends a trial whose `before_command` block has not finished `limit_s` after it began (see the module
    docstring): the failure recorded (`failure.json`), one line on stderr (the trial's log), the worker ended."""

    def __init__(self, startup: Startup, limit_s: float):
        super().__init__(name="raysweep-startup-watchdog", daemon=True)
        self.startup, self.limit_s = startup, limit_s
        self.finished, self.lock = threading.Event(), threading.Lock()

    def finish(self) -> None:
        """The block ended (the command started, or the trial failed): nothing to watch any more."""
        with self.lock:
            self.finished.set()

    def run(self) -> None:
        if self.finished.wait(self.limit_s):
            return
        with self.lock:
            if self.finished.is_set():
                return
            step = self.startup.step
            error = TimeoutError(
                f"no command started {self.limit_s:g} s after the trial's turn: stuck at its {step} "
                "(a call that never returned; the watchdog ended the worker)"
            )
            failure = setup_failure(error, self.startup)
            records.write_failure(self.startup.trial_folder, failure)
            print(f"{self.startup.trial_name}: {failure.summary}: {error}", file=sys.stderr, flush=True)
            os._exit(1)  # the stuck call cannot be interrupted; the driver releases the ticket of a dead worker


def inject(step: str) -> None:
    """The fault `FAULT_ENV` asks for at `step`, if any (tests only): `fail` raises `InjectedFault`,
    `kill` SIGKILLs this worker, `hang` blocks until the watchdog ends it."""
    where, _, how = os.environ.get(FAULT_ENV, "").rpartition(":")
    if where != step:
        return
    if how == "fail":
        raise InjectedFault(f"{FAULT_ENV}={where}:{how}")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "hang":
        while True:
            time.sleep(1)
