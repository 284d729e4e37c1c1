"""Summary plots of a sweep (heatmap, confusion matrix, timeline) and :func:`save_figure`.
Each function returns a new matplotlib ``Figure`` and touches no global state (no ``pyplot``);
curves over seeds are :mod:`analysis.figures.curves`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.figures.packing import sweep_efficiency, timeline
from analysis.figures.plot_style import axis_label, scope_text
from analysis.progress import format_duration
from analysis.reading.load import config_column, metric_column
from analysis.tables.best_runs import failed
from analysis.tables.formatting import bare, format_value

STATUS_COLORS = {
    "TERMINATED": "tab:green",
    "DIVERGED": "tab:orange",
    "ERROR": "tab:red",
    "RUNNING": "tab:blue",
    "PAUSED": "tab:olive",
    "PENDING": "tab:gray",
}
"""Bar colour of each trial status in :func:`plot_timeline` (diverged trials: DIVERGED)."""


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
    ax.set_xticks(range(len(x_values)), [format_value(v) for v in x_values])
    ax.set_yticks(range(len(y_values)), [format_value(v) for v in y_values])
    ax.set_xlabel(axis_label(bare(x_column)))
    ax.set_ylabel(axis_label(bare(y_column)))
    finite = grid.to_numpy(dtype=float)
    middle = np.nanmean(finite) if np.isfinite(finite).any() else 0.0
    for (r, c), value in np.ndenumerate(finite):
        if np.isfinite(value):
            ax.text(
                c, r, f"{value:.3g}", ha="center", va="center", fontsize=8, color="black" if value > middle else "white"
            )
    fig.colorbar(image, ax=ax, label=scope_text(trials, metric, scope, ", mean"))
    most = int(counts.max()) if len(counts) else 0
    ax.set_title(f"{metric}: mean over seeds and other settings (≤ {most} runs per cell)")
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
    from analysis.figures.confusion import per_class_accuracy

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
    fig.suptitle(textwrap.fill(title or "clean-test confusion matrix", 12 * int(fig.get_figwidth())))  # never cut
    return fig


def plot_timeline(trials: pd.DataFrame, *, slots: int | None = None, runs: list[float] | None = None) -> Figure:
    """Gantt chart of the sweep: one row per GPU (or CPU slot), one bar per trial and slot.

    Bars are coloured by status (:data:`STATUS_COLORS`; diverged trials orange) and carry the
    trial's name where it fits inside the bar (:func:`_label_bars`). The title gives the sweep
    efficiency, busy slot-time / (slots × makespan), from
    :func:`analysis.sweep_efficiency`. Rows and packing are those of :func:`analysis.timeline`:
    with `runs`, the gaps between the sweep's runs are cut out, each shown as a dashed line
    labelled with the time left out.

    Args:
        trials: :func:`analysis.load_trials` table.
        slots: slots available, passed to :func:`analysis.sweep_efficiency`.
        runs: Unix seconds each run of the sweep started (None: one run).

    Returns:
        Figure with one Axes holding one ``Rectangle`` per (trial, slot) in ``ax.patches`` and
        one text per bar wide enough for its trial's name in ``ax.texts``; y tick labels are the
        slot names. A figure saying "no timed trials" when no trial has
        start and end times.
    """
    rows = timeline(trials, runs)
    slot_names = list(dict.fromkeys(rows["slot"]))
    fig = Figure(figsize=(10, max(2.5, 0.35 * len(slot_names) + 1.5)), layout="constrained")
    ax = fig.add_subplot()
    if rows.empty:
        ax.text(0.5, 0.5, "no timed trials", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("Trial timeline")
        return fig
    span = rows["end_s"].max()
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 180 else ("s", 1.0)
    y = rows["slot"].map({name: i for i, name in enumerate(slot_names)})
    present = _status_bars(ax, rows, y, scale)
    ax.set_yticks(range(len(slot_names)), slot_names)
    ax.invert_yaxis()
    ax.set_xlabel(f"time since first trial start ({unit})")
    ax.set_ylabel("GPU" if all(s.split(" ")[-2] == "GPU" for s in slot_names) else "slot")
    efficiency = sweep_efficiency(trials, slots, runs)
    for where, gap in rows.attrs.get("gaps", []):
        ax.axvline(where / scale, color="0.3", linestyle="--", linewidth=1)
        ax.text(where / scale, -0.5, f" {format_duration(gap)} left out", fontsize=7, va="bottom", color="0.3")
    cut = f", {len(rows.attrs['gaps']) + 1} runs, gaps left out" if rows.attrs.get("gaps") else ""
    ax.set_title(
        f"Trial timeline: {rows['trial_id'].nunique()} trials, sweep efficiency "
        f"{efficiency:.0%} (busy slot-time / (slots × makespan){cut})"
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


def _status_bars(ax, rows: pd.DataFrame, y: pd.Series, scale: float) -> list[Patch]:
    """One horizontal bar per timeline row, coloured by status (:data:`STATUS_COLORS`); returns
    the legend handles of the statuses present."""
    state = np.where(rows["diverged"], "DIVERGED", rows["status"].fillna("PENDING"))
    present = []
    for status, color in STATUS_COLORS.items():
        mask = state == status
        if mask.any():
            present.append(Patch(color=color, label=status.lower()))
            width, left = (rows["end_s"] - rows["start_s"])[mask] / scale, rows["start_s"][mask] / scale
            ax.barh(y[mask], width, left=left, height=0.8, color=color, edgecolor="white", linewidth=0.5)
    return present


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
    """Save ``fig`` as ``<path>.<format>`` for each format (e.g. ``("png", "svg")``); return the paths.
    A figure without a layout engine (Optuna's pictures) is cropped to what it draws (``bbox_inches="tight"``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    bbox = "tight" if fig.get_layout_engine() is None else None
    out = []
    for fmt in formats:
        target = path.with_name(f"{path.name}.{fmt}")
        fig.savefig(target, dpi=dpi, format=fmt, bbox_inches=bbox)
        out.append(target)
    return out
