"""Which pictures a write-up draws in its report folder, and which it leaves out and why (``analysis/writeup.py``).

A picture appears only where it means something: against noise rate with two noise rates or more,
the heatmap over a grid's axes (a few values each), never over a search's sampled parameters. One
that cannot be drawn (its function raised: one trial, one value) is left out with one line saying
why, on the console and in report.md; one left out by design only in report.md. What matplotlib or
Optuna warn while drawing goes to report.md, not the console.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path

import pandas as pd

from analysis.figures.curves import plot_learning_curves, plot_metric_vs_noise_rate, plot_paper_curves
from analysis.figures.plots import plot_heatmap, plot_timeline, save_figure
from analysis.figures.search import Picture
from analysis.reading.load import ExperimentError, config_column, varying_config_columns
from analysis.reading.provenance import sweep_runs
from analysis.tables.formatting import bare
from trainables.experiment.objective import Objective


@dataclasses.dataclass
class Pictures:
    """The report's figures as they are drawn (saved in each format, in ``out``), or left out with the
    reason (the module docstring says where each line goes)."""

    out: Path
    formats: tuple[str, ...]
    drawn: list = dataclasses.field(default_factory=list)  # (title, file, caption)
    left_out: list = dataclasses.field(default_factory=list)  # "name: why"

    def save(self, name: str, title: str, draw, caption: str = "") -> None:
        """Draw (``draw()``, or a Figure as it is) and save ``name.<format>``."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                save_figure(draw() if callable(draw) else draw, self.out / name, self.formats)
            except Exception as error:  # any failure of one figure: the report goes on without it
                self.leave_out(name, f"not drawn: {type(error).__name__}: {error}")
                return
        warned = sorted({f"{type(w.message).__name__}: {w.message}" for w in caught})
        caption += "".join(f" (While drawing it, {text})" for text in warned)
        self.drawn.append((title, f"{name}.png", caption.strip()))

    def add(self, picture) -> None:
        """An :class:`analysis.figures.search.Picture`: drawn and saved, or left out for its reason."""
        if picture.draw is None:
            self.leave_out(picture.name, picture.why, picture.expected)
        else:
            self.save(picture.name, picture.title, picture.draw, picture.caption)

    def leave_out(self, name: str, why: str, expected: bool = False) -> None:
        """Leave a figure out: one line in report.md, and on the console unless ``expected``."""
        if not expected:
            print(f"{name}: {why}", flush=True)
        self.left_out.append(f"`{name}`: {why}")


CURVES_SHOWN = 8
"""Learning curves of more configurations than this show the best this many; the rest are faded."""

HEATMAP_VALUES = 12
"""A heatmap axis has at most this many distinct values (a grid's axis, not a sampled parameter)."""


def noise_rate_missing(trials: pd.DataFrame) -> str | None:
    """Why nothing can be drawn against noise rate (no ``noise_rate`` config key, or fewer than two noise rates),
    None when it can."""
    try:
        rates = trials[config_column(trials, "noise_rate")].dropna().unique()
    except ExperimentError:
        return "no noise_rate in the trials' configs: nothing to draw against"
    if len(rates) < 2:
        only = f" ({rates[0]:g})" if len(rates) and isinstance(rates[0], (int, float)) else ""
        return f"one noise rate{only}: nothing to draw against"
    return None


def heatmap_axes(trials: pd.DataFrame) -> tuple[str, str] | str:
    """Noise rate × noise type, else the first two varying config keys with at most
    :data:`HEATMAP_VALUES` values each (a grid's axes); else why there is no heatmap (a search, whose parameters
    are sampled: the slice and parallel-coordinate pictures show them; too few axes)."""
    record = trials.attrs.get("search")
    if record is not None:
        why = "a search samples its parameters: the slice and parallel-coordinate pictures show them"
        return why if record.kind == "search" else "PBT changes its parameters"
    varying = varying_config_columns(trials)
    if {"config/noise_rate", "config/noise_type"} <= set(varying):
        return "noise_rate", "noise_type"
    axes = [c for c in varying if trials[c].nunique(dropna=True) <= HEATMAP_VALUES]
    if len(axes) < 2:
        many = [bare(c) for c in varying if c not in axes]
        why = f"fewer than two config keys vary over at most {HEATMAP_VALUES} values" + (
            f" ({', '.join(many)}: more)" if many else ""
        )
        return why
    return bare(axes[0]), bare(axes[1])


def paper_curves_picture(paper: pd.DataFrame, trials: pd.DataFrame) -> Picture:
    """The paper table (:func:`analysis.paper_table`) against noise rate, 95 % CI bands; left out (by design) where
    its trials have fewer than two noise rates (:func:`noise_rate_missing`)."""
    why = noise_rate_missing(trials)
    if why is None and "noise_rate" not in paper.attrs["columns"]:
        why = f"the paper table has no noise_rate column (its rows: {', '.join(paper.attrs['rows'])})"
    draw = None if why else functools.partial(plot_paper_curves, paper)
    return Picture("noise_rate_curves", f"{paper.attrs['metric']} vs noise rate", draw, why=why or "", expected=True)


def experiment_runs(trials: pd.DataFrame) -> list[tuple[float, str]]:
    """The runs of one experiment (`sweep_runs`: (start, kind) each); [] for experiments compared together."""
    return [] if trials.attrs.get("experiments") else sweep_runs(trials.attrs["experiment"])


def experiment_pictures(
    trials: pd.DataFrame, history: pd.DataFrame, selected: pd.DataFrame, objective: Objective
) -> list[Picture]:
    """Learning curves, metric vs noise rate, heatmap and timeline of any experiment (a write-up's and the
    notebooks' figures), each to be drawn or left out with why (by design: ``expected``).

    Args:
        trials, history: :func:`analysis.load_experiment`.
        selected: ``trials`` with ``select/<metric>`` (:func:`analysis.add_selected`): the noise-rate curve and the
            heatmap show each trial's value under the objective's selection rule.
        objective: the metric, mode and rule (:func:`analysis.reading.load.resolve_objective`).
    """
    metric = objective.metric
    curves = functools.partial(plot_learning_curves, history, trials, objective, highlight=CURVES_SHOWN)
    pictures = [Picture("learning_curves", "Learning curves", curves)]
    title, why = f"{metric} vs noise rate", noise_rate_missing(trials)
    draw = functools.partial(plot_metric_vs_noise_rate, selected, objective, scope="select")
    pictures.append(Picture("metric_vs_noise_rate", title, None if why else draw, why=why or "", expected=True))
    axes = heatmap_axes(trials)
    if isinstance(axes, str):
        pictures.append(Picture("heatmap", "Heatmap", why=axes, expected=True))
    else:
        draw = functools.partial(plot_heatmap, selected, metric, *axes, scope="select")
        pictures.append(Picture("heatmap", f"{metric} over {axes[0]} × {axes[1]}", draw))
    starts = [start for start, _ in experiment_runs(trials)]
    timeline = functools.partial(plot_timeline, trials, runs=starts if len(starts) > 1 else None)
    return [*pictures, Picture("timeline", "Trial timeline", timeline)]
