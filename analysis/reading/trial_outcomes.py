"""How each trial of an experiment ended (`trainables.experiment.outcome.trial_outcome`), as the trial
table's ``outcome`` column holds it: finished, pruned, errored, no metric, diverged, interrupted, not run,
running or pending; the one count that the tables, the summary, the write-up, a search's table and
``--json`` use, from the facts the driver recorded (`driver.json`: the trials it stopped, their
scheduler's stops, why the sweep ended)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.reading.driver_record import holder_alive, read_holder
from analysis.reading.search_record import PBT_SCHEDULERS
from trainables.experiment.outcome import (
    DIVERGED,
    ERRORED,
    FINISHED,
    PENDING,
    PRUNED,
    RUNNING,
    count_outcomes,
    planned_epochs,
    scheduler_pruned,
    trial_outcome,
)


def trial_outcomes(trials: list[dict], experiment: str, search=None) -> tuple[list[str], str | None, int]:
    """(`trial_outcome` of each trial dict, why the sweep ended: `driver.json`'s `ended_by`, None while it runs
    or when unknown, and the planned trials its searcher never made: `driver.json`'s `not_created`, 0 while it
    runs or when not recorded).

    The sweep is over when its driver record says it ended or is gone; the trials that record lists as
    stopped did not end by themselves; its `scheduler_stops` tell pruned trials. A search whose record has
    none (an older raysweep's, a foreign Tune experiment) has its scheduler's stops read from each trial's
    last logged row: Tune logs the result its scheduler stopped the trial at with `done: true`. `search`:
    the experiment's `SearchRecord` (None: a grid, which no scheduler stops; PBT stops none either).
    """
    driver = read_holder(experiment)
    over = driver is not None and not holder_alive(driver)
    record = driver or {}
    stopped = set(record.get("stopped") or ())
    stops = record.get("scheduler_stops")
    if stops is None and (search is None or search.scheduler in PBT_SCHEDULERS):
        stops = {}  # nothing stops a grid's trial, or a PBT member, before its end
    outcomes = [
        trial_outcome(
            t["status"],
            _ran(t),
            over=over,
            stopped=t["trial_id"] in stopped,
            stop_at=stops.get(t["trial_id"]) if stops is not None else _logged_stop(t["tail"]),
            planned=planned_epochs(t["config"]),
        )
        for t in trials
    ]
    return outcomes, record.get("ended_by") if over else None, int(record.get("not_created") or 0) if over else 0


def _ran(trial: dict) -> dict:
    """The trial's last result as its outcome reads it: a NaN in any row as `diverged`, and the rows its command
    logged after Tune stopped it (`late`, `analysis/reading/late_rows.py`) counted in its iterations when the
    command had exited by itself: a trial a scheduler stopped that had run all its epochs anyway is finished, one
    whose command was ended mid-run (`late_cut`) is pruned, whatever it logged before it ended."""
    tail = {**trial["tail"], "diverged": True} if trial["nonfinite"] else trial["tail"]
    if trial.get("late") and not trial.get("late_cut", True):
        tail = {**tail, "training_iteration": int(tail.get("training_iteration") or 0) + trial["late"]}
    return tail


def _logged_stop(tail: dict) -> int | None:
    """The iteration of a scheduler's STOP that a trial's last logged row shows (`done` on it), else None."""
    if str(tail.get("done")) != "True":  # a bool from JSON, numpy's from a DataFrame row
        return None
    return int(tail.get("training_iteration") or 0)


def trial_counts(trials: pd.DataFrame) -> dict[str, int]:
    """The trials of a :func:`analysis.load_trials` table by outcome (`outcome.count_outcomes`), with ``total``:
    the planned trials its searcher never made (``attrs["not_created"]``, as the driver's last line counted them)
    count as not run. The one count of the summary, the report, a search's closing lines and ``--json``."""
    not_created = int(trials.attrs.get("not_created") or 0)
    return {"total": len(trials) + not_created, **count_outcomes(outcome_column(trials), not_created, over=True)}


def outcome_column(trials: pd.DataFrame, epochs: int | None = None) -> pd.Series:
    """The ``outcome`` of each trial of a :func:`load_trials` table; for a table without that column (made by
    hand, ``ResultGrid.get_dataframe()``), from what it holds: ``status`` (TERMINATED when absent),
    ``diverged``, and a scheduler's stop on its last logged row (a ``stopped`` column: ``done`` there) before
    its planned end (``epochs``, else each row's ``config/epochs``; `outcome.scheduler_pruned`)."""
    if "outcome" in trials.columns:
        return trials["outcome"]
    index = trials.index
    status = trials["status"] if "status" in trials else pd.Series("TERMINATED", index=index)
    diverged = trials["diverged"].fillna(False).astype(bool) if "diverged" in trials else pd.Series(False, index=index)
    column = next((trials[c] for c in ("iterations", "training_iteration") if c in trials), pd.Series(0, index=index))
    iterations = pd.to_numeric(column, errors="coerce").fillna(0).astype(int)
    planned = (
        [epochs] * len(trials)
        if epochs is not None
        else [
            planned_epochs({"epochs": e})
            for e in (trials["config/epochs"] if "config/epochs" in trials else [None] * len(trials))
        ]
    )
    stopped = trials["stopped"] if "stopped" in trials else pd.Series(False, index=index)
    pruned = [
        str(flag) == "True" and scheduler_pruned(int(n), int(n), plan)
        for flag, n, plan in zip(stopped, iterations, planned)
    ]
    conditions = [status == "ERROR", diverged, status == "RUNNING", status != "TERMINATED", np.array(pruned, bool)]
    return pd.Series(
        np.select(conditions, [ERRORED, DIVERGED, RUNNING, PENDING, PRUNED], FINISHED), index=index, dtype=object
    )
