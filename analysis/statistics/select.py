"""One value per trial from its history, by a named selection rule (see :mod:`trainables.experiment.rules`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from trainables.experiment.errors import ExperimentError
from trainables.experiment.rules import DEFAULT_K, DEFAULT_METRIC, DEFAULT_MODE, check_select, describe_select


def select_values(
    history: pd.DataFrame,
    metric: str,
    select: str = "best-val",
    *,
    k: int = DEFAULT_K,
    val_metric: str = DEFAULT_METRIC,
    val_mode: str = DEFAULT_MODE,
) -> pd.DataFrame:
    """The reported value of ``metric`` for each trial under a selection rule.

    Args:
        history: :func:`analysis.load_history` table (``trial_id``, ``training_iteration``,
            one column per metric).
        metric: the metric to report, e.g. ``"test/acc"``.
        select: ``"best-val"`` (``metric`` at the iteration with the best finite
            ``val_metric``; ties -> the earliest), ``"last"`` (the last reported value) or
            ``"last-k"`` (mean of the last ``k`` reported values; all of them when the trial
            reported fewer than ``k``).
        k: epochs averaged by ``last-k`` (>= 1).
        val_metric, val_mode: validation metric and its direction (``"max"``/``"min"``) for
            ``best-val``.

    Returns:
        DataFrame indexed by ``trial_id`` (every trial of ``history``, in its order) with
        ``value`` (float; NaN when the trial has no such value, e.g. no finite validation
        value), ``iteration`` (the ``training_iteration`` selected; for ``last-k`` the last of
        the window) and ``epochs`` (number of reported values averaged: 1, or up to ``k``).

    Raises:
        ExperimentError: unknown rule, ``k`` < 1, ``metric`` not in the history, or ``best-val``
            without ``val_metric`` in the history (each message names the reported metrics).
    """
    _check(history, metric, select, k, val_metric, val_mode)
    ids = pd.unique(history["trial_id"])
    h = history.sort_values(["trial_id", "training_iteration"], kind="stable")
    h = h.assign(_value=pd.to_numeric(h[metric], errors="coerce")).reset_index(drop=True)
    out = _at_best_val(h, val_metric, val_mode) if select == "best-val" else _last(h, 1 if select == "last" else k)
    out = out.reindex(ids)
    out.index.name = "trial_id"
    out["epochs"] = out["epochs"].fillna(0).astype(int)
    return out


def _check(history: pd.DataFrame, metric: str, select: str, k: int, val_metric: str, val_mode: str) -> None:
    """Raise :class:`ExperimentError` for a bad rule, k or mode, or a metric missing from the history."""
    check_select(select, k)
    if val_mode not in ("max", "min"):
        raise ExperimentError(f"validation mode must be 'max' or 'min', not {val_mode!r}")
    not_metrics = ("experiment", "trial_id", "training_iteration", "time_total_s", "timestamp")
    reported = ", ".join(c for c in history.columns if c not in not_metrics) or "none"
    if metric not in history.columns:
        raise ExperimentError(f"metric {metric!r} is not in the history; reported metrics: {reported}")
    if select == "best-val" and (val_metric not in history.columns or history[val_metric].isna().all()):
        raise ExperimentError(
            f"best-val needs the validation metric {val_metric!r} in the history, "
            f"and no trial reported it; reported metrics: {reported}"
        )


def _at_best_val(h: pd.DataFrame, val_metric: str, val_mode: str) -> pd.DataFrame:
    """Per trial: ``_value`` at the iteration of the best finite ``val_metric`` (ties: the earliest)."""
    val = pd.to_numeric(h[val_metric], errors="coerce")
    val = val.where(np.isfinite(val))
    score = (val if val_mode == "max" else -val).dropna()
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
    trials: pd.DataFrame,
    history: pd.DataFrame,
    metrics: Sequence[str],
    select: str = "best-val",
    *,
    k: int = DEFAULT_K,
    val_metric: str = DEFAULT_METRIC,
    val_mode: str = DEFAULT_MODE,
) -> pd.DataFrame:
    """A copy of ``trials`` with a ``select/<metric>`` column per metric (:func:`select_values`).

    ``best_runs(..., scope="select")`` and the plots then use the selected values;
    ``attrs["select"]`` holds the rule (``{"rule", "k", "val_metric", "val_mode"}``) and
    ``attrs["select_text"][metric]`` its description (:func:`trainables.experiment.rules.describe_select`).

    Raises:
        ExperimentError: as :func:`select_values`.
    """
    out = trials.copy()
    texts = dict(trials.attrs.get("select_text", {}))
    for metric in metrics:
        values = select_values(history, metric, select, k=k, val_metric=val_metric, val_mode=val_mode)
        out[f"select/{metric}"] = values["value"].reindex(out["trial_id"]).to_numpy()
        texts[metric] = describe_select(select, metric, val_metric, k)
    out.attrs.update(select={"rule": select, "k": k, "val_metric": val_metric, "val_mode": val_mode}, select_text=texts)
    return out
