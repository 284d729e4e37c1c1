"""One value per trial from its history, by an objective's selection rule (:mod:`trainables.experiment.rules`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective
from trainables.experiment.rules import describe_select


def select_values(history: pd.DataFrame, metric: str, objective: Objective) -> pd.DataFrame:
    """The reported value of ``metric`` for each trial under the selection rule of ``objective``.

    Args:
        history: :func:`analysis.load_history` table (``trial_id``, ``training_iteration``,
            one column per metric).
        metric: the metric to report, e.g. ``"test/acc"``.
        objective: its ``select`` is ``"best-val"`` (``metric`` at the iteration with the best
            finite ``objective.metric`` by ``objective.mode``; ties -> the earliest), ``"last"`` (the
            last reported value) or ``"last-k"`` (mean of the last ``objective.k`` reported values;
            all of them when the trial reported fewer).

    Returns:
        DataFrame indexed by ``trial_id`` (every trial of ``history``, in its order) with
        ``value`` (float; NaN when the trial has no such value, e.g. no finite validation
        value), ``iteration`` (the ``training_iteration`` selected; for ``last-k`` the last of
        the window) and ``epochs`` (number of reported values averaged: 1, or up to ``k``).

    Raises:
        ExperimentError: ``metric`` not in the history, or ``best-val`` without the objective's
            metric in the history (each message names the reported metrics).
    """
    _check(history, metric, objective)
    ids = pd.unique(history["trial_id"])
    h = history.sort_values(["trial_id", "training_iteration"], kind="stable")
    h = h.assign(_value=pd.to_numeric(h[metric], errors="coerce")).reset_index(drop=True)
    select = objective.select
    out = _at_best_val(h, objective) if select == "best-val" else _last(h, 1 if select == "last" else objective.k)
    out = out.reindex(ids)
    out.index.name = "trial_id"
    out["epochs"] = out["epochs"].fillna(0).astype(int)
    return out


def _check(history: pd.DataFrame, metric: str, objective: Objective) -> None:
    """Raise :class:`ExperimentError` for a metric missing from the history."""
    val_metric = objective.metric
    not_metrics = ("experiment", "trial_id", "training_iteration", "time_total_s", "timestamp")
    reported = ", ".join(c for c in history.columns if c not in not_metrics) or "none"
    if metric not in history.columns:
        raise ExperimentError(f"metric {metric!r} is not in the history; reported metrics: {reported}")
    if objective.select == "best-val" and (val_metric not in history.columns or history[val_metric].isna().all()):
        raise ExperimentError(
            f"best-val needs the validation metric {val_metric!r} in the history, "
            f"and no trial reported it; reported metrics: {reported}"
        )


def _at_best_val(h: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """Per trial: ``_value`` at the iteration of the best finite ``objective.metric`` (ties: the earliest)."""
    val = pd.to_numeric(h[objective.metric], errors="coerce")
    val = val.where(np.isfinite(val))
    score = (val if objective.mode == "max" else -val).dropna()
    rows = h.loc[score.groupby(h.loc[score.index, "trial_id"], sort=False).idxmax()]  # first max: earliest
    return pd.DataFrame(
        {"value": rows["_value"].to_numpy(float), "iteration": rows["training_iteration"].to_numpy(), "epochs": 1},
        index=rows["trial_id"].to_numpy(),
    )


def _last(h: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per trial: the mean of its last ``k`` reported ``_value``s, the last iteration and how many were averaged."""
    window = h[h["_value"].notna()].groupby("trial_id", sort=False).tail(k)
    by = window.groupby("trial_id", sort=False)
    return pd.DataFrame(
        {"value": by["_value"].mean(), "iteration": by["training_iteration"].last(), "epochs": by.size()}
    )


def add_selected(
    trials: pd.DataFrame, history: pd.DataFrame, metrics: Sequence[str], objective: Objective
) -> pd.DataFrame:
    """A copy of ``trials`` with a ``select/<metric>`` column per metric under ``objective``'s rule
    (:func:`select_values`).

    ``best_runs(..., scope="select")`` and the plots then use the selected values;
    ``attrs["select"]`` holds the rule (``{"rule", "k", "val_metric", "val_mode"}``) and
    ``attrs["select_text"][metric]`` its description (:func:`trainables.experiment.rules.describe_select`).

    Raises:
        ExperimentError: as :func:`select_values`.
    """
    out = trials.copy()
    texts = dict(trials.attrs.get("select_text", {}))
    for metric in metrics:
        values = select_values(history, metric, objective)
        out[f"select/{metric}"] = values["value"].reindex(out["trial_id"]).to_numpy()
        texts[metric] = describe_select(objective.select, metric, objective.metric, objective.k)
    rule = {"rule": objective.select, "k": objective.k, "val_metric": objective.metric, "val_mode": objective.mode}
    out.attrs.update(select=rule, select_text=texts)
    return out
