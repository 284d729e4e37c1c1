"""How analysis/ writes names, numbers, LaTeX and tables, and sorts mixed-type keys: one home for each.

The one table writer: a header and rows of cells already formatted, the first `n_keys` columns the
configuration (left-aligned) and the rest statistics (right-aligned), as Markdown (`markdown_table`), a
booktabs LaTeX tabular (`latex_tabular`) or aligned text for a terminal (`aligned_text`). The best-run tables
(`analysis.tables.best_runs`), the paper tables (`analysis.tables.paper_format`) and the console summary
(`analysis.tables.summary`) and the search table (`analysis.tables.search_table`) all write through it;
`render_table` picks the layout by its name."""

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


def short_value(value) -> str:
    """A config value in a picture's title: floats to 2 significant digits, small ones as ``8.7e-4``
    (no zero-padded exponent), anything else as :func:`format_value`."""
    if not isinstance(value, (float, np.floating)) or _missing(value) or not np.isfinite(value):
        return format_value(value)
    text = f"{value:.2g}"
    if "e" in text or (value != 0 and abs(value) < 1e-2):
        mantissa, exponent = f"{value:.1e}".split("e")
        text = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return text


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


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]], n_keys: int | None = None) -> list[str]:
    """A pipe table's lines: the header, the alignment row, one line per row of `body`. With `n_keys`, the
    first `n_keys` columns are left-aligned (`:--`) and the others right-aligned (`--:`); without, none is."""
    rule = ["---"] * len(header) if n_keys is None else [":--"] * n_keys + ["--:"] * (len(header) - n_keys)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def latex_tabular(
    header: Sequence[str],
    body: Sequence[Sequence[str]],
    n_keys: int,
    *,
    align: str = "r",
    above: Sequence[str] = (),
    latex_values: bool = False,
) -> list[str]:
    """A booktabs ``tabular``'s lines (``\\toprule``/``\\midrule``/``\\bottomrule``): key columns `l`, the
    others `align`; `above`: lines between ``\\toprule`` and the header (a ``\\multicolumn`` row). The header
    and key cells are escaped (`latex_escape`); the other cells too, unless `latex_values` (they are LaTeX already)."""
    lines = [r"\begin{tabular}{" + "l" * n_keys + align * (len(header) - n_keys) + "}", r"\toprule", *above]
    lines.append(" & ".join(latex_escape(h) for h in header) + r" \\")
    lines.append(r"\midrule")
    for cells in body:
        values = cells[n_keys:] if latex_values else [latex_escape(c) for c in cells[n_keys:]]
        lines.append(" & ".join([latex_escape(c) for c in cells[:n_keys]] + list(values)) + r" \\")
    return lines + [r"\bottomrule", r"\end{tabular}"]


def aligned_text(header: Sequence[str], body: Sequence[Sequence[str]], n_keys: int) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, for a terminal: the header and the first `n_keys`
    columns left-aligned, the other cells right-aligned; no trailing spaces."""
    widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for cells in body:
        lines.append("  ".join(c.ljust(w) if i < n_keys else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    return [line.rstrip() for line in lines]


def render_table(header: Sequence[str], body: Sequence[Sequence[str]], n_keys: int, style: str = "text") -> str:
    """Rows of cells (strings) as text (`aligned_text`), Markdown (`markdown_table`, no alignment row marks)
    or a booktabs LaTeX tabular (`latex_tabular`, every cell escaped); the first `n_keys` columns are keys.

    Raises:
        ValueError: unknown ``style``.
    """
    if style not in ("text", "markdown", "latex"):
        raise ValueError(f"style must be 'text', 'markdown' or 'latex', not {style!r}")
    if style == "markdown":
        lines = markdown_table(header, body)
    elif style == "latex":
        lines = latex_tabular(header, body, n_keys)
    else:
        lines = aligned_text(header, body, n_keys)
    return "\n".join(lines) + "\n"


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))
