"""Curves over seeds: learning curves, the metric against noise rate, the paper table as curves.
Each function returns a new matplotlib ``Figure`` and touches no global state (no ``pyplot``)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.figures.plot_style import axis_label, colors, legend, scope_text
from analysis.reading.load import (
    SEED_KEY,
    ExperimentError,
    config_column,
    metric_column,
    varying_config_columns,
)
from analysis.reading.pbt_members import MEMBER
from analysis.tables.best_runs import best_runs, failed
from analysis.tables.formatting import bare, format_value, named_label, sort_key
from trainables.experiment.objective import Objective
from trainables.experiment.rules import percent_scale


def plot_learning_curves(
    history: pd.DataFrame,
    trials: pd.DataFrame,
    objective: Objective,
    *,
    by: Sequence[str] | None = None,
    x: str | None = None,
    panel: str | None = "noise_type",
    seed: str = SEED_KEY,
    highlight: int | None = None,
) -> Figure:
    """``objective.metric`` against training progress, one line per configuration: mean ± 1 std over seeds.

    Errored and diverged trials are left out (the legend gives the seeds per line). One panel per
    value of ``panel`` (e.g. sym | asym); one numeric key left (noise rate): a sequential colour map.
    With more configurations than ``highlight`` (a big search), the best ``highlight`` by their best
    mean (by the objective's mode) are named, the rest thin grey lines.

    Args:
        history: :func:`analysis.load_history` of the experiment.
        trials: :func:`analysis.load_trials` of the same experiment (for configs and status).
        objective: a reported metric (e.g. ``"val/acc"``) and its mode.
        by: config keys that define a configuration; default every varying key except the seed.
        x: history column for the x axis; default ``epoch`` when reported, else
            ``training_iteration``.
        panel: config key to split panels by, or None for one panel.
        seed: config key of the seed axis.
        highlight: see above; None draws every configuration in colour.

    Returns:
        Figure with one Axes per panel; in each, one line (a dot for one point; a shaded ± std band
        where n ≥ 2) per configuration; highlighted ones first in the legend, best first.

    Raises:
        ExperimentError: the metric (or ``x``) is not a column of ``history``; the message lists
            the metrics that exist.
    """
    metric = objective.metric
    x = _x_column(history, trials, metric, x)
    keys = _group_keys(trials, by, seed)
    panel_key = next((k for k in keys if panel and k in (panel, f"config/{panel}")), None)
    line_keys = [k for k in keys if k != panel_key]
    ok = trials.loc[~failed(trials), ["trial_id", *keys]]
    data = history[["trial_id", x, metric]].merge(ok, on="trial_id")
    data = data[np.isfinite(pd.to_numeric(data[metric], errors="coerce"))]
    panels = list(data.groupby(panel_key, sort=True)) if panel_key else [(None, data)]
    line_values, line_colors, best = _line_colors(data, trials, line_keys, x, objective, highlight)
    fig = Figure(figsize=(max(6.0, 5.0 * len(panels)) + 2.5, 4.5), layout="constrained")
    axes = fig.subplots(1, max(1, len(panels)), sharey=True, squeeze=False)[0]
    for ax, (value, rows) in zip(axes, panels):
        if trials.attrs.get("pbt"):  # one line per member, its rows as logged
            _member_lines(ax, rows, line_keys, x, metric, line_colors)
        else:
            _mean_std_lines(ax, rows, line_keys, x, metric, line_colors)
        if panel_key:
            ax.set_title(f"{bare(panel_key)} = {format_value(value)}")
        ax.set_xlabel(axis_label(x))
        if x in ("epoch", "training_iteration"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    _title_and_legend(fig, axes[-1], metric, line_keys, line_values, best)
    if trials.attrs.get("pbt"):
        fig.suptitle(f"{metric} of each PBT member: every row it logged, broken where it took another's checkpoint")
    return fig


FADED = "#bbbbbb"
"""Colour of the configurations :func:`plot_learning_curves` does not highlight."""


def _line_colors(
    data: pd.DataFrame, trials, line_keys: list[str], x: str, objective: Objective, highlight: int | None
) -> tuple[list[tuple], dict, list[tuple]]:
    """(every configuration's key, its colour, the highlighted keys best first: [] when all are coloured)."""
    keys = data[line_keys].itertuples(index=False, name=None)
    line_values = sorted({_key(k) for k in keys}, key=sort_key) if line_keys else [()]
    sequential = len(line_keys) == 1 and pd.api.types.is_numeric_dtype(trials[line_keys[0]])
    if highlight is None or not line_keys or len(line_values) <= highlight:
        return line_values, dict(zip(line_values, colors(len(line_values), sequential))), []
    best = _best_lines(data, line_keys, x, objective)[:highlight]
    return line_values, dict.fromkeys(line_values, FADED) | dict(zip(best, colors(highlight))), best


def _title_and_legend(fig: Figure, ax, metric: str, line_keys: list[str], line_values: list, best: list) -> None:
    """The title, and the legend: every configuration's, or the highlighted ones best first (then one
    entry for the faded ones)."""
    faded = len(line_values) - len(best) if best else 0
    fig.suptitle(
        f"{metric} per configuration (mean ± 1 std over seeds)"
        + (f": the best {len(best)} of {len(line_values)} in colour" if best else "")
    )
    if not best:
        if len(line_values) > 1 or not line_keys:
            legend(ax, len(line_values))
        return
    handles, labels = ax.get_legend_handles_labels()
    rank = {named_label(line_keys, key): i for i, key in enumerate(best)}
    shown = sorted(zip(handles, labels), key=lambda pair: rank.get(pair[1].rsplit(" (n=", 1)[0], len(rank)))
    other = Line2D([], [], color=FADED, linewidth=0.8, label=f"the other {faded} configurations")
    ax.legend(handles=[h for h, _ in shown] + [other], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _best_lines(data: pd.DataFrame, line_keys: list[str], x: str, objective: Objective) -> list[tuple]:
    """The configurations (key tuples) ordered by the best value of their mean curve, best first."""
    metric, mode = objective.metric, objective.mode
    curves = data.groupby([*line_keys, x], dropna=False)[metric].mean()
    best = curves.groupby(level=list(range(len(line_keys))), dropna=False).agg("max" if mode == "max" else "min")
    ranked = best.sort_values(ascending=(mode == "min"), kind="stable").index
    return [_key(key if isinstance(key, tuple) else (key,)) for key in ranked]


def _key(values: tuple) -> tuple:
    """A configuration's key with NaN as None: NaN != NaN, so a key holding it would match no other."""
    return tuple(None if isinstance(v, float) and v != v else v for v in values)


def _x_column(history: pd.DataFrame, trials: pd.DataFrame, metric: str, x: str | None) -> str:
    """The x column (default ``epoch`` when reported, else ``training_iteration``), after checking
    that it and ``metric`` are in the history."""
    metric_column(trials, metric)  # clear error when no trial reported it
    if metric not in history.columns:
        raise ExperimentError(f"metric {metric!r} is not in the history; columns: {', '.join(history.columns)}")
    if x is None:
        x = "epoch" if "epoch" in history.columns and history["epoch"].notna().any() else "training_iteration"
    if x not in history.columns:
        raise ExperimentError(f"x column {x!r} is not in the history; columns: {', '.join(history.columns)}")
    return x


def _mean_std_lines(ax, rows: pd.DataFrame, line_keys: list[str], x: str, metric: str, line_colors: dict) -> None:
    """One line per configuration of ``rows``: the mean over seeds per ``x``, and a ± 1 std band where n ≥ 2."""
    groups = rows.groupby(line_keys, sort=False, dropna=False) if line_keys else [((), rows)]
    for key, group in sorted(groups, key=lambda g: sort_key(g[0] if isinstance(g[0], tuple) else (g[0],))):
        key = _key(key if isinstance(key, tuple) else (key,))
        curve = group.groupby(x)[metric].agg(["mean", "std", "count"]).sort_index()
        n_seeds = group["trial_id"].nunique()
        text = f"{named_label(line_keys, key)} (n={n_seeds})" if line_keys else f"n={n_seeds}"
        color = line_colors.get(key, "tab:blue")
        if color == FADED:  # not highlighted: under the others, unnamed, no band
            ax.plot(curve.index, curve["mean"], color=color, linewidth=0.8, marker=".", markersize=3, zorder=1)
            continue
        ax.plot(curve.index, curve["mean"], color=color, label=text, marker="o" if len(curve) == 1 else None)
        band = curve["count"] > 1
        if band.any():
            low, high = (curve["mean"] - curve["std"])[band], (curve["mean"] + curve["std"])[band]
            ax.fill_between(curve.index[band], low, high, color=color, alpha=0.2, linewidth=0)


def _member_lines(ax, rows: pd.DataFrame, line_keys: list[str], x: str, metric: str, line_colors: dict) -> None:
    """One line per PBT member (:mod:`analysis.reading.pbt_members`): every row it logged, in order, the
    line broken where the member went on from another checkpoint (``x`` goes back, or skips ahead
    of its usual step): no straight line joins two models."""
    for key, group in rows.groupby(line_keys, sort=False, dropna=False):
        key = _key(key if isinstance(key, tuple) else (key,))
        xs, ys = group[x].to_numpy(float), group[metric].to_numpy(float)
        steps = np.diff(xs)
        usual = np.median(steps[steps > 0]) if (steps > 0).any() else 1.0
        breaks = np.flatnonzero((steps <= 0) | (steps > usual)) + 1
        ax.plot(
            np.insert(xs, breaks, np.nan),
            np.insert(ys, breaks, np.nan),
            color=line_colors.get(key, "tab:blue"),
            label=str(group[MEMBER].iloc[0]) if MEMBER in group else named_label(line_keys, key),
            marker="o" if len(xs) == 1 else None,
        )


def plot_metric_vs_noise_rate(
    trials: pd.DataFrame,
    objective: Objective,
    *,
    x: str = "noise_rate",
    panel: str = "noise_type",
    scope: str = "last",
    seed: str = SEED_KEY,
) -> Figure:
    """``objective.metric`` against noise rate: one panel per noise type, mean over seeds with 95 % CIs.

    Inside a panel there is one line per combination of the other config keys that vary
    (loss, model, ...), so every panel compares like with like. Errored and diverged trials are
    left out of the means (see :func:`analysis.best_runs`).

    Args:
        trials: :func:`analysis.load_trials` table.
        objective: a reported metric and its mode (which only picks the best seeds).
        x: config key on the x axis.
        panel: config key with one panel per value; ignored when the trials lack it.
        scope: ``"last"`` or ``"best"`` value of each trial, or ``"select"`` (the value under
            a selection rule, :func:`analysis.add_selected`; the axis label states the rule).
        seed: config key of the seed axis.

    Returns:
        Figure with one Axes per panel value (shared y axis); each line is an errorbar
        container (``ax.containers``) with one point per ``x`` value.

    Raises:
        ExperimentError: the metric was not reported, or ``x`` is not a config key.
    """
    metric = objective.metric
    metric_column(trials, metric, scope)
    x_column = config_column(trials, x)
    panel_column = config_column(trials, panel) if _has_config(trials, panel) else None
    hue = [c for c in varying_config_columns(trials, seed) if c not in (x_column, panel_column)]
    by = [c for c in (panel_column, *hue, x_column) if c]
    table = best_runs(trials, objective, by=by, scope=scope, seed=seed)
    x_name, hue_names = bare(x_column), [bare(c) for c in hue]
    panel_name = bare(panel_column) if panel_column else None
    panel_values = sorted(table[panel_name].dropna().unique()) if panel_column else [None]
    fig = Figure(figsize=(max(5.0, 4.5 * len(panel_values)), 4.5), layout="constrained")
    axes = fig.subplots(1, len(panel_values), sharey=True, squeeze=False)[0]
    lines = list(table.groupby(hue_names, sort=True, dropna=False)) if hue_names else [((), table)]
    for ax, value in zip(axes, panel_values):
        panel_rows = table if value is None else table[table[panel_name] == value]
        _ci_lines(ax, lines, panel_rows.index, x_name, hue_names)
        ax.set_title(f"{panel_name} = {value}" if value is not None else "all trials")
        ax.set_xlabel(axis_label(x_name))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(scope_text(trials, metric, scope, "; mean ± 95% CI over seeds"))
    fig.suptitle(f"{metric} vs {x_name.replace('_', ' ')}")
    if hue_names:
        legend(axes[-1], len(lines))
    return fig


def _ci_lines(ax, lines: list, in_panel: pd.Index, x_name: str, hue_names: list[str]) -> None:
    """One errorbar line (mean ± 95 % CI) per ``lines`` group, over the rows of one panel."""
    for color, (key, rows) in zip(colors(len(lines)), lines):
        key = key if isinstance(key, tuple) else (key,)
        rows = rows[rows.index.isin(in_panel) & (rows["n"] > 0)].sort_values(x_name)
        if rows.empty:
            continue
        ax.errorbar(
            rows[x_name],
            rows["mean"],
            yerr=rows["ci95"].fillna(0),
            color=color,
            marker="o",
            capsize=3,
            label=named_label(hue_names, key) if hue_names else None,
        )


def plot_paper_curves(table: pd.DataFrame) -> Figure:
    """The paper table as curves: metric vs noise rate, one line per method with a 95 % CI band
    over seeds (Student t), one panel per noise type.

    Args:
        table: :func:`analysis.paper_table` output with a ``noise_rate`` column.

    Returns:
        Figure with one Axes per noise type (shared y); each has one line per method (label =
        the method's row label, or the metric when there is one method) and one band per line
        where some cell has n ≥ 2. The title states the selection rule. Accuracies in %.

    Raises:
        ExperimentError: the table has no ``noise_rate`` column.
    """
    a = table.attrs
    if "noise_rate" not in a["columns"]:
        raise ExperimentError("the paper table has no noise_rate column: nothing to plot against noise rate")
    scale = percent_scale(a["percent"])
    types = sorted(table["noise_type"].unique(), key=str) if "noise_type" in a["columns"] else [None]
    methods = list(dict.fromkeys(table["_label"]))
    method_colors = dict(zip(methods, colors(len(methods))))
    fig = Figure(figsize=(max(5.0, 4.5 * len(types)) + 1.5, 4.5), layout="constrained")
    axes = fig.subplots(1, len(types), sharey=True, squeeze=False)[0]
    for ax, noise_type in zip(axes, types):
        rows = table if noise_type is None else table[table["noise_type"] == noise_type]
        for method in methods:
            line = rows[(rows["_label"] == method) & (rows["n"] > 0)].sort_values("noise_rate")
            if line.empty:
                continue
            mean = line["mean"].to_numpy(float) * scale
            half = line["ci95"].to_numpy(float) * scale
            ax.plot(line["noise_rate"], mean, marker="o", color=method_colors[method], label=method or a["metric"])
            if np.isfinite(half).any():
                ax.fill_between(line["noise_rate"], mean - half, mean + half, color=method_colors[method], alpha=0.2)
        ax.set_title(f"noise_type = {noise_type}" if noise_type is not None else "all trials")
        ax.set_xlabel(axis_label("noise_rate"))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{a['metric']}{' (%)' if a['percent'] else ''}, mean ± 95% CI over seeds")
    fig.suptitle(f"{a['rule']} vs noise rate")
    legend(axes[-1], len(methods))
    return fig


def _group_keys(trials: pd.DataFrame, by: Sequence[str] | None, seed: str) -> list[str]:
    if by is None:
        return varying_config_columns(trials, seed)
    return [c if c in trials.columns else config_column(trials, c) for c in by]


def _has_config(trials: pd.DataFrame, name: str) -> bool:
    return name in trials.columns or f"config/{name}" in trials.columns
