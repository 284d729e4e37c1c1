"""The schedule of a population-based training run (Jaderberg et al. 2017): each member's
hyperparameters over its training iterations, with PBT's exploit/explore steps marked.

Optuna has no picture of this (a trial's parameters never change there), and Tune writes only its log
(``pbt_global.txt``, read by :mod:`analysis.reading.search_record`). Returns a new ``Figure``; no pyplot.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.figures.plot_style import axis_label, colors
from analysis.reading.search_record import SearchRecord
from analysis.tables.formatting import format_number

ANNOTATED_STEPS = 12
"""At most this many exploit steps are labelled with the member they copied (more would overlap)."""


def plot_pbt_schedule(
    trials: pd.DataFrame, record: SearchRecord, metric: str | None = None, params: list[str] | None = None
) -> Figure:
    """Each member's hyperparameters against training iteration, one panel per hyperparameter.

    A member's line starts at the values it was sampled with (``record.sampled``, Tune's
    ``evaluated_params``; else its config) and steps to the values of each exploit/explore step
    (``record.exploits``: it took a better member's checkpoint, then perturbed its values) at the
    iteration it was replaced, up to its last iteration. A log axis where all values are > 0 and
    span a factor of 10 or more.

    Args:
        trials: :func:`analysis.load_trials` table of the run (``trial_id``, ``trial_name``,
            ``iterations``, ``config/<param>``; ``best/<metric>`` for the legend).
        record: its :class:`analysis.reading.search_record.SearchRecord`.
        metric: shown with each member's name in the legend (its best value), when reported.
        params: the hyperparameters; default ``record.params``.
    Returns:
        Figure with one Axes per parameter (title: the parameter), in each one step line per member
        (``ax.lines``, labelled with the member's name, ``drawstyle="steps-post"``) and, when there
        were exploit steps, one marker per step (``ax.collections[0]``, at the iteration and new value).
    Raises:
        ValueError: no parameter to draw.
    """
    params = list(params or record.params)
    if not params:
        raise ValueError("the run records no hyperparameters that PBT changed")
    names = dict(zip(trials["trial_id"], trials["trial_name"]))
    member_colors = dict(zip(trials["trial_id"], colors(len(trials))))
    fig = Figure(figsize=(5.0 * len(params) + 2.5, 4.5), layout="constrained")
    axes = fig.subplots(1, len(params), squeeze=False)[0]
    for ax, param in zip(axes, params):
        for _, trial in trials.iterrows():
            xs, ys = _schedule(trial, record, param)
            ax.plot(xs, ys, drawstyle="steps-post", color=member_colors[trial["trial_id"]], label=_label(trial, metric))
        steps = _mark_steps(ax, record, param, member_colors)
        values = [y for line in ax.lines for y in line.get_ydata() if np.isfinite(y)]
        if values and min(values) > 0 and max(values) / min(values) >= 10:
            ax.set_yscale("log")
        if len(steps) <= ANNOTATED_STEPS:
            _label_steps(ax, steps, param, names)
        ax.set_title(param)
        ax.set_xlabel(axis_label("training_iteration"))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(axis_label(param))
        ax.grid(alpha=0.3)
    handles = list(axes[-1].get_legend_handles_labels()[0])
    if record.exploits:
        handles.append(
            Line2D([], [], marker="D", color="gray", markeredgecolor="black", linestyle="", label="exploit step")
        )
    axes[-1].legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    steps = len(record.exploits)
    fig.suptitle(
        f"PBT schedule: {len(trials)} members, "
        + (
            f"{steps} exploit/explore step(s) (◆: took the checkpoint of the member named, then perturbed its values)"
            if steps
            else "no exploit/explore step happened"
        )
    )
    return fig


def _schedule(trial: pd.Series, record: SearchRecord, param: str) -> tuple[list[float], list[float]]:
    """x (iterations) and y (values) of one member's step line."""
    start = (record.sampled.get(trial["trial_id"]) or {}).get(param, trial.get(f"config/{param}", np.nan))
    xs, ys = [0.0], [_number(start)]
    for step in record.exploits:
        if step.trial_id == trial["trial_id"] and param in step.config:
            xs.append(float(step.iteration))
            ys.append(_number(step.config[param]))
    end = max(float(trial.get("iterations") or 0), xs[-1])
    return [*xs, end], [*ys, ys[-1]]


def _mark_steps(ax, record: SearchRecord, param: str, member_colors: dict) -> list:
    """One diamond per exploit step at (iteration, new value); returns those steps."""
    steps = [s for s in record.exploits if param in s.config and s.trial_id in member_colors]
    if steps:
        xs = [float(s.iteration) for s in steps]
        ys = [_number(s.config[param]) for s in steps]
        ax.scatter(xs, ys, marker="D", s=36, c=[member_colors[s.trial_id] for s in steps], edgecolors="black", zorder=3)
    return steps


def _label_steps(ax, steps: list, param: str, names: dict, height_pt: float = 9.0, width_pt: float = 62.0) -> None:
    """Label each step with the member it copied (``← pbt_00002``), each label moved down until it
    overlaps none placed before it (labels ``height_pt`` × ``width_pt`` points; steps at one point or close
    to each other would pile their labels up)."""
    ax.figure.draw_without_rendering()  # the layout and limits, so that positions in points are final
    to_points = 72.0 / ax.figure.dpi
    placed: list[tuple[float, float]] = []  # (x, y) in points of each label's lower left corner
    order = sorted(steps, key=lambda s: (s.iteration, -_number(s.config[param])))
    for step in order:
        x, y = ax.transData.transform((float(step.iteration), _number(step.config[param]))) * to_points
        dy = 4.0
        while any(abs(x + 4 - px) < width_pt and abs(y + dy - py) < height_pt for px, py in placed):
            dy -= height_pt
        placed.append((x + 4, y + dy))
        ax.annotate(
            f"← {names.get(step.source_id, step.source_id)}",
            (float(step.iteration), _number(step.config[param])),
            xytext=(4, dy),
            textcoords="offset points",
            fontsize=7,
            arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.5} if dy != 4.0 else None,
        )


def _label(trial: pd.Series, metric: str | None) -> str:
    """``pbt_00003 (best val/acc 0.9444)``: the member's best logged value, as its tables rank it."""
    value = trial.get(f"best/{metric}") if metric else None
    return str(trial["trial_name"]) + (
        f" (best {metric} {format_number(value)})" if value is not None and value == value else ""
    )


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan
