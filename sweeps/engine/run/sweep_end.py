"""The end of a sweep: how its `fit()` ended (finished, or interrupted: `SweepEnding`), its table on the
console and its write-up (`analysis.write_up`) in its report folder."""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import threading
import time

import ray
from ray import tune

import analysis
from analysis.reading.driver_record import resume_command
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import FINISHED, trial_outcome


def print_summary(experiment_dir: str, objective: Objective, shutdown_ray: bool = False) -> None:
    """Print the sweep's table (laid out as the grid, mean ± std over seeds of the objective's test metric,
    its selection rule stated, the best configuration by its metric named below) and then write its write-up
    (paper table, plots, report.md, with the same rule) into the report folder beside the results.

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
        folder = analysis.write_up(experiment_dir, objective=objective)
    except analysis.ExperimentError as e:
        print(f"no report: {e}")
        return
    finally:
        if stopper and stopper.is_alive():
            stopper.join()
    print(f"report: {folder / 'report.md'}")


@dataclasses.dataclass
class Ending:
    """How one `Tuner.fit()` of this driver ended, as `SweepEnding` saw it."""

    signal: str | None = None  # "Ctrl-C" (SIGINT) or "SIGTERM": the signal that stopped it
    total: int = 0  # trials it planned (Tune's total_num_samples, or its trials if more)
    started: set = dataclasses.field(default_factory=set)  # ids of the trials started in this fit
    ended: set = dataclasses.field(default_factory=set)  # ids of those that ended by themselves (or by the scheduler)
    outcomes: dict = dataclasses.field(default_factory=dict)  # trial path -> `trial_outcome` at the end
    stopped: set = dataclasses.field(default_factory=set)  # ids of the trials started and stopped before they ended
    previous_sigterm: object = None  # the SIGTERM handler before the fit, put back at its end
    closed: bool = False  # the fit ended (`on_experiment_end`)
    why: str = "stopped before every trial ended"  # what stopped it, for the last line
    stopper: object = None  # the sweep's `RunConfig.stop` (`InitialFailures` for command sweeps)
    budget_s: float | None = None  # --time-budget-s
    began: float = dataclasses.field(default_factory=time.monotonic)

    def finished(self) -> int:
        """Trials that ended by themselves (`outcome.FINISHED`): done, errored, diverged."""
        return sum(o in FINISHED for o in self.outcomes.values())

    def unfinished(self) -> int:
        """Trials interrupted or not run; once the fit was cut short, those the searcher never made too (a
        searcher that finished early, as `--seeds auto`'s, did not need them)."""
        left = sum(o not in FINISHED for o in self.outcomes.values())
        cut = bool(self.signal or self.stopped or left)
        return left + (max(0, self.total - len(self.outcomes)) if cut else 0)


FITS: list[Ending] = []  # this process's fits, newest last (the callback may be a copy restored from tuner.pkl)


class SweepEnding(tune.Callback):
    """Tune callback (first in every sweep's `RunConfig.callbacks`): records how `fit()` ends in `FITS`.

    Tune ends a run early on SIGINT (its own handler: the state is saved once more, then every
    running trial is stopped; a second Ctrl-C raises `KeyboardInterrupt`), on a stopper's `stop_all`
    (--max-initial-failures) and at --time-budget-s; the trials it stops then end as TERMINATED like
    finished ones. This callback tells them apart: a trial started in this fit that got neither
    `on_trial_complete` nor `on_trial_error` did not end by itself. It also routes SIGTERM to Tune's
    SIGINT handler (the same saved, resumable stop) and notes which signal came.
    """

    def __init__(self, stopper=None):
        """Args: stopper: the sweep's `RunConfig.stop` (`InitialFailures`), whose `why` names its stop."""
        self.stopper = stopper

    def setup(self, time_budget_s=None, total_num_samples=None, **info):
        stopper = getattr(self, "stopper", None)
        FITS.append(Ending(total=total_num_samples or 0, stopper=stopper, budget_s=time_budget_s))
        if threading.current_thread() is threading.main_thread():
            _catch_signals(FITS[-1])

    def on_trial_start(self, iteration, trials, trial, **info):
        FITS[-1].started.add(trial.trial_id)

    def on_trial_complete(self, iteration, trials, trial, **info):
        FITS[-1].ended.add(trial.trial_id)

    def on_trial_error(self, iteration, trials, trial, **info):
        FITS[-1].ended.add(trial.trial_id)

    def on_experiment_end(self, trials, **info):
        ending = FITS[-1]
        ending.closed = True
        ending.stopped = ending.started - ending.ended
        ending.why = _why(ending)
        ending.total = max(ending.total, len(trials))
        for trial in trials:
            stopped = trial.trial_id in ending.stopped
            ending.outcomes[trial.path] = trial_outcome(trial.status, trial.last_result, over=True, stopped=stopped)
        if threading.current_thread() is threading.main_thread():  # a Ctrl-C from now on stops the driver
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, ending.previous_sigterm or signal.SIG_DFL)


def _why(ending: Ending) -> str:
    """What ended a fit early: the signal, the stopper's stop (its `why`), or the time budget."""
    if ending.signal:
        return ending.signal
    stop_all = getattr(ending.stopper, "stop_all", None)
    if callable(stop_all) and stop_all():
        return getattr(ending.stopper, "why", "the sweep's stopper stopped it")
    if ending.budget_s and time.monotonic() - ending.began >= float(ending.budget_s):
        return f"--time-budget-s {float(ending.budget_s):g} reached"
    return ending.why


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


def fit(tuner) -> tuple:
    """`tuner.fit()` and how it ended: (its `ResultGrid`, its `Ending`; an empty one when no `SweepEnding`
    watched it, as in a sweep resumed from an older raysweep's tuner.pkl)."""
    FITS.clear()
    results = tuner.fit()
    return results, FITS[0] if FITS else Ending()


def current_fit() -> Ending | None:
    """The `Ending` of the fit under way (its `SweepEnding.setup` ran, its end not yet), else None."""
    return FITS[-1] if FITS and not FITS[-1].closed else None


def say_interrupted(ending: Ending, reused: int) -> None:
    """Print the sweep's last line when it did not finish: `interrupted: N of M trials finished (why)` (`reused`:
    finished cells of earlier runs), and after a signal the command that continues it (`resume_command`)."""
    if not ending.unfinished():
        return
    finished = ending.finished() + reused
    resume = resume_command({"argv": sys.argv, "python": sys.executable}) if ending.signal else None
    print(
        f"interrupted: {finished} of {finished + ending.unfinished()} trials finished "
        f"({ending.why})" + (f"; continue with: {resume}" if resume else ""),
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
