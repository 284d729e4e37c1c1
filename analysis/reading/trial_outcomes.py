"""How each trial of an experiment ended (`trainables.experiment.outcome.trial_outcome`), as the trial
table's ``outcome`` column holds it: done, errored, no metric, diverged, interrupted, not run, running
or pending; the one count that the tables, the summary, the write-up and ``--json`` use."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.reading.driver_record import holder_alive, read_holder
from trainables.experiment.outcome import DIVERGED, DONE, ERRORED, PENDING, RUNNING, trial_outcome


def trial_outcomes(trials: list[dict], experiment: str) -> list[str]:
    """`trial_outcome` of each trial dict; the sweep is over when its driver record says it ended or is
    gone, and the trials that record lists as stopped did not end by themselves."""
    driver = read_holder(experiment)
    over = driver is not None and not holder_alive(driver)
    stopped = set((driver or {}).get("stopped") or ())
    return [
        trial_outcome(
            t["status"],
            {**t["tail"], "diverged": True} if t["nonfinite"] else t["tail"],  # a NaN in any row, as `diverged`
            over=over,
            stopped=t["trial_id"] in stopped,
        )
        for t in trials
    ]


def outcome_column(trials: pd.DataFrame) -> pd.Series:
    """The ``outcome`` of each trial of a :func:`load_trials` table; for a table without that column
    (made by hand), from ``status`` and ``diverged`` alone."""
    if "outcome" in trials.columns:
        return trials["outcome"]
    status = trials["status"]
    conditions = [status == "ERROR", trials["diverged"].astype(bool), status == "RUNNING", status != "TERMINATED"]
    return pd.Series(
        np.select(conditions, [ERRORED, DIVERGED, RUNNING, PENDING], DONE), index=trials.index, dtype=object
    )
