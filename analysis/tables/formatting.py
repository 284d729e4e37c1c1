"""How analysis/ writes names, numbers and LaTeX, and sorts mixed-type keys: one home for each."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

CONFIG_PREFIX = "config/"
"""Prefix of the config columns of :func:`analysis.load_trials` (``config/noise_rate``)."""


def bare(column: str) -> str:
    """``"config/noise_rate"`` -> ``"noise_rate"``; any other column name unchanged."""
    return column.removeprefix(CONFIG_PREFIX)


def format_value(value) -> str:
    """A config value or key in a table or label: floats in ``%g`` (``0.4``, ``1e-05``), ``–`` for
    None or NaN, anything else ``str``."""
    if _missing(value):
        return "–"
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


def format_number(value, digits: int = 4) -> str:
    """A statistic with ``digits`` significant digits (``0.8957``); ``–`` when missing."""
    if _missing(value):
        return "–"
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return str(int(value))
    return f"{value:.{digits}g}" if isinstance(value, (float, np.floating)) else str(value)


def label(values: Sequence) -> str:
    """A method's row label: its key values joined with ``", "`` (``"gce, 0.001"``)."""
    return ", ".join(format_value(v) for v in values)


def named_label(keys: Sequence[str], values: Sequence) -> str:
    """A legend entry: ``"loss=gce, lr=0.001"`` (``config/`` dropped from the keys)."""
    return ", ".join(f"{bare(k)}={format_value(v)}" for k, v in zip(keys, values))


def sort_key(values: tuple) -> tuple:
    """Key that sorts tuples of mixed types without TypeError: numbers (in order) before
    strings (alphabetical), None and NaN last."""
    return tuple(
        (v is None or v != v, isinstance(v, str), v if not isinstance(v, str) and v is not None else 0, str(v))
        for v in values
    )


_LATEX = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "{": r"\{",
        "}": r"\}",
        "$": r"\$",
        "&": r"\&",
        "%": r"\%",
        "_": r"\_",
        "#": r"\#",
        "^": r"\textasciicircum{}",
        "~": r"\textasciitilde{}",
        "–": "--",
        "…": r"\dots{}",
        "±": r"$\pm$",
        "†": r"$^\dagger$",
        "α": r"$\alpha$",
        "<": r"$<$",
        ">": r"$>$",
    }
)


def latex_escape(text: str) -> str:
    """Plain text as LaTeX: the ten special characters ``\\ { } $ & % _ # ^ ~`` escaped (the
    list in the LaTeX Project's "LaTeX2e for authors", §2.4), and ``– … ± † α < >`` written as
    LaTeX so they print under any font encoding. Apply it to plain text only, once."""
    return str(text).translate(_LATEX)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))
