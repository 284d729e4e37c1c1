"""The members of a population-based training run (Jaderberg et al. 2017) as the tables read them.

A member is not one configuration: Tune's `PopulationBasedTraining` copies a better member's weights
into it and perturbs its hyperparameters while it trains, so its config in Tune's state is only the
one it ran last (received, maybe, one iteration before it ended). So in a PBT experiment's trial table
(:func:`member_view`, called by :func:`analysis.reading.load.load_experiment`):

- ``config/member`` is the member's name: each member is its own row in every table (two members that
  end with equal hyperparameters are two models, not two seeds of one configuration);
- each hyperparameter is the value in force at the member's best logged value of the sweep's metric
  (the ``config/<key>`` of that history row: :func:`analysis.reading.tune_files.read_experiment_files`),
  not its final one, and ``best_epoch`` is the epoch of that value;
- ``attrs["pbt"]`` says so (:func:`pbt_note` is the sentence the tables print).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainables.experiment.objective import Objective

MEMBER = "config/member"
"""The trial-table column naming each member (its trial name)."""

BEST_EPOCH = "best_epoch"
"""The trial-table column with the epoch (``epoch`` when reported, else ``training_iteration``) of each
member's best logged value of the sweep's metric; NA without one."""


def member_view(
    trials: pd.DataFrame, history: pd.DataFrame, objective: Objective, busy: dict | None = None
) -> pd.DataFrame:
    """A copy of a PBT experiment's trial table in which each member is one row of its own (module docstring).

    Args:
        trials, history: the trial table and the history of one PBT experiment; the history holds the
            config in force at each row as ``config/<key>`` columns, each member's rows in the order logged.
        objective: the sweep's: its metric and mode pick each member's best row (a metric the history
            lacks: only ``config/member`` and ``best_epoch``, NA, are added).
        busy: trial id -> [(start, end)] Unix seconds it ran (a member waits, paused, while others train).
    Returns:
        the copy, with ``config/member``, ``best_epoch`` (Int64) and the ``config/<key>`` columns of the
        history set to the values at each member's best row (NaN where that row's config is unknown);
        ``attrs["pbt"]``: ``{"metric", "mode", "params"}`` (the keys whose value changed during the run)
        and ``busy`` (as given; the timeline draws these stretches: :func:`analysis.figures.packing.timeline`).
    """
    out = trials.copy()
    out.insert(out.columns.get_loc("trial_name") + 1, MEMBER, out["trial_name"].astype(str))
    keys = [c for c in history.columns if c.startswith("config/") and c in out.columns]
    changed = [c for c in keys if history.groupby("trial_id")[c].nunique().max() > 1 or out[c].nunique() > 1]
    best = _best_rows(history, objective)
    rows = best.reindex(out["trial_id"].to_numpy())
    epochs = pd.to_numeric(rows["epoch" if "epoch" in rows else "training_iteration"], errors="coerce")
    out[BEST_EPOCH] = pd.array(epochs.round().to_numpy(), dtype="Int64")
    changed = changed if len(best) else []
    for column in changed:
        out[column] = rows[column].to_numpy()
    params = [c[len("config/") :] for c in changed]
    metric = objective.metric if objective.metric in history.columns else None
    out.attrs["pbt"] = {"metric": metric, "mode": objective.mode, "params": params, "busy": dict(busy or {})}
    return out


def _best_rows(history: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """Per trial id, its history row with the best finite value of the objective's metric; ties: the lowest
    iteration, then the first logged (the rule of :func:`analysis.statistics.select.select_values`)."""
    if objective.metric not in history.columns:
        return pd.DataFrame(columns=history.columns).set_index("trial_id")
    values = pd.to_numeric(history[objective.metric], errors="coerce")
    score = (values if objective.mode != "min" else -values).where(np.isfinite(values)).dropna()
    ordered = history.loc[score.index].assign(_score=score)
    ordered = ordered.sort_values(["trial_id", "training_iteration"], kind="stable")
    best = ordered.loc[ordered.groupby("trial_id", sort=False)["_score"].idxmax()]
    return best.drop(columns="_score").set_index("trial_id")


def pbt_note(trials: pd.DataFrame) -> str | None:
    """The sentence a table of a PBT experiment carries (``attrs["pbt"]``), None for any other experiment."""
    pbt = trials.attrs.get("pbt")
    if not pbt:
        return None
    params = ", ".join(pbt["params"])
    where = f"in force at its best {pbt['metric']} (column {BEST_EPOCH} of trials.csv)" if pbt["metric"] else ""
    return (
        "PBT: one row per member (a member is not one configuration: PBT copies weights into it and changes its "
        "hyperparameters while it trains)" + (f"; {params}: the values {where}" if params and where else "") + "."
    )
