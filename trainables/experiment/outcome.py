"""How a trial ended and why its sweep ended, as data: the words every count uses, computed once.

A trial is *finished* only when it ended by itself with its metric. The driver's final line, its progress
block, `--status` (text and JSON), `python -m analysis --json`, the tables, the report, a search's table and
the `--notify` message all count trials with `trial_outcome`, from the same facts (Tune's status and last
result, and what the driver recorded in `driver.json`: the trials it stopped, the scheduler's stops, why
the sweep ended), so they cannot disagree. The words:

    finished     ended by itself, not diverged, not failed (a trial that ran all its epochs, even where
                 its scheduler decided to stop it meanwhile)
    pruned       its scheduler (ASHA) stopped it before its last epoch: a result, not a failure
    errored      raised, or its command failed (Tune's ERROR, or a failure marked in its last report)
    no metric    its command exited 0 but never reported the sweep's metric (an errored trial)
    diverged     a reported metric was NaN or inf
    interrupted  started, then stopped by the sweep's end: Ctrl-C, SIGTERM, a time budget, the failure
                 gate, fail-fast (`SweepEnd`: which one)
    not run      never started before the sweep ended
    running, pending   while the sweep runs

Why a sweep ended (`driver.json`'s `ended_by`, `SWEEP_ENDS`): every trial ended (`ALL_ENDED`), Ctrl-C,
SIGTERM, its time budget, its failure gate (`--max-initial-failures`), `--fail-fast` or a full disk.

A failed command trial writes a `TrialFailure` (`failure.json` in its folder, through
`trainables/experiment/records.py`); the sweep's gate, its outcome and `--check` read the fields,
never the error's text. A failure that is not retried, or that came before any metric, is marked in the
report before its error (`FAILED_METRIC`; `NO_METRIC_METRIC` for `no metric`, `NOT_STARTED_METRIC` for a
command the sweep's failure gate never let start, which counts as not run): a trial the sweep
stopped before Tune saw that error still counts as failed, and counting needs no file but Tune's.
No Ray, pandas or torch here: `--status` imports this.
"""

from __future__ import annotations

import dataclasses

FAILED_METRIC = "command/failed"  # 1 in the report before a command trial's error (it did not finish)
NO_METRIC_METRIC = "command/no_metric"  # 1 in that report when the command exited 0 without the sweep's metric
NOT_STARTED_METRIC = "command/not_started"  # 1 in it when the sweep stopped before the command's turn to start

# the kinds of a command trial's failure
CRASHED = "crashed"  # the command exited non-zero
NO_METRIC = "no metric"  # it exited 0 but never reported --metric (or --test-metric)
NOT_STARTED = "not started"  # the sweep stopped before its turn at the failure gate
MISSING_ON_NODE = "missing on node"  # a linked data path the command names is missing on the trial's node
OUT_OF_MEMORY = "out of GPU memory"  # it printed a CUDA out-of-memory error and exited non-zero (re-queued with more)
SET_UP = "set-up failed"  # a step before the command started failed (trainables/command/startup.py)

FINISHED, PRUNED, ERRORED, DIVERGED = "finished", "pruned", "errored", "diverged"
INTERRUPTED, NOT_RUN, RUNNING, PENDING = "interrupted", "not run", "running", "pending"
OUTCOMES = (FINISHED, PRUNED, ERRORED, NO_METRIC, DIVERGED, INTERRUPTED, NOT_RUN, RUNNING, PENDING)
ENDED = (FINISHED, PRUNED, ERRORED, NO_METRIC, DIVERGED)  # ended by itself or by its scheduler: nothing to resume
LEFT_OUT = (ERRORED, NO_METRIC, DIVERGED, INTERRUPTED, NOT_RUN)  # no table, statistic or "best" uses their values
RETRIED = (ERRORED, NO_METRIC, NOT_RUN)  # what `--resume --retry-errored` runs again (Tune holds them as ERROR)

# why a sweep ended: `driver.json`'s `ended_by`
ALL_ENDED, CTRL_C, SIGTERM = "finished", "Ctrl-C", "SIGTERM"
TIME_BUDGET, FAILURE_GATE, FAIL_FAST, DISK_FULL = "time budget", "failure gate", "fail-fast", "disk full"
SWEEP_ENDS = (ALL_ENDED, CTRL_C, SIGTERM, TIME_BUDGET, FAILURE_GATE, FAIL_FAST, DISK_FULL)


@dataclasses.dataclass(frozen=True)
class TrialFailure:
    """One failed attempt of a command trial, as `trainables/command/failure.py` saw it."""

    kind: str  # CRASHED, NO_METRIC, NOT_STARTED, MISSING_ON_NODE, OUT_OF_MEMORY or SET_UP
    signature: str  # what makes two failures the same: exit code and exception line, the trial blanked
    exit_code: int | None  # the command's (negative: killed by that signal); None when it did not run
    exception: str | None  # the last line of the tail that reads like a raised exception
    missing_path: str | None  # the path of a `No such file or directory: '...'` in the tail
    tail: tuple[str, ...]  # the last lines of `source`
    source: str  # the stream the tail comes from: stderr or stdout
    summary: str  # what happened, in a few words: the line the console shows
    detail: str = ""  # the rest of the first line: for `no metric`, what was expected and what each source held
    command: str = ""  # the command as run
    working_folder: str = ""  # where it ran
    early: bool = False  # before the trial reported any metric (`no metric`: always, it never reported the sweep's)
    not_retried: str | None = None  # why Tune does not retry it; None: retried as --max-failures says

    def to_record(self) -> dict:
        """The JSON object of `failure.json`."""
        return {**dataclasses.asdict(self), "tail": list(self.tail)}

    @classmethod
    def from_record(cls, record: dict) -> TrialFailure | None:
        """The failure in a `failure.json` object; None for one that is not (a foreign or older file)."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in record.items() if k in names} | {"tail": tuple(record.get("tail") or ())})
        except TypeError:  # a required field missing
            return None


# What Tune puts in a trial's last result before its first report (`Trainable.get_auto_filled_metrics`)
_FILLED_BY_TUNE = {
    *("trial_id", "date", "timestamp", "time_this_iter_s", "time_total_s", "pid", "hostname", "node_ip", "config"),
    *("time_since_restore", "iterations_since_restore", "timesteps_since_restore", "experiment_tag"),
}


_KIND_MARKS = {NO_METRIC: NO_METRIC_METRIC, NOT_STARTED: NOT_STARTED_METRIC}


def failure_marks(kind: str) -> dict:
    """The marks of the report before a failed command trial's error (see the module docstring)."""
    return {FAILED_METRIC: 1} | {mark: 1 for word, mark in _KIND_MARKS.items() if word == kind}


def trial_outcome(
    status: str | None,
    last_result: dict | None,
    *,
    over: bool = False,
    stopped: bool = False,
    stop_at: int | None = None,
    planned: int | None = None,
) -> str:
    """The word for how a trial ended (or where it is), one of `OUTCOMES`.

    Args:
        status: Tune's: TERMINATED, ERROR, RUNNING, PAUSED or PENDING (None: PENDING).
        last_result: the trial's last reported result ({} or None: it reported nothing).
        over: the sweep has ended (its driver finished or is gone): a trial still RUNNING or PENDING
            in Tune's last snapshot was interrupted or never ran.
        stopped: the driver stopped this trial after it started, before it ended by itself (a time
            budget or a sweep-wide stop end trials as TERMINATED; the driver's record lists them).
        stop_at: the `training_iteration` at which its scheduler decided to stop it (`driver.json`'s
            `scheduler_stops`), None when it never did: `scheduler_pruned` tells a pruned trial.
        planned: the iterations it runs to its end (the built-in trainable's `epochs`), None when unknown.
    """
    result = last_result or {}
    if result.get(NOT_STARTED_METRIC):  # the gate refused its command: it never ran
        return NOT_RUN
    if status == "ERROR" or result.get(FAILED_METRIC):  # a failure marked, then stopped before Tune saw the error
        return NO_METRIC if result.get(NO_METRIC_METRIC) else ERRORED
    if result.get("diverged") is True:
        return DIVERGED
    reported = any(key not in _FILLED_BY_TUNE for key in result)  # a result of its own, not only Tune's keys
    if over and status in ("RUNNING", "PAUSED") or stopped:  # the sweep's end stopped it: before any result of
        return INTERRUPTED if reported else NOT_RUN  # its own (waiting at the failure gate, say), it never ran
    if over and status in ("PENDING", None):
        return NOT_RUN
    if status == "TERMINATED":  # with no report of its own: stopped before it started (a sweep-wide stop)
        if not reported:
            return NOT_RUN
        return PRUNED if scheduler_pruned(stop_at, result.get("training_iteration"), planned) else FINISHED
    return RUNNING if status == "RUNNING" else PENDING


def scheduler_pruned(stop_at: int | None, iterations, planned: int | None) -> bool:
    """Whether the scheduler pruned a trial that it decided to stop at iteration `stop_at` (None: it never did).

    Tune marks the result on which a scheduler decided STOP with `done: true` and stops the trial
    (`TuneController._process_trial_result`, Ray 2.x). That trial was pruned unless it ran all its epochs
    anyway: a STOP at its last epoch (ASHA's at `max_t`), or one after which the trial still logged results
    (a command's script that had run on and exited by itself, its last rows read at its end).

    Args:
        iterations: its last `training_iteration` (None: unknown, taken as `stop_at`).
        planned: the iterations of its full run, None when unknown (then any STOP it did not outrun counts).
    """
    if stop_at is None:
        return False
    ran = iterations if isinstance(iterations, (int, float)) else stop_at
    return ran <= stop_at and (planned is None or stop_at < planned)


def planned_epochs(config: dict | None) -> int | None:
    """The iterations a trial of `config` runs to its end: the built-in trainable's `epochs` (a command's
    `{epochs}` too); None when the config does not say (a command's script decides)."""
    epochs = (config or {}).get("epochs")
    return int(epochs) if isinstance(epochs, (int, float)) and not isinstance(epochs, bool) and epochs > 0 else None


def ran_to_end(last_result: dict | None, config: dict | None) -> bool:
    """Whether a trial known only from its folder (no readable Tune state lists it) ended by itself: its last logged
    row says `done`, or its `training_iteration` reached its planned iterations (`planned_epochs`: Tune does not log
    the `done` of a function trainable that returned after its last report)."""
    result = last_result or {}
    planned = planned_epochs(config)
    iterations = result.get("training_iteration")
    reached = planned is not None and isinstance(iterations, (int, float)) and iterations >= planned
    return str(result.get("done")) == "True" or reached


COUNTS = ("running", "pending", "finished", "pruned", "errored", "diverged", "no_metric", "interrupted", "not_run")
"""The keys of `count_outcomes`: `errored` includes `no_metric`."""


def count_outcomes(outcomes, not_created: int = 0, over: bool = False) -> dict[str, int]:
    """Trials per word (`COUNTS`) of the `trial_outcome`s of a sweep's trials; `not_created` trials the
    searcher has not made yet count as pending, or, once the sweep is `over`, as not run."""
    counts = dict.fromkeys(COUNTS, 0)
    for outcome in outcomes:
        counts["errored" if outcome == NO_METRIC else outcome.replace(" ", "_")] += 1
        counts["no_metric"] += outcome == NO_METRIC
    counts["not_run" if over else "pending"] += max(0, not_created)
    return counts


_STOPPED_BY = {TIME_BUDGET: "stopped by the time budget", FAILURE_GATE: "stopped by the failure gate"}


def outcome_words(outcome: str, ended_by: str | None = None, scheduler: str | None = None) -> str:
    """An outcome as a table says it: `pruned by ASHA` (`scheduler`: its short name), and an interrupted
    trial by what stopped it, the sweep's `ended_by` (`stopped by the time budget`, `interrupted (Ctrl-C)`)."""
    if outcome == PRUNED and scheduler:
        return f"pruned by {scheduler}"
    if outcome == INTERRUPTED and ended_by in _STOPPED_BY:
        return _STOPPED_BY[ended_by]
    if outcome == INTERRUPTED and ended_by in (CTRL_C, SIGTERM, FAIL_FAST):
        return f"interrupted ({ended_by})"
    return outcome
