"""The end of a sweep: how its `fit()` ended (finished, or interrupted: `SweepEnding`), its table on the
console and its write-up (`analysis.write_up`) in its report folder."""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import shlex
import signal
import sys
import threading
import time

import ray
from ray import tune

import analysis
from analysis.progress import describe_counts
from analysis.progress import started as started_at
from analysis.reading.driver_record import continue_advice
from sweeps.engine.cluster.gpus import requeued_trial_paths
from sweeps.engine.flags import DiskFull
from sweeps.engine.run import disk_full
from trainables.experiment import records
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import (
    ALL_ENDED,
    COUNTS,
    DISK_FULL,
    DIVERGED,
    ENDED,
    ERRORED,
    FAIL_FAST,
    FAILURE_GATE,
    FINISHED,
    NO_METRIC,
    TIME_BUDGET,
    count_outcomes,
    planned_epochs,
    trial_outcome,
)
from trainables.experiment.redaction import redacted_argv
from trainables.experiment.scheduler_stops import pruning_stops
from trainables.ray_private import trial_folder_uri


def print_summary(experiment_dir: str, objective: Objective, shutdown_ray: bool = False, report: bool = True) -> None:
    """Print the sweep's table (laid out as the grid, mean ± std over seeds of the objective's test metric,
    its selection rule stated, the best configuration by its metric named below) and then write its write-up
    (paper table, plots, report.md, with the same rule) into the report folder beside the results; without
    `report` (--no-report) say how to write it later instead (`python -m analysis`: the same write-up).

    With `shutdown_ray`, `ray.shutdown()` runs in a background thread while the write-up is
    written: both take seconds (plots; stopping Ray's processes, about 1 s each), neither needs
    the other, so the sweep exits after the slower of the two instead of their sum
    (benchmarks/startup.py).
    """
    stopper = threading.Thread(target=ray.shutdown, name="ray-shutdown") if shutdown_ray else None
    try:
        print("\n" + analysis.sweep_summary(experiment_dir, objective), flush=True)
        if stopper:
            stopper.start()
        if not report:
            print(f"report: not written (--no-report); python -m analysis {shlex.quote(str(experiment_dir))} writes it")
            return
        folder = analysis.write_up(experiment_dir, objective=objective)
    except analysis.ExperimentError as e:
        print(f"no report: {e}")
        return
    finally:
        if stopper and stopper.is_alive():
            stopper.join()
    print(f"report: {folder / 'report.md'}")


@dataclasses.dataclass(frozen=True)
class EarlierRun:
    """What the run of the sweep before this one recorded in `driver.json` (a resume continues it)."""

    stopped: frozenset = frozenset()  # ids of the trials it stopped before they ended
    ended_by: str | None = None  # why it ended (`outcome.SWEEP_ENDS`)
    why: str = ""  # the same in words


@dataclasses.dataclass
class Ending:
    """How one `Tuner.fit()` of this driver ended, as `SweepEnding` saw it: each trial's outcome and why the
    sweep ended, computed once, for the final line, the progress block, the `--notify` message and `driver.json`."""

    signal: str | None = None  # "Ctrl-C" (SIGINT) or "SIGTERM": the signal that stopped it
    total: int = 0  # trials it planned (Tune's total_num_samples, or its trials if more)
    started: set = dataclasses.field(default_factory=set)  # ids of the trials started in this fit
    ended: set = dataclasses.field(default_factory=set)  # ids of those that ended by themselves (or by the scheduler)
    outcomes: dict = dataclasses.field(default_factory=dict)  # trial path -> `trial_outcome` at the end
    starts: dict = dataclasses.field(default_factory=dict)  # trial path -> when it started (`progress.started`)
    stopped: set = dataclasses.field(default_factory=set)  # ids of the trials started and stopped before they ended
    scheduler_stops: dict = dataclasses.field(default_factory=dict)  # trial id -> iteration of its scheduler's STOP
    previous_sigterm: object = None  # the SIGTERM handler before the fit, put back at its end
    closed: bool = False  # the fit ended (`on_experiment_end`)
    ended_by: str | None = ALL_ENDED  # why it ended (`outcome.SWEEP_ENDS`; None: stopped, cause unknown)
    why: str = ""  # the same in words, for the last line: "Ctrl-C", "--time-budget-s 20 reached", ...
    earlier: EarlierRun = EarlierRun()  # the run before this one (a resume's): what it stopped, and why
    stopper: object = None  # the sweep's `RunConfig.stop` (`InitialFailures` for command sweeps)
    budget_s: float | None = None  # --time-budget-s
    fail_fast: bool = False  # --fail-fast
    began: float = dataclasses.field(default_factory=time.monotonic)
    ended_at: float | None = None  # Unix seconds of its end: the clock the final block and `driver.json` stop at

    def cut(self) -> bool:
        """Whether the fit was cut short: a signal, a trial stopped, or trials left that did not end."""
        return bool(self.signal or self.stopped or any(o not in ENDED for o in self.outcomes.values()))

    def not_created(self) -> int:
        """Planned trials the searcher never made, once the fit was cut short (not run); none otherwise (a
        searcher that finished early, as `--seeds auto`'s, did not need them)."""
        return max(0, self.total - len(self.outcomes)) if self.cut() else 0

    def counts(self, reused: int = 0) -> dict[str, int]:
        """The trials of this fit by outcome (`outcome.count_outcomes`), and `reused` finished ones of
        earlier runs (skip-existing) among the finished."""
        counts = count_outcomes(self.outcomes.values(), self.not_created(), over=True)
        return counts | {"finished": counts["finished"] + reused}

    def unfinished(self) -> int:
        """Trials interrupted or not run, and those the searcher never made (`not_created`)."""
        return sum(o not in ENDED for o in self.outcomes.values()) + self.not_created()


FITS: list[Ending] = []  # this process's fits, newest last (the callback may be a copy restored from tuner.pkl)
_DRIVER: dict = {}  # this driver's hold on the experiment (`watch_driver`): its record, and the run's before


def watch_driver(hold) -> None:
    """Let the fits to come read and write this driver's record (`driver_lock.DriverHold`): the trials an earlier
    run stopped and why it ended (`hold.previous`), and the scheduler's stops of this run as they come (into
    `hold.record`, which its heartbeat writes every few seconds: `--status` of a running sweep tells them)."""
    _DRIVER.clear()
    _DRIVER.update(record=hold.record, previous=hold.previous or {})


class SweepEnding(tune.Callback):
    """Tune callback (first in every sweep's `RunConfig.callbacks`): records how `fit()` ends in `FITS`.

    Tune ends a run early on SIGINT (its own handler: the state is saved once more, then every
    running trial is stopped; a second Ctrl-C raises `KeyboardInterrupt`), on a stopper's `stop_all`
    (--max-initial-failures), at --time-budget-s and after --fail-fast's first error; the trials it stops
    then end as TERMINATED like finished ones. This callback tells them apart: a trial started in this fit
    that got neither `on_trial_complete` nor `on_trial_error` did not end by itself. A result Tune hands
    the callbacks marked `done` carries its scheduler's STOP (`outcome.scheduler_pruned`). It also routes
    SIGTERM to Tune's SIGINT handler (the same saved, resumable stop) and notes which signal came.
    """

    def __init__(self, stopper=None, fail_fast: bool = False):
        """Args: stopper: the sweep's `RunConfig.stop` (`InitialFailures`), whose `why` names its stop;
        fail_fast: --fail-fast (the first error stops the sweep)."""
        self.stopper, self.fail_fast = stopper, fail_fast

    def setup(self, time_budget_s=None, total_num_samples=None, **info):
        stopper = getattr(self, "stopper", None)
        ending = Ending(total=total_num_samples or 0, stopper=stopper, budget_s=time_budget_s)
        ending.fail_fast = getattr(self, "fail_fast", False)
        ending.scheduler_stops = dict((_DRIVER.get("record") or {}).get("scheduler_stops") or {})
        previous = _DRIVER.get("previous") or {}
        ending.earlier = EarlierRun(
            frozenset(previous.get("stopped") or ()), previous.get("ended_by"), previous.get("why") or ""
        )
        FITS.append(ending)
        if threading.current_thread() is threading.main_thread():
            _catch_signals(FITS[-1])

    def on_trial_start(self, iteration, trials, trial, **info):
        FITS[-1].started.add(trial.trial_id)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("done") is True:  # Tune marks the result its scheduler stopped the trial at
            stops = {**FITS[-1].scheduler_stops, trial.trial_id: int(result.get("training_iteration") or 0)}
            FITS[-1].scheduler_stops = stops
            if "record" in _DRIVER:  # a new dict each time: the heartbeat thread may be writing the old one
                _DRIVER["record"]["scheduler_stops"] = stops

    def on_trial_complete(self, iteration, trials, trial, **info):
        FITS[-1].ended.add(trial.trial_id)
        try:  # the end, in the trial's folder at once: Tune's state copy may never reach storage (a killed driver)
            records.write_trial_end(trial_folder_uri(trial), trial.trial_id, time.time())
        except OSError as error:  # a full disk: the state says it when it can (`disk_full` tells the sweep)
            logging.getLogger(__name__).warning("trial_end.json of %s not written: %s", trial, error)

    def on_trial_error(self, iteration, trials, trial, **info):
        FITS[-1].ended.add(trial.trial_id)

    def on_experiment_end(self, trials, **info):
        ending = FITS[-1]
        ending.closed, ending.ended_at = True, time.time()
        # stopped: started in this fit and not ended, or stopped by an earlier run and not run again (a resume)
        ids = {trial.trial_id for trial in trials}
        ending.stopped = ((ending.started | ending.earlier.stopped) & ids) - ending.ended
        ending.total = max(ending.total, len(trials))
        # a trial whose command ran on to its end after its scheduler's STOP is finished, as the history counts it
        # (Tune waited for the stopped trials' actors before this callback: `TuneController.cleanup`)
        ending.scheduler_stops = pruning_stops(
            ending.scheduler_stops,
            {
                t.trial_id: (trial_folder_uri(t), (t.last_result or {}).get("epoch"))
                for t in trials
                if t.trial_id in ending.scheduler_stops
            },
        )
        for trial in trials:
            ending.starts[trial.path] = started_at(trial)  # the best's tie rule (`progress.best_index`)
            ending.outcomes[trial.path] = trial_outcome(
                trial.status,
                trial.last_result,
                over=True,
                stopped=trial.trial_id in ending.stopped,
                stop_at=ending.scheduler_stops.get(trial.trial_id),
                planned=planned_epochs(getattr(trial, "config", None)),
            )
        ending.ended_by, ending.why = _why(ending)
        if threading.current_thread() is threading.main_thread():  # a Ctrl-C from now on stops the driver
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, ending.previous_sigterm or signal.SIG_DFL)


def _why(ending: Ending) -> tuple[str | None, str]:
    """Why a fit ended (`outcome.SWEEP_ENDS`) and in words: every trial ended, the signal, the stopper's stop
    (its `why`), --fail-fast after an error, or the time budget."""
    if ending.signal:
        return ending.signal, ending.signal
    stop_all = getattr(ending.stopper, "stop_all", None)
    if callable(stop_all) and stop_all():
        return FAILURE_GATE, getattr(ending.stopper, "why", "the sweep's failure gate stopped it")
    if not ending.cut():
        return ALL_ENDED, "every trial ended"
    if ending.fail_fast and any(o in (ERRORED, NO_METRIC) for o in ending.outcomes.values()):
        return FAIL_FAST, "--fail-fast: a trial errored"
    if ending.budget_s and time.monotonic() - ending.began >= float(ending.budget_s):
        return TIME_BUDGET, f"--time-budget-s {float(ending.budget_s):g} reached"
    earlier = ending.earlier
    if earlier.ended_by not in (None, ALL_ENDED) and ending.stopped <= earlier.stopped - ending.started:
        return earlier.ended_by, earlier.why  # only trials the run before stopped are left: what stopped them
    return None, "stopped before every trial ended"


def _catch_signals(ending: Ending) -> None:
    """SIGINT and SIGTERM note their name in `ending`, then run Tune's SIGINT handler (installed when
    `fit()` began, before the callbacks' `setup`); a second SIGTERM ends the process at once."""
    tune_handler = signal.getsignal(signal.SIGINT)
    ending.previous_sigterm = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):
        ending.signal = ending.signal or ("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if callable(tune_handler):
            tune_handler(signal.SIGINT, frame)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def fit(tuner, hold=None, resumed: bool = False) -> tuple:
    """`tuner.fit()` and how it ended: (its `ResultGrid`, its `Ending`; an empty one when no `SweepEnding`
    watched it, as in a sweep resumed from an older raysweep's tuner.pkl). `hold`: this driver's
    `driver_lock.DriverHold` (`watch_driver`); `resumed`: a `--resume`.

    Raises:
        DiskFull: its storage folder filled up (`disk_full.stop_line`: the one line), after `hold` recorded the
            end (exit code 1, `ended_by` "disk full").
    """
    FITS.clear()
    if hold is not None:
        watch_driver(hold)
    try:
        results = tuner.fit()
    except (EOFError, OSError) as error:  # Ray's EOFError: an error record Tune could not write
        _stop_if_disk_full([error], [], hold, resumed)
        raise
    ending = FITS[0] if FITS else Ending()  # trials that errored: their checkpoints or histories may not fit
    failed = [path for path, outcome in ending.outcomes.items() if outcome == ERRORED]
    errors = [r.error for r in results if r.error is not None]
    if failed:
        _stop_if_disk_full(errors or [OSError("a trial errored")], failed, hold, resumed)
    return results, FITS[0] if FITS else Ending()


def _stop_if_disk_full(errors: list, failed: list, hold, resumed: bool) -> None:
    """Raise `DiskFull` (its one line: `disk_full.stop_line`) when `errors` came of a full storage folder, after
    `hold` recorded the sweep's end (exit code 1, `ended_by` "disk full"); else nothing."""
    ending = FITS[0] if FITS else Ending()
    counts = ending.counts() if ending.closed else {"interrupted": 1}
    where = hold.experiment_dir if hold is not None else ""
    storage_path = posixpath.dirname(where.rstrip("/"))
    line = disk_full.stop_line(errors, storage_path, where, counts, resumed, failed) if where else None
    if line is not None:
        ending.ended_by, ending.why = DISK_FULL, "disk full"
        hold.record_end(1, ending, resumed)
        raise DiskFull(line)


def count_requeued(ending: Ending, rounds: list) -> set[str]:
    """Count the GPU out-of-memory re-queue rounds (`launch.rerun_oom_trials`, `ResultGrid`s after the
    first) in `ending.outcomes`: a trial run again counts by how that run ended, not as the error before it.
    Returns the folders of the trials run again (`gpus.requeued_trial_paths`)."""
    requeued = requeued_trial_paths(rounds)
    for path in requeued:
        ending.outcomes.pop(path, None)
    for grid in rounds[1:]:
        for result in grid:
            if result.path not in requeued:
                diverged = (result.metrics or {}).get("diverged") is True
                ending.outcomes[result.path] = ERRORED if result.error else DIVERGED if diverged else FINISHED
    return requeued


def current_fit() -> Ending | None:
    """The `Ending` of the fit under way (its `SweepEnding.setup` ran, its end not yet), else None."""
    return FITS[-1] if FITS and not FITS[-1].closed else None


def say_interrupted(ending: Ending, reused: int) -> None:
    """Print the sweep's last line when it was cut short: `interrupted: N of M trials finished, ... (why)`
    (`reused`: finished cells of earlier runs; `stopped by its time budget: ...` after --time-budget-s) and
    what continues it (`driver_record.continue_advice`: nothing after the time budget)."""
    if not ending.unfinished():
        return
    counts = ending.counts(reused)
    total = sum(counts[key] for key in COUNTS if key != "no_metric")
    others = describe_counts(counts | {"finished": 0}, shown=())
    head = "stopped by its time budget" if ending.ended_by == TIME_BUDGET else "interrupted"
    resumed = "--resume" in sys.argv[: sys.argv.index("--") if "--" in sys.argv else len(sys.argv)]
    launch = {"argv": redacted_argv(sys.argv), "python": sys.executable}
    advice = continue_advice(launch, counts, ending.ended_by, resumed)
    print(
        f"{head}: {counts['finished']} of {total} trials finished"
        + (f", {others}" if others else "")
        + f" ({ending.why})"
        + (f"; {advice}" if advice else ""),
        flush=True,
    )


class QuietTuneEnd(logging.Filter):
    """Drops Tune's end-of-run log lines that the sweep's own end replaces: the list of trials that did not
    complete (the outcome and the tables name them) and `Tuner.restore(...)` as the way to resume (the
    sweep prints its own command with --resume). Tune's "Stop signal received" line stays."""

    DROPPED = ("Trials did not complete", "Experiment has been interrupted")  # the start of Tune's format strings

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.DROPPED)


def quiet_tune_end() -> None:
    """Silence Tune's "Failed to fetch metrics" warning (a FileNotFoundError for each trial stopped before its
    first result) and its end-of-run lines (`QuietTuneEnd`): the sweep's outcome names those trials."""
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    tune_log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, QuietTuneEnd) for f in tune_log.filters):
        tune_log.addFilter(QuietTuneEnd())


EXIT_CODES = {"Ctrl-C": 130, "SIGTERM": 143}  # 128 + the signal's number, as a shell reports it
