"""A failure that repeats explains itself once: the first trials of a sweep probe the command.

Ray Tune retries every failed trial (`FailureConfig(max_failures)`) and starts as many trials as
resources allow, so a script that crashes at start runs `trials x (1 + max_failures)` times. W&B's
sweep agent instead stops after its first runs all fail (`WANDB_AGENT_MAX_INITIAL_FAILURES`, default
3). This module does that for command trials, with one named Ray actor per sweep (`FailureGate`,
created by the driver, `trainables/command/initial_failures.py`) that every trial of the sweep asks:
- before its command starts (`enter`): until the command has shown that it does not crash at start,
  at most `limit` commands run or have failed (the other trials wait), so a command failing the same
  way in every trial starts at most `limit` times. It has shown that once one of them has run for
  `survival_s` seconds (`--survival-window-s`; crashes at start come in seconds) or reported the
  sweep's metric (`reported`), whichever comes first: then every trial starts at once, and no slot idles for a whole
  first epoch;
- when its command exited non-zero before reporting anything, or exited 0 without the sweep's metric
  (`failed_early`): whether that error (`signature`: exit status and exception line, or the `no metric`
  summary, the trial's own folder and name blanked) was seen before in any trial, then the trial is not
  retried; and whether the failures before any metric reached `limit` (`EarlyFailures`: crashes whatever
  their error, exits without the metric for the same reason), then the sweep stops (the driver's
  `InitialFailures` stopper) and waiting trials do not start. A command that prints lines but never the
  metric has not reported a result: it opens the gate only by its survival, and never ends the stop.
Failures after the metric was reported keep Tune's retries. `limit` 0 turns the gate and the stop off.
Every ticket ends: the command's end, a failure before it started (`trainables/command/startup.py`), or,
for a worker that died holding it, the driver's `forget` when Tune handles the trial's error.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter

GATE_NAME = "raysweep_failure_gate"  # the named actor, in the sweep driver's namespace
MAX_INITIAL_FAILURES = 3  # as WANDB_AGENT_MAX_INITIAL_FAILURES's default
SURVIVAL_WINDOW_S = 15.0  # a command that ran this long without failing opens the gate (--survival-window-s)
WAIT_POLL_S = 0.5  # how often a waiting trial asks the gate again
WORKER_ENDED = "its worker ended before its command started"  # the signature of a ticket `forget` counts
EARLY_FAILURE = "before reporting any metric"  # in a failed command's first error line (`trainables/command/runner.py`)
EARLY_FAILURE_METRIC = "command/failed_early"  # in the report that precedes such an error
FAILURE_SIGNATURE_METRIC = "command/failure_reason"  # and a `no metric`'s signature: the driver counts each reason
WORKING_FOLDER = "working folder: "  # the line of a command's error that names where it ran
# `FileNotFoundError: [Errno 2] No such file or directory: '../data/train'`; `python: can't open file '/x.py'`
_MISSING_PATH = re.compile(r"""(?:No such file or directory:?|can't open file)\s*(?P<q>['"])(?P<path>.+?)(?P=q)""")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|NotFound)\b(?::.*)?$")


class EarlyFailures:
    """The failures before any trial reported the sweep's metric, as they count toward its stop (`count`): a
    crash or set-up failure before any result counts whatever its error (a command that crashes at start);
    an exit without the metric counts with those of the same reason (`signature`) only, so `limit` of them stop
    the sweep when `limit` trials missed the metric the same way (a printed shape raysweep does not read)."""

    def __init__(self):
        self.crashes: list[str] = []  # signatures of failures before any result, in order
        self.no_metric: Counter = Counter()  # signature -> exits without the metric

    def add(self, signature: str, no_metric: bool = False) -> bool:
        """Count one failure; returns whether the same error came before."""
        seen = signature in self.crashes or signature in self.no_metric
        if no_metric:
            self.no_metric[signature] += 1
        else:
            self.crashes.append(signature)
        return seen

    def count(self) -> int:
        """How near the stop: the crashes, or the most exits without the metric of one reason."""
        return max(len(self.crashes), max(self.no_metric.values(), default=0))


class FailureGate:
    """The state of a sweep's first trials (run as a Ray actor: `ray.remote(FailureGate)`)."""

    def __init__(self, limit: int, survival_s: float = SURVIVAL_WINDOW_S):
        """Args: limit: failures before any metric that stop the sweep (>= 0; 0: never stop, no wait);
        survival_s: seconds a command runs without failing that open the gate."""
        self.reset(limit, survival_s)

    def reset(self, limit: int, survival_s: float = SURVIVAL_WINDOW_S) -> None:
        """Start afresh: no trial ran yet."""
        self.limit, self.survival_s, self.opened, self.works = limit, survival_s, False, False
        self.failures = EarlyFailures()
        self.running: dict[str, float | None] = {}  # attempt -> when its command started (monotonic s)

    def enter(self, attempt: str) -> str:
        """`go` (start the command), `wait` (ask again soon) or `stop` (the sweep stops: do not start)."""
        if not self.limit:
            return "go"
        if self.stopping():
            return "stop"
        if self.opened:
            return "go"
        now = time.monotonic()
        if any(now - started >= self.survival_s for started in self.running.values() if started is not None):
            self.opened = True  # a command outlived the window: it does not crash at start
            return "go"
        if len(self.running) + self.failures.count() < self.limit:
            self.running[attempt] = None
            return "go"
        return "wait"

    def started(self, attempt: str) -> None:
        """The attempt's command started: its survival window runs from now."""
        if attempt in self.running:
            self.running[attempt] = time.monotonic()

    def reported(self, attempt: str) -> None:
        """A trial reported the sweep's metric: the command works, every trial may start, the sweep never stops."""
        self.opened = self.works = True
        self.running.pop(attempt, None)

    def failed_early(self, attempt: str, signature: str, no_metric: bool = False) -> tuple[bool, bool]:
        """Record a failure before any result (`no_metric`: an exit without the sweep's metric); returns
        (the same error came before, the sweep stops)."""
        self.running.pop(attempt, None)
        seen = self.failures.add(signature, no_metric)
        return seen, self.stopping()

    def left(self, attempt: str) -> None:
        """The attempt ended some other way (a stop, its end after a result), or its failure was recorded."""
        self.running.pop(attempt, None)

    def forget(self, trial_id: str, count: bool) -> int:
        """Release the tickets the attempts of trial `trial_id` still hold (their worker died: nothing
        else ended them); with `count`, each whose command never started counts as a failure before any
        result (`WORKER_ENDED`). Returns how many were counted."""
        counted = 0
        for attempt in [a for a in self.running if a.startswith(f"{trial_id}/")]:
            if self.running.pop(attempt) is None and count:
                self.failures.add(WORKER_ENDED)
                counted += 1
        return counted

    def stopping(self) -> bool:
        """Whether the failures before any metric reached `limit` (`EarlyFailures.count`) before a trial reported it."""
        return bool(self.limit) and not self.works and self.failures.count() >= self.limit


def open_gate(limit: int, survival_s: float = SURVIVAL_WINDOW_S):
    """The sweep's gate actor, afresh: created if missing, else reset (the driver calls this when Tune
    starts; its trials find it by name, in the driver's namespace). Returns the actor handle; not
    waited for (a trial's first call waits for the actor to start).

    The actor lives on the driver's node (`NodeAffinitySchedulingStrategy`, not soft): Ray would place a
    0-CPU actor on any node, and a lost worker node would take the sweep's gate with it (issue 55)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_driver_node = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(num_cpus=0)(FailureGate)
    gate = actor.options(
        name=GATE_NAME, get_if_exists=True, max_concurrency=1, scheduling_strategy=on_driver_node
    ).remote(limit, survival_s)
    gate.reset.remote(limit, survival_s)  # an actor left by an earlier fit() of this driver
    return gate


class GateTicket:
    """One attempt's place at the sweep's gate (`enter`), or a stand-in doing nothing without a gate.
    `attempt` is `<trial id>/<random>`: the driver releases a dead worker's ticket by its trial (`forget`)."""

    def __init__(self, actor=None, trial_id: str = ""):
        self.actor, self.attempt = actor, f"{trial_id}/{uuid.uuid4().hex}"

    @classmethod
    def enter(cls, stop_requested, trial_id: str = "") -> tuple[GateTicket, str]:
        """Wait for this attempt's turn at the sweep's gate (none: not a sweep's trial, e.g. a bare Tuner).

        Args:
            stop_requested: () -> bool, whether Tune ended the trial meanwhile.
            trial_id: Tune's id of the trial.
        Returns:
            (the ticket, `go`: start the command; `stop`: the sweep stops, do not start it;
            `wait`: Tune ended the trial while it waited, do not start it).
        """
        import ray

        try:
            actor = ray.get_actor(GATE_NAME)
        except ValueError:
            return cls(), "go"
        ticket = cls(actor, trial_id)
        while (turn := ray.get(actor.enter.remote(ticket.attempt))) == "wait" and not stop_requested():
            time.sleep(WAIT_POLL_S)
        return ticket, turn

    def call(self, method: str, *args):
        """`FailureGate.<method>(attempt, *args)` at the gate, waited for; None without a gate."""
        import ray

        return ray.get(getattr(self.actor, method).remote(self.attempt, *args)) if self.actor is not None else None


def exception_line(stderr_tail) -> str | None:
    """The last line of `stderr_tail` (lines) that reads like a raised exception
    (`FileNotFoundError: [Errno 2] ...`, `torch.cuda.OutOfMemoryError: ...`), else None."""
    return next((line.strip() for line in reversed(list(stderr_tail)) if _EXCEPTION.match(line.strip())), None)


def signature(code: int, stderr_tail, blank: dict[str, str]) -> str:
    """What makes two failures the same: the exit code and the exception line (or the last stderr
    line), with each `blank` key (the trial's folder, its name) replaced by its value."""
    lines = [line.strip() for line in stderr_tail if line.strip()]
    text = exception_line(lines) or (lines[-1] if lines else "")
    for old, new in blank.items():
        text = text.replace(old, new) if old else text
    return f"{code}: {text}"


def missing_path(text: str) -> str | None:
    """The path of a `No such file or directory: '...'` / `can't open file '...'` in `text`, else None."""
    found = _MISSING_PATH.findall(text)
    return found[-1][1] if found else None
