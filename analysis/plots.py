"""Comparison plots. Each function returns a new matplotlib ``Figure`` and touches no global
state (no ``pyplot``); save it with :func:`save_figure`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from analysis.load import (
    SEED_KEY,
    ExperimentError,
    config_column,
    guess_mode,
    metric_column,
    varying_config_columns,
)
from analysis.packing import sweep_efficiency, timeline
from analysis.tables import best_runs, failed

STATUS_COLORS = {
    "TERMINATED": "tab:green",
    "DIVERGED": "tab:orange",
    "ERROR": "tab:red",
    "RUNNING": "tab:blue",
    "PAUSED": "tab:olive",
    "PENDING": "tab:gray",
}
"""Bar colour of each trial status in :func:`plot_timeline` (diverged trials: DIVERGED)."""


def plot_learning_curves(
    history: pd.DataFrame,
    trials: pd.DataFrame,
    metric: str,
    *,
    by: Sequence[str] | None = None,
    x: str | None = None,
    panel: str | None = "noise_type",
    seed: str = SEED_KEY,
) -> Figure:
    """``metric`` against training progress, one line per configuration: mean ± 1 std over seeds.

    Errored and diverged trials are left out (the legend gives the number of seeds per line).
    When ``panel`` is one of the configuration keys there is one panel per value of it (e.g.
    sym | asym); when a single numeric key is left (e.g. noise rate), lines are coloured along
    a sequential colour map in its order.

    Args:
        history: :func:`analysis.load_history` of the experiment.
        trials: :func:`analysis.load_trials` of the same experiment (for configs and status).
        metric: a reported metric, e.g. ``"val/acc"``.
        by: config keys that define a configuration; default every varying key except the seed.
        x: history column for the x axis; default ``epoch`` when reported, else
            ``training_iteration``.
        panel: config key to split panels by, or None for one panel.
        seed: config key of the seed axis.

    Returns:
        Figure with one Axes per panel; in each, one line (and a shaded ± std band where
        n ≥ 2) per configuration.

    Raises:
        ExperimentError: ``metric`` (or ``x``) is not a column of ``history``; the message lists
            the metrics that exist.
    """
    metric_column(trials, metric)  # clear error when no trial reported it
    if metric not in history.columns:
        raise ExperimentError(f"metric {metric!r} is not in the history; columns: {', '.join(history.columns)}")
    if x is None:
        x = "epoch" if "epoch" in history.columns and history["epoch"].notna().any() else "training_iteration"
    if x not in history.columns:
        raise ExperimentError(f"x column {x!r} is not in the history; columns: {', '.join(history.columns)}")
    keys = _group_keys(trials, by, seed)
    panel_key = next((k for k in keys if panel and k in (panel, f"config/{panel}")), None)
    line_keys = [k for k in keys if k != panel_key]

    ok = trials.loc[~failed(trials), ["trial_id", *keys]]
    data = history[["trial_id", x, metric]].merge(ok, on="trial_id")
    data = data[np.isfinite(pd.to_numeric(data[metric], errors="coerce"))]
    panels = list(data.groupby(panel_key, sort=True)) if panel_key else [(None, data)]
    line_values = (
        sorted({tuple(v) for v in data[line_keys].itertuples(index=False)}, key=_sort_key) if line_keys else [()]
    )
    sequential = len(line_keys) == 1 and pd.api.types.is_numeric_dtype(trials[line_keys[0]])
    colors = dict(zip(line_values, _colors(len(line_values), sequential)))

    fig = Figure(figsize=(max(6.0, 5.0 * len(panels)) + 2.5, 4.5), layout="constrained")
    axes = fig.subplots(1, max(1, len(panels)), sharey=True, squeeze=False)[0]
    for ax, (value, rows) in zip(axes, panels):
        groups = rows.groupby(line_keys, sort=False, dropna=False) if line_keys else [((), rows)]
        for key, group in sorted(groups, key=lambda g: _sort_key(g[0] if isinstance(g[0], tuple) else (g[0],))):
            key = key if isinstance(key, tuple) else (key,)
            curve = group.groupby(x)[metric].agg(["mean", "std", "count"]).sort_index()
            n_seeds = group["trial_id"].nunique()
            label = f"{_label(line_keys, key)} (n={n_seeds})" if line_keys else f"n={n_seeds}"
            color = colors.get(key, "tab:blue")
            ax.plot(curve.index, curve["mean"], color=color, label=label)
            band = curve["count"] > 1
            if band.any():
                ax.fill_between(
                    curve.index[band],
                    (curve["mean"] - curve["std"])[band],
                    (curve["mean"] + curve["std"])[band],
                    color=color,
                    alpha=0.2,
                    linewidth=0,
                )
        if panel_key:
            ax.set_title(f"{_bare(panel_key)} = {_fmt(value)}")
        ax.set_xlabel(_axis_label(x))
        if x in ("epoch", "training_iteration"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    fig.suptitle(f"{metric} per configuration (mean ± 1 std over seeds)")
    if len(line_values) > 1 or not line_keys:
        _legend(axes[-1], len(line_values))
    return fig


def plot_metric_vs_noise_rate(
    trials: pd.DataFrame,
    metric: str,
    mode: str | None = None,
    *,
    x: str = "noise_rate",
    panel: str = "noise_type",
    scope: str = "last",
    seed: str = SEED_KEY,
) -> Figure:
    """``metric`` against noise rate: one panel per noise type, mean over seeds with 95 % CIs.

    Inside a panel there is one line per combination of the other config keys that vary
    (loss, model, ...), so every panel compares like with like. Errored and diverged trials are
    left out of the means (see :func:`analysis.best_runs`).

    Args:
        trials: :func:`analysis.load_trials` table.
        metric: a reported metric.
        mode: ``"max"``/``"min"``, only used to pick best seeds; default :func:`guess_mode`.
        x: config key on the x axis.
        panel: config key with one panel per value; ignored when the trials lack it.
        scope: ``"last"`` or ``"best"`` value of each trial, or ``"select"`` (the value under
            a selection rule, :func:`analysis.add_selected`; the axis label states the rule).
        seed: config key of the seed axis.

    Returns:
        Figure with one Axes per panel value (shared y axis); each line is an errorbar
        container (``ax.containers``) with one point per ``x`` value.

    Raises:
        ExperimentError: ``metric`` was not reported, or ``x`` is not a config key.
    """
    metric_column(trials, metric, scope)
    x_column = config_column(trials, x)
    panel_column = config_column(trials, panel) if _has_config(trials, panel) else None
    hue = [c for c in varying_config_columns(trials, seed) if c not in (x_column, panel_column)]
    table = best_runs(
        trials,
        metric,
        mode or guess_mode(metric),
        by=[c for c in (panel_column, *hue, x_column) if c],
        scope=scope,
        seed=seed,
    )
    bare = {c: c[len("config/") :] if c.startswith("config/") else c for c in trials.columns}
    x_name, hue_names = bare[x_column], [bare[c] for c in hue]
    panel_values = sorted(table[bare[panel_column]].dropna().unique()) if panel_column else [None]

    fig = Figure(figsize=(max(5.0, 4.5 * len(panel_values)), 4.5), layout="constrained")
    axes = fig.subplots(1, len(panel_values), sharey=True, squeeze=False)[0]
    lines = list(table.groupby(hue_names, sort=True, dropna=False)) if hue_names else [((), table)]
    colors = _colors(len(lines))
    for ax, value in zip(axes, panel_values):
        for color, (key, rows) in zip(colors, lines):
            key = key if isinstance(key, tuple) else (key,)
            if value is not None:
                rows = rows[rows[bare[panel_column]] == value]
            rows = rows[rows["n"] > 0].sort_values(x_name)
            if rows.empty:
                continue
            ax.errorbar(
                rows[x_name],
                rows["mean"],
                yerr=rows["ci95"].fillna(0),
                color=color,
                marker="o",
                capsize=3,
                label=_label(hue_names, key) if hue_names else None,
            )
        ax.set_title(f"{bare[panel_column]} = {value}" if value is not None else "all trials")
        ax.set_xlabel(_axis_label(x_name))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(_scope_text(trials, metric, scope, "; mean ± 95% CI over seeds"))
    fig.suptitle(f"{metric} vs {x_name.replace('_', ' ')}")
    if hue_names:
        _legend(axes[-1], len(lines))
    return fig


def plot_heatmap(
    trials: pd.DataFrame,
    metric: str,
    x: str,
    y: str,
    *,
    scope: str = "last",
) -> Figure:
    """Mean of ``metric`` over two config axes, as an annotated heatmap.

    Each cell averages all usable trials with that (x, y) — over seeds and over any other
    config key that varies (the title says how many runs a cell holds at most). Errored and
    diverged trials are left out; cells without runs are blank.

    Args:
        trials: :func:`analysis.load_trials` table.
        metric: a reported metric.
        x, y: config keys for columns and rows.
        scope: ``"last"`` or ``"best"`` value of each trial.

    Returns:
        Figure with the heatmap Axes (an ``AxesImage`` of shape (len(y values), len(x values)),
        ticks labelled with the values) and a colour bar labelled with ``metric``.

    Raises:
        ExperimentError: ``metric`` was not reported, or ``x``/``y`` is not a config key.
    """
    value_column = metric_column(trials, metric, scope)
    x_column, y_column = config_column(trials, x), config_column(trials, y)
    ok = trials[~failed(trials)]
    values = pd.to_numeric(ok[value_column], errors="coerce").where(lambda v: np.isfinite(v))
    frame = pd.DataFrame({"x": ok[x_column], "y": ok[y_column], "v": values})
    grid = frame.pivot_table(index="y", columns="x", values="v", aggfunc="mean", dropna=False)
    counts = frame.dropna(subset=["v"]).groupby(["y", "x"]).size()
    x_values = sorted(trials[x_column].dropna().unique())
    y_values = sorted(trials[y_column].dropna().unique())
    grid = grid.reindex(index=y_values, columns=x_values)

    fig = Figure(figsize=(1.1 * len(x_values) + 3, 0.6 * len(y_values) + 2.5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(x_values)), [_fmt(v) for v in x_values])
    ax.set_yticks(range(len(y_values)), [_fmt(v) for v in y_values])
    ax.set_xlabel(_axis_label(x_column[len("config/") :] if x_column.startswith("config/") else x_column))
    ax.set_ylabel(_axis_label(y_column[len("config/") :] if y_column.startswith("config/") else y_column))
    finite = grid.to_numpy(dtype=float)
    middle = np.nanmean(finite) if np.isfinite(finite).any() else 0.0
    for (r, c), value in np.ndenumerate(finite):
        if np.isfinite(value):
            ax.text(
                c, r, f"{value:.3g}", ha="center", va="center", fontsize=8, color="black" if value > middle else "white"
            )
    fig.colorbar(image, ax=ax, label=_scope_text(trials, metric, scope, ", mean"))
    most = int(counts.max()) if len(counts) else 0
    ax.set_title(f"{metric}: mean over seeds and other settings (≤ {most} runs per cell)")
    return fig


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
    scale = 100.0 if a["percent"] else 1.0
    types = sorted(table["noise_type"].unique(), key=str) if "noise_type" in a["columns"] else [None]
    methods = list(dict.fromkeys(table["_label"]))
    colors = dict(zip(methods, _colors(len(methods))))
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
            ax.plot(line["noise_rate"], mean, marker="o", color=colors[method], label=method or a["metric"])
            if np.isfinite(half).any():
                ax.fill_between(
                    line["noise_rate"], mean - half, mean + half, color=colors[method], alpha=0.2, linewidth=0
                )
        ax.set_title(f"noise_type = {noise_type}" if noise_type is not None else "all trials")
        ax.set_xlabel(_axis_label("noise_rate"))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{a['metric']}{' (%)' if a['percent'] else ''}, mean ± 95% CI over seeds")
    fig.suptitle(f"{a['rule']} vs noise rate")
    _legend(axes[-1], len(methods))
    return fig


def plot_confusion(matrix: np.ndarray, title: str = "", *, class_names: Sequence[str] | None = None) -> Figure:
    """Row-normalised confusion matrix with the per-class accuracy beside it.

    Args:
        matrix: (C, C) counts, rows true classes, columns predicted (:func:`analysis.load_confusion`).
        title: figure title (say which configuration, seeds and selection rule).
        class_names: C tick labels; default 0..C-1.

    Returns:
        Figure with two Axes: the matrix image (each row sums to 1; off-diagonal cells ≥ 0.1
        annotated, so pair flips such as 2->7 stand out) and a horizontal bar per class of
        its accuracy (``diag / row sum``).
    """
    from analysis.confusion import per_class_accuracy

    counts = np.asarray(matrix, dtype=float)
    c = counts.shape[0]
    names = list(class_names) if class_names is not None else [str(i) for i in range(c)]
    totals = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    accuracy = per_class_accuracy(counts)
    fig = Figure(figsize=(0.45 * c + 6, 0.4 * c + 2.5), layout="constrained")
    ax, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(c), names)
    ax.set_yticks(range(c), names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    for (r, col), value in np.ndenumerate(share):
        if r != col and value >= 0.1:
            ax.text(col, r, f"{value:.2f}", ha="center", va="center", fontsize=7, color="tab:red")
    fig.colorbar(image, ax=ax, label="fraction of the true class")
    bars.barh(range(c), accuracy, color="tab:blue")
    bars.set_yticks(range(c), names)
    bars.invert_yaxis()
    bars.set_xlim(0, 1)
    bars.set_xlabel("per-class accuracy")
    bars.grid(axis="x", alpha=0.3)
    fig.suptitle(title or "clean-test confusion matrix")
    return fig


def plot_timeline(trials: pd.DataFrame, *, slots: int | None = None) -> Figure:
    """Gantt chart of the sweep: one row per GPU (or CPU slot), one bar per trial and slot.

    Bars are coloured by status (:data:`STATUS_COLORS`; diverged trials orange) and carry the
    trial's name where it fits inside the bar (:func:`_label_bars`). The title gives the sweep efficiency,
    busy slot-time / (slots × makespan), from :func:`analysis.sweep_efficiency`. Rows and packing are
    those of :func:`analysis.timeline`.

    Args:
        trials: :func:`analysis.load_trials` table.
        slots: slots available, passed to :func:`analysis.sweep_efficiency`.

    Returns:
        Figure with one Axes holding one ``Rectangle`` per (trial, slot) in ``ax.patches`` and
        one text per bar wide enough for its trial's name in ``ax.texts``; y tick labels are the slot
        names. A figure saying "no timed trials" when no trial has start and end times.
    """
    rows = timeline(trials)
    slot_names = list(dict.fromkeys(rows["slot"]))
    fig = Figure(figsize=(10, max(2.5, 0.35 * len(slot_names) + 1.5)), layout="constrained")
    ax = fig.add_subplot()
    if rows.empty:
        ax.text(0.5, 0.5, "no timed trials", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("Trial timeline")
        return fig
    span = rows["end_s"].max()
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 180 else ("s", 1.0)
    state = np.where(rows["diverged"], "DIVERGED", rows["status"].fillna("PENDING"))
    y = rows["slot"].map({name: i for i, name in enumerate(slot_names)})
    present = []
    for status, color in STATUS_COLORS.items():
        mask = state == status
        if mask.any():
            present.append(Patch(color=color, label=status.lower()))
            ax.barh(
                y[mask],
                (rows["end_s"] - rows["start_s"])[mask] / scale,
                left=rows["start_s"][mask] / scale,
                height=0.8,
                color=color,
                edgecolor="white",
                linewidth=0.5,
            )
    ax.set_yticks(range(len(slot_names)), slot_names)
    ax.invert_yaxis()
    ax.set_xlabel(f"time since first trial start ({unit})")
    ax.set_ylabel("GPU" if all(s.split(" ")[-2] == "GPU" for s in slot_names) else "slot")
    efficiency = sweep_efficiency(trials, slots)
    ax.set_title(
        f"Trial timeline: {rows['trial_id'].nunique()} trials, sweep efficiency "
        f"{efficiency:.0%} (busy slot-time / (slots × makespan))"
    )
    ax.legend(handles=present, loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    _label_bars(
        fig,
        ax,
        rows["trial_name"].fillna(rows["trial_id"]).astype(str),
        rows["start_s"] / scale,
        rows["end_s"] / scale,
        y,
    )
    return fig


def _label_bars(
    fig: Figure,
    ax,
    names: pd.Series,
    left: pd.Series,
    right: pd.Series,
    y: pd.Series,
    fontsize: float = 7.0,
    padding_px: float = 4.0,
) -> None:
    """Write each name centred on its bar, and keep only the names narrower than their bar.

    Widths are measured in display pixels after the figure's layout is done
    (``Figure.draw_without_rendering``), so whether a name fits holds for the saved figure.
    """
    texts = [
        ax.text((a + b) / 2, row, name, ha="center", va="center", fontsize=fontsize, color="white", clip_on=True)
        for name, a, b, row in zip(names, left, right, y)
    ]
    fig.draw_without_rendering()
    for text, a, b in zip(texts, left, right):
        (x0, _), (x1, _) = ax.transData.transform([(a, 0), (b, 0)])
        if text.get_window_extent().width + padding_px > abs(x1 - x0):
            text.remove()


def save_figure(fig: Figure, path: str | Path, formats: Sequence[str] = ("png",), dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``<path>.<format>`` for each format (e.g. ``("png", "svg")``); return the paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in formats:
        target = path.with_name(f"{path.name}.{fmt}")
        fig.savefig(target, dpi=dpi, format=fmt)
        out.append(target)
    return out


def _scope_text(trials: pd.DataFrame, metric: str, scope: str, what: str) -> str:
    """``"val/acc (last<what>)"``; for ``scope="select"`` the selection rule in words instead."""
    if scope == "select":
        return f"{trials.attrs.get('select_text', {}).get(metric, metric + ' (selected)')}{what}"
    return f"{metric} ({scope}{what})"


def _group_keys(trials: pd.DataFrame, by: Sequence[str] | None, seed: str) -> list[str]:
    if by is None:
        return varying_config_columns(trials, seed)
    return [c if c in trials.columns else config_column(trials, c) for c in by]


def _has_config(trials: pd.DataFrame, name: str) -> bool:
    return name in trials.columns or f"config/{name}" in trials.columns


def _label(keys: Sequence[str], values: Sequence) -> str:
    names = [k[len("config/") :] if k.startswith("config/") else k for k in keys]
    return ", ".join(f"{n}={_fmt(v)}" for n, v in zip(names, values))


def _bare(column: str) -> str:
    return column[len("config/") :] if column.startswith("config/") else column


def _sort_key(values: tuple) -> tuple:
    """Sorts tuples of mixed types (numbers before strings, None last) without TypeError."""
    return tuple((v is None or v != v, isinstance(v, str), v if not isinstance(v, str) else 0, str(v)) for v in values)


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


_AXIS_LABELS = {
    "noise_rate": "noise rate (fraction of labels corrupted)",
    "epoch": "epoch",
    "training_iteration": "training iteration (reports)",
    "time_total_s": "training time (s)",
    "lr": "learning rate",
}


def _axis_label(name: str) -> str:
    return _AXIS_LABELS.get(name, name.replace("_", " "))


def _colors(n: int, sequential: bool = False) -> list:
    from matplotlib import colormaps

    if sequential:  # ordered values (e.g. noise rates): dark to light along viridis
        return [colormaps["viridis"](0.85 * i / max(1, n - 1)) for i in range(n)]
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]


def _legend(ax, n: int) -> None:
    if n > 8:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1 + n // 25)
    else:
        ax.legend(fontsize=8)
