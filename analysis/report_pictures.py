"""Which pictures a report draws, and which it leaves out and why (``analysis/report.py``).

A picture appears only where it means something: against noise rate with two noise rates or more,
the heatmap over a grid's axes (a few values each), never over a search's sampled parameters. One
that cannot be drawn (its function raised: one trial, one value) is left out with one line saying
why, on the console and in report.md; one left out by design only in report.md. What matplotlib or
Optuna warn while drawing goes to report.md, not the console.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pandas as pd

from analysis.figures.plots import save_figure
from analysis.reading.load import config_column, varying_config_columns
from analysis.tables.formatting import bare


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


def one_noise_rate(trials: pd.DataFrame, pictures: Pictures, name: str) -> bool:
    """True (and ``name`` left out, saying why) when the trials have fewer than two noise rates."""
    rates = trials[config_column(trials, "noise_rate")].dropna().unique()
    if len(rates) < 2:
        only = f" ({rates[0]:g})" if len(rates) and isinstance(rates[0], (int, float)) else ""
        pictures.leave_out(name, f"one noise rate{only}: nothing to draw against", expected=True)
        return True
    return False


def heatmap_axes(trials: pd.DataFrame, pictures: Pictures) -> tuple[str, str] | None:
    """Noise rate × noise type, else the first two varying config keys with at most
    :data:`HEATMAP_VALUES` values each (a grid's axes); None (the heatmap left out, saying why) for a
    search, whose parameters are sampled (the slice and parallel-coordinate pictures show them)."""
    record = trials.attrs.get("search")
    if record is not None:
        why = "a search samples its parameters: the slice and parallel-coordinate pictures show them"
        pictures.leave_out("heatmap", why if record.kind == "search" else "PBT changes its parameters", expected=True)
        return None
    varying = varying_config_columns(trials)
    if {"config/noise_rate", "config/noise_type"} <= set(varying):
        return "noise_rate", "noise_type"
    axes = [c for c in varying if trials[c].nunique(dropna=True) <= HEATMAP_VALUES]
    if len(axes) < 2:
        many = [bare(c) for c in varying if c not in axes]
        why = f"fewer than two config keys vary over at most {HEATMAP_VALUES} values" + (
            f" ({', '.join(many)}: more)" if many else ""
        )
        pictures.leave_out("heatmap", why, expected=True)
        return None
    return bare(axes[0]), bare(axes[1])
