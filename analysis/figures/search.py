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
Inputs are never modified. Plots return a matplotlib `Figure`. The metric and its mode come as one
`Objective` (:mod:`trainables.experiment.objective`; default `val/acc`, `max`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.optuna_plots import (
    EVALUATORS,
    default_evaluator,
    optuna_quiet,
    plot_optimization_history,
    plot_parallel_coordinate,
    plot_param_importances,
    plot_slice,
)
from analysis.reading.search_record import import_optuna
from analysis.reading.trial_outcomes import trial_counts
from analysis.tables.search_table import ended_words, format_mean, format_param, search_frame, search_table
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import COUNTS

optuna = import_optuna()


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


def best_so_far(df: pd.DataFrame, objective: Objective = Objective(), time_col: str = "timestamp") -> pd.DataFrame:
    """Best `objective.metric` (by its mode) after each finished trial.

    Returns:
        DataFrame with one row per trial in finishing order: `trials` (1, 2, ...), `value` (that
        trial's metric), `best` (best so far), and `elapsed_s` (seconds since the search started:
        the earliest `time_col - time_total_s`, or the earliest `time_col`) when `time_col` exists.
    Raises:
        KeyError: no metric column.
    """
    ordered = search_order(df, time_col)
    values = ordered[objective.metric].to_numpy(dtype=float)
    best = np.fmax.accumulate(values) if objective.mode == "max" else np.fmin.accumulate(values)
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
    df: pd.DataFrame, objective: Objective = Objective(), x: str = "trials", time_col: str = "timestamp"
) -> Figure:
    """Best-so-far curve against the number of finished trials (`x="trials"`) or time (`x="time"`).

    Each trial's own value is a dot; the best so far is a step line.
    Raises:
        ValueError: x not trials/time, or x="time" without `time_col` in `df`.
    """
    if x not in ("trials", "time"):
        raise ValueError(f"x={x!r} is not one of trials, time")
    curve = best_so_far(df, objective, time_col)
    if x == "time" and "elapsed_s" not in curve:
        raise ValueError(f"x='time' needs a {time_col!r} column (finish time of each trial, seconds)")
    xs = curve["trials"] if x == "trials" else curve["elapsed_s"]
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.scatter(xs, curve["value"], s=12, alpha=0.5, label="trial")
    ax.step(xs, curve["best"], where="post", label="best so far")
    ax.set_xlabel("finished trials" if x == "trials" else "seconds since the search started")
    ax.set_ylabel(objective.metric)
    ax.legend(loc="lower right" if objective.mode == "max" else "upper right")
    fig.tight_layout()
    return fig


_STATES = {
    "finished": optuna.trial.TrialState.COMPLETE,
    "pruned": optuna.trial.TrialState.PRUNED,
    "errored": optuna.trial.TrialState.FAIL,
    "no metric": optuna.trial.TrialState.FAIL,
    "diverged": optuna.trial.TrialState.FAIL,
    "pending": optuna.trial.TrialState.WAITING,
    "not run": optuna.trial.TrialState.WAITING,
}
"""Optuna's state of each outcome (:mod:`trainables.experiment.outcome`); any other (running, interrupted:
not finished) is RUNNING, which Optuna's plots leave out as unfinished."""


def study_from_trials(
    df: pd.DataFrame,
    params: list[str],
    objective: Objective = Objective(),
    *,
    distributions: dict | None = None,
    history: pd.DataFrame | None = None,
) -> optuna.Study:
    """An in-memory Optuna study with one trial per row (row order: trial numbers; value: `objective.metric`,
    direction: its mode), for Optuna's importance evaluators and pictures.

    A row's state follows its ``ended`` column (:data:`_STATES`: a finished trial is COMPLETE with its
    metric as value, one the scheduler pruned is PRUNED, as Optuna records a pruned trial); without
    that column every row with a metric is COMPLETE. A COMPLETE row without a finite metric is FAIL.
    A parameter that is NaN in a row is left out of that trial (conditional parameters).

    Args:
        distributions: parameter -> Optuna distribution the searcher sampled from (its own study,
            :class:`analysis.reading.search_record.SearchRecord`); a parameter without one, or whose
            values it does not hold, gets one inferred: strings, booleans, whole numbers with at most 8
            distinct values (batch sizes) and constants are categorical; other numbers are floats, on a
            log scale when all are > 0 and they span a factor of 10 or more.
        history: :func:`analysis.load_history` of the trials (``trial_id`` in ``df``): each trial's
            ``metric`` per ``training_iteration`` becomes its intermediate values (Optuna shows pruned
            trials' curves from them).
    Raises:
        KeyError: a parameter or the metric is missing. ValueError: no row has a metric.
    """
    metric = objective.metric
    columns = {p: param_column(df, p) for p in params}
    has_end = "ended" in df
    rows = df if has_end else df[df[metric].notna()]
    if not pd.to_numeric(rows[metric], errors="coerce").notna().any():
        raise ValueError(f"no trial has a {metric!r} value")
    given = distributions or {}
    chosen = {p: _distribution(given.get(p), rows[c].dropna()) for p, c in columns.items()}
    curves = _intermediate_values(history, metric) if history is not None and "trial_id" in df else {}
    with optuna_quiet():
        study = optuna.create_study(direction="maximize" if objective.mode == "max" else "minimize")
        for _, row in rows.iterrows():
            present = {p: _plain(row[c]) for p, c in columns.items() if not _is_missing(row[c])}
            value = float(row[metric]) if not _is_missing(row[metric]) else math.nan
            state = _STATES.get(row["ended"], optuna.trial.TrialState.RUNNING) if has_end else _STATES["finished"]
            if state == optuna.trial.TrialState.COMPLETE and not math.isfinite(value):
                state = optuna.trial.TrialState.FAIL
            study.add_trial(
                optuna.trial.create_trial(
                    state=state,
                    value=value if state == optuna.trial.TrialState.COMPLETE else None,
                    params=present,
                    distributions={p: chosen[p] for p in present},
                    intermediate_values=curves.get(row["trial_id"], {}) if curves else None,
                    user_attrs={k: str(row[k]) for k in ("trial", "trial_id") if k in df} or None,
                )
            )
    return study


def complete_trials(study: optuna.Study) -> list:
    """The study's COMPLETE trials (those Optuna's pictures draw)."""
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def param_importance(
    df: pd.DataFrame, params: list[str], objective: Objective = Objective(), seed: int = 0
) -> pd.Series:
    """fANOVA importance (Hutter et al. 2014, Optuna's `FanovaImportanceEvaluator`) of each parameter.

    Only parameters every trial has enter (Optuna evaluates the common search space): pass the
    rows of one loss to rank that loss's own parameters.
    Returns:
        Series parameter -> share of the metric's variance it explains (sums to 1), largest first.
    """
    study = study_from_trials(df, params, objective)
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    with optuna_quiet():
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    return pd.Series(importances, name="importance", dtype=float)


def plot_parallel_coordinates(df: pd.DataFrame, params: list[str], objective: Objective = Objective()) -> Figure:
    """Parallel-coordinates plot of `params` coloured by `objective.metric` (Optuna's matplotlib plot)."""
    return plot_parallel_coordinate(study_from_trials(df, params, objective), params, objective.metric)


def _intermediate_values(history: pd.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """trial_id -> {training_iteration: finite metric value}."""
    if metric not in history:
        return {}
    rows = history[["trial_id", "training_iteration", metric]].copy()
    rows[metric] = pd.to_numeric(rows[metric], errors="coerce")
    rows = rows[np.isfinite(rows[metric])]
    return {
        trial_id: dict(zip(group["training_iteration"].astype(int), group[metric].astype(float)))
        for trial_id, group in rows.groupby("trial_id", sort=False)
    }


def top_trials(
    df: pd.DataFrame,
    k: int = 10,
    objective: Objective = Objective(),
    epochs: int | None = None,
    scheduler: str | None = None,
) -> pd.DataFrame:
    """The k best trials by `objective` of :func:`analysis.tables.search_table.search_table` as text cells, for
    the console.

    Columns: `trial`, one per `config/` column that varies (prefix dropped; blank where a trial did not
    have it), `epochs`, `ended` (an `ended` or `outcome` column of `df`, else
    :func:`analysis.reading.trial_outcomes.outcome_column` with `epochs`; in words, "pruned by <scheduler>", an
    interrupted trial by `df.attrs["ended_by"]`), `n_seeds`, and `<metric>` ± its 95 % CI as the search table writes
    it (`format_mean`: `91.24 ± 1.10` for an accuracy shown in %, `attrs["percent"]`; the ± part only with a
    `<metric>_ci95` column and more than one seed). Trials
    without a value of `metric` (diverged, errored) are not ranked; none at all gives an empty table.
    """
    metric = objective.metric
    if metric not in df:
        return pd.DataFrame(columns=["trial", metric])
    table = search_table(df, objective, epochs=epochs)
    table = table[table["rank"].notna()].head(k)
    out = pd.DataFrame({"trial": table["trial"]})
    for param in table.attrs["params"]:
        out[param] = table[param].map(format_param)
    out["epochs"] = table["epochs"].astype(str)
    ended_by = df.attrs.get("ended_by")
    out["ended"] = table["ended"].map(lambda outcome: ended_words(outcome, scheduler, ended_by))
    out["n_seeds"] = table["n_seeds"]
    out[metric] = [format_mean(m, c, table.attrs["percent"]) for m, c in zip(table[metric], table[f"{metric}_ci95"])]
    out = out.reset_index(drop=True)
    out.attrs["percent"] = table.attrs["percent"]
    return out


def _distribution(given, values: pd.Series) -> optuna.distributions.BaseDistribution:
    """``given`` when it holds every value (the searcher's own), else one inferred from the values."""
    if given is not None:
        try:
            if all(given._contains(given.to_internal_repr(_plain(v))) for v in values):
                return given
        except (ValueError, TypeError):
            pass
    return _infer_distribution(values)


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


# --- what a search's report draws ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Picture:
    """A picture of a report: drawn by ``draw``, or (``draw`` None) left out for the reason ``why``:
    by design (``expected``, e.g. no Optuna picture of PBT) or because the data cannot make it."""

    name: str  # file name without suffix, e.g. "slice"
    title: str
    draw: Callable[[], Figure] | None = None
    caption: str = ""
    why: str = ""
    expected: bool = False


OPTUNA_PICTURES = {
    "optimization_history": "Optimization history",
    "slice": "Slice",
    "param_importances": "Parameter importances",
    "parallel_coordinate": "Parallel coordinates",
}
"""The pictures of a search drawn by Optuna's own functions (``optuna.visualization.matplotlib``)."""


def search_pictures(trials: pd.DataFrame, history: pd.DataFrame, objective: Objective) -> list[Picture]:
    """The pictures of a search or PBT experiment, from the study :func:`study_from_trials` builds.

    Args:
        trials: :func:`analysis.load_trials` table with ``select/<metric>``
            (:func:`analysis.add_selected`) and ``attrs["search"]``
            (:class:`analysis.reading.search_record.SearchRecord`; none: a grid, no pictures).
        history: its :func:`analysis.load_history` (pruned trials' intermediate values).
        objective: what the search optimised (its metric and mode).
    Returns:
        For a search: :data:`OPTUNA_PICTURES` and ``optimization_history_time`` (best so far against
        seconds since the search started, :func:`plot_best_so_far`: Optuna has no such picture), each
        left out with its reason where fewer than 2 trials completed or no parameter varies among them.
        For PBT: ``pbt_schedule`` (:func:`analysis.figures.pbt_schedule.plot_pbt_schedule`); the others are
        left out (a member has no single configuration). Nothing to draw is drawn here: ``draw`` does.
    """
    record, metric = trials.attrs.get("search"), objective.metric
    if record is None:
        return []
    if record.kind == "pbt":
        return _pbt_pictures(trials, record, metric)
    frame = search_frame(trials, metric)
    params = [p for p in record.params if f"config/{p}" in frame]
    study = study_from_trials(frame, params, objective, distributions=record.distributions, history=history)
    complete = complete_trials(study)
    varied = [p for p in params if len({repr(t.params[p]) for t in complete if p in t.params}) > 1]
    n = trial_counts(trials)  # the others in the run's words and counts, not Optuna's states (RUNNING: interrupted)
    others = "".join(f", {n[k]} {k.replace('_', ' ')}" for k in COUNTS[3:] if n[k] and k != "no_metric")
    counts = f"{len(complete)} of {n['total']} trials complete{others}; as Optuna does, pruned and unfinished trials "
    counts += "have no value here (the search table lists them)."
    if len(complete) < 2 or not varied:
        why = f"{len(complete)} complete trial(s), 2 needed" if len(complete) < 2 else "no parameter varies"
        names = {**OPTUNA_PICTURES, "optimization_history_time": "Optimization history over time"}
        return [Picture(n, t, why=f"{why} among the complete trials ({counts})") for n, t in names.items()]
    timed = frame.assign(  # every trial's times (the search's start), the values of the complete ones
        **{metric: frame[metric].where(frame["trial_id"].isin({t.user_attrs.get("trial_id") for t in complete}))}
    )
    return _optuna_pictures(study, timed, varied, objective, counts)


def _optuna_pictures(
    study: optuna.Study, timed: pd.DataFrame, varied: list[str], objective: Objective, counts: str
) -> list[Picture]:
    """:data:`OPTUNA_PICTURES` of a study with two complete trials or more, and the history over time."""
    metric = objective.metric
    evaluator = default_evaluator()
    name = type(evaluator).__name__
    by_name = {
        "optimization_history": (
            lambda: plot_optimization_history(study, metric),
            f"Each complete trial's {metric} in the search's order, and the best so far. {counts}",
        ),
        "optimization_history_time": (
            lambda: plot_best_so_far(timed, objective, x="time"),
            f"The best {metric} so far against seconds since the search started (complete trials).",
        ),
        "slice": (
            lambda: plot_slice(study, varied, metric),
            f"{metric} against each searched parameter, on a log axis where it was sampled on one. {counts}",
        ),
        "param_importances": (
            lambda: plot_param_importances(study, varied, metric, evaluator),
            f"Evaluator: {EVALUATORS.get(name, name)}, Optuna's default (`{name}`), over the complete trials.",
        ),
        "parallel_coordinate": (
            lambda: plot_parallel_coordinate(study, varied, metric),
            f"One line per complete trial, coloured by {metric}. {counts}",
        ),
    }
    titles = {**OPTUNA_PICTURES, "optimization_history_time": "Optimization history over time"}
    return [Picture(n, titles[n], draw, caption) for n, (draw, caption) in by_name.items()]


def _pbt_pictures(trials: pd.DataFrame, record, metric: str) -> list[Picture]:
    """PBT's schedule; Optuna's pictures left out by design."""
    from analysis.figures.pbt_schedule import plot_pbt_schedule

    why = "PBT changes a member's hyperparameters while it trains: no value belongs to one configuration"
    schedule = Picture(
        "pbt_schedule",
        "PBT schedule",
        lambda: plot_pbt_schedule(trials, record, metric),
        caption="Each member's hyperparameters over its training; ◆ marks an exploit/explore step "
        "(Tune's pbt_global.txt): the member took the checkpoint of the member named and perturbed its values.",
    )
    return [schedule, *(Picture(n, t, why=why, expected=True) for n, t in OPTUNA_PICTURES.items())]
