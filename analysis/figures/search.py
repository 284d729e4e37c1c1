"""Analysis of a hyperparameter search (`sweeps/lr_search.py`, `sweeps/pbt.py`): pure functions.

Input: a pandas DataFrame with one row per trial, as `ResultGrid.get_dataframe()` gives it:
    - the metric column, e.g. `val/acc` (the trial's last reported value; with `--repeat` the seed
      mean), optionally `val/acc_ci95` (half-width of its 95% CI over seeds) and `num_seeds`;
    - hyperparameters as `config/<name>` columns (`config/lr`, `config/loss`, ...) or plain `<name>`
      columns; a parameter a trial did not have (gce_q of a `ce` trial) is NaN;
    - for time plots and trial order, a finish-time column in seconds (default `timestamp`, Unix
      time of the last result) and optionally `time_total_s` (the trial's running time), from which
      the search's start is taken;
    - optionally `training_iteration` (epochs the trial ran) and `trial` (its name; else `logdir` or
      `trial_id` is used).
Inputs are never modified. Plots return a matplotlib `Figure`. The default metric and mode are
analysis's own (`val/acc`, `max`, :mod:`trainables.experiment.rules`): analysis/ imports nothing from trainables/.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import optuna
import pandas as pd
from matplotlib.figure import Figure

from analysis.reading.scheduler_stop import STOPPED
from analysis.tables.formatting import bare
from trainables.experiment.rules import DEFAULT_METRIC as METRIC
from trainables.experiment.rules import DEFAULT_MODE as MODE


def param_column(df: pd.DataFrame, name: str) -> str:
    """The column holding parameter `name`: `config/<name>` if present, else `<name>`.

    Raises:
        KeyError: neither exists (naming both).
    """
    for column in (f"config/{name}", name):
        if column in df.columns:
            return column
    raise KeyError(f"no column 'config/{name}' or '{name}' in the trials table")


def search_order(df: pd.DataFrame, time_col: str = "timestamp") -> pd.DataFrame:
    """The trials in the order they finished (by `time_col`), or in row order without that column."""
    return df.sort_values(time_col, kind="stable") if time_col in df.columns else df


def best_so_far(df: pd.DataFrame, metric: str = METRIC, mode: str = MODE, time_col: str = "timestamp") -> pd.DataFrame:
    """Best metric after each finished trial.

    Returns:
        DataFrame with one row per trial in finishing order: `trials` (1, 2, ...), `value` (that
        trial's metric), `best` (best so far), and `elapsed_s` (seconds since the search started:
        the earliest `time_col - time_total_s`, or the earliest `time_col`) when `time_col` exists.
    Raises:
        ValueError: mode not min/max. KeyError: no metric column.
    """
    if mode not in ("min", "max"):
        raise ValueError(f"mode={mode!r} is not one of min, max")
    ordered = search_order(df, time_col)
    values = ordered[metric].to_numpy(dtype=float)
    best = np.fmax.accumulate(values) if mode == "max" else np.fmin.accumulate(values)
    out = pd.DataFrame({"trials": np.arange(1, len(values) + 1), "value": values, "best": best})
    if time_col in ordered.columns:
        finish = ordered[time_col].to_numpy(dtype=float)
        start = (
            (finish - ordered["time_total_s"].to_numpy(dtype=float)).min()
            if "time_total_s" in ordered
            else finish.min()
        )
        out["elapsed_s"] = finish - start
    return out


def plot_best_so_far(
    df: pd.DataFrame, metric: str = METRIC, mode: str = MODE, x: str = "trials", time_col: str = "timestamp"
) -> Figure:
    """Best-so-far curve against the number of finished trials (`x="trials"`) or time (`x="time"`).

    Each trial's own value is a dot; the best so far is a step line.
    Raises:
        ValueError: x not trials/time, or x="time" without `time_col` in `df`.
    """
    if x not in ("trials", "time"):
        raise ValueError(f"x={x!r} is not one of trials, time")
    curve = best_so_far(df, metric, mode, time_col)
    if x == "time" and "elapsed_s" not in curve:
        raise ValueError(f"x='time' needs a {time_col!r} column (finish time of each trial, seconds)")
    xs = curve["trials"] if x == "trials" else curve["elapsed_s"]
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.scatter(xs, curve["value"], s=12, alpha=0.5, label="trial")
    ax.step(xs, curve["best"], where="post", label="best so far")
    ax.set_xlabel("finished trials" if x == "trials" else "seconds since the search started")
    ax.set_ylabel(metric)
    ax.legend(loc="lower right" if mode == "max" else "upper right")
    fig.tight_layout()
    return fig


def study_from_trials(df: pd.DataFrame, params: list[str], metric: str = METRIC, mode: str = MODE) -> optuna.Study:
    """An in-memory Optuna study with one completed trial per row, for Optuna's importance and plots.

    Distributions are inferred per parameter: strings, booleans, whole numbers with at most 8
    distinct values (batch sizes) and constants are categorical; other numbers are floats, on a log
    scale when all are > 0 and they span a factor of 10 or more. A parameter that is NaN in a row is
    left out of that trial (conditional parameters). Rows with a NaN metric are skipped.
    Raises:
        KeyError: a parameter or the metric is missing. ValueError: no row has a metric.
    """
    columns = {p: param_column(df, p) for p in params}
    rows = df[df[metric].notna()]
    if rows.empty:
        raise ValueError(f"no trial has a {metric!r} value")
    distributions = {p: _infer_distribution(rows[c].dropna()) for p, c in columns.items()}
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    for _, row in rows.iterrows():
        present = {p: _plain(row[c]) for p, c in columns.items() if not _is_missing(row[c])}
        study.add_trial(
            optuna.trial.create_trial(
                params=present, distributions={p: distributions[p] for p in present}, value=float(row[metric])
            )
        )
    return study


def param_importance(
    df: pd.DataFrame, params: list[str], metric: str = METRIC, mode: str = MODE, seed: int = 0
) -> pd.Series:
    """fANOVA importance (Hutter et al. 2014, Optuna's `FanovaImportanceEvaluator`) of each parameter.

    Only parameters every trial has enter (Optuna evaluates the common search space): pass the
    rows of one loss to rank that loss's own parameters.
    Returns:
        Series parameter -> share of the metric's variance it explains (sums to 1), largest first.
    """
    study = study_from_trials(df, params, metric, mode)
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    return pd.Series(importances, name="importance", dtype=float)


def plot_parallel_coordinates(df: pd.DataFrame, params: list[str], metric: str = METRIC, mode: str = MODE) -> Figure:
    """Parallel-coordinates plot of `params` coloured by `metric` (Optuna's matplotlib plot)."""
    study = study_from_trials(df, params, metric, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = optuna.visualization.matplotlib.plot_parallel_coordinate(study, params=params, target_name=metric)
    ax.figure.set_size_inches(2.2 * (len(params) + 2), 5)
    return ax.figure


def top_trials(df: pd.DataFrame, k: int = 10, metric: str = METRIC, mode: str = MODE) -> pd.DataFrame:
    """The k best trials as a table: name, searched parameters, epochs run, metric as mean ± 95% CI.

    Columns: `trial` (a `trial` column, the last part of `logdir`, or `trial_id`), one per
    `config/` column that varies (prefix dropped), `epochs` (`(stopped)` where the `stopped` column,
    `analysis.reading.scheduler_stop.stopped_by_scheduler`, is true), `n_seeds`, and `<metric>` formatted
    as `0.912 ± 0.011` (the ± part only with a `<metric>_ci95` column and more than one seed).
    Trials without a value of `metric` (diverged, errored) are not ranked; none at all gives an
    empty table.
    """
    if metric not in df:
        return pd.DataFrame(columns=["trial", metric])
    ranked = df[df[metric].notna()].sort_values(metric, ascending=(mode == "min")).head(k)
    out = pd.DataFrame(index=ranked.index)
    name_col = next((c for c in ("trial", "logdir", "trial_id") if c in ranked), None)
    if name_col == "logdir":
        out["trial"] = ranked["logdir"].map(lambda p: str(p).rstrip("/").rsplit("/", 1)[-1])
    else:
        out["trial"] = ranked[name_col] if name_col else range(1, len(ranked) + 1)
    for column in sorted(c for c in df.columns if c.startswith("config/")):
        if df[column].nunique(dropna=True) > 1:
            out[bare(column)] = ranked[column].map(_short)
    if "training_iteration" in ranked:
        out["epochs"] = ranked["training_iteration"].astype(int).astype(str)
        if STOPPED in ranked:
            out["epochs"] += np.where(ranked[STOPPED].fillna(False).astype(bool), " (stopped)", "")
    seeds = ranked["num_seeds"].fillna(1).astype(int) if "num_seeds" in ranked else pd.Series(1, index=ranked.index)
    out["n_seeds"] = seeds
    ci = ranked[f"{metric}_ci95"] if f"{metric}_ci95" in ranked else pd.Series(np.nan, index=ranked.index)
    out[metric] = [
        f"{m:.3f}" + (f" ± {c:.3f}" if n > 1 and not math.isnan(c) else "")
        for m, c, n in zip(ranked[metric], ci, seeds)
    ]
    return out.reset_index(drop=True)


def _infer_distribution(values: pd.Series) -> optuna.distributions.BaseDistribution:
    uniques = sorted({_plain(v) for v in values}, key=str)
    is_int = all(isinstance(v, int) and not isinstance(v, bool) for v in uniques)
    is_float = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniques)
    if not is_float or len(uniques) == 1 or (is_int and len(uniques) <= 8):
        return optuna.distributions.CategoricalDistribution(uniques)
    low, high = float(min(uniques)), float(max(uniques))
    return optuna.distributions.FloatDistribution(low, high, log=low > 0 and high / low >= 10)


def _plain(value):
    """numpy scalars as Python ones (Optuna's distributions compare and store plain values)."""
    return value.item() if isinstance(value, np.generic) else value


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _short(value) -> str:
    if _is_missing(value):
        return ""
    return f"{value:.3g}" if isinstance(value, float) else str(value)
