"""The console summary printed at the end of a sweep, shaped like the grid (not ranked).

``report.md`` embeds the same text, so the console and the report cannot disagree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.progress import describe_counts
from analysis.reading.load import duplicates_line, load_experiment, outcome_column
from analysis.tables.formatting import format_value
from analysis.tables.paper import paper_table
from analysis.tables.paper_format import format_cell
from trainables.experiment.errors import ExperimentError
from trainables.experiment.outcome import count_outcomes
from trainables.experiment.rules import (
    DEFAULT_K,
    DEFAULT_METRIC,
    DEFAULT_MODE,
    DEFAULT_SELECT,
    DEFAULT_TEST_METRIC,
    check_select,
)


def sweep_summary(
    experiment: Any,
    metric: str = DEFAULT_METRIC,
    mode: str = DEFAULT_MODE,
    select: str = DEFAULT_SELECT,
    test_metric: str = DEFAULT_TEST_METRIC,
) -> str:
    """The text printed at the end of a sweep (see :func:`summary_text`).

    Args:
        experiment: experiment folder, URI, ``ResultGrid``, or a list of them.
        metric, mode: validation metric and direction; ``best-val`` selects on it and the best
            configuration is chosen by it (never by the test metric).
        select: selection rule, ``"best-val"``, ``"last"`` or ``"last-k"`` (k = 10).
        test_metric: the metric in the cells.

    Raises:
        ExperimentError: nothing to show (no trial reported ``test_metric``; not an experiment),
            or a bad rule.
    """
    check_select(select)
    trials, history = load_experiment(experiment)
    return summary_text(trials, history, metric, mode, select, test_metric=test_metric)


def summary_text(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    mode: str = DEFAULT_MODE,
    select: str = DEFAULT_SELECT,
    *,
    k: int = DEFAULT_K,
    test_metric: str = DEFAULT_TEST_METRIC,
    rows: list[str] | None = None,
) -> str:
    """Grid-shaped summary of one experiment (or several) as plain text.

    Lines: a header stating the selection rule; a table with one row per method × noise rate
    (every varying config key but noise type and seed) and one column per noise type, each
    cell ``mean ± std (n)`` over seeds of ``test_metric`` under ``select`` (the numbers of
    :func:`analysis.paper_table`, formatted the same way: accuracies in %); the count of
    errored and diverged trials; the duplicates left out (:func:`analysis.reading.load.duplicates_line`,
    only when there were some); one line naming the best configuration by ``metric`` under
    the same rule, with its ``metric`` and ``test_metric`` cells.

    Raises:
        ExperimentError: no trial reported ``test_metric`` (nothing to show), or as
            :func:`analysis.paper_table`.
    """
    if test_metric not in history.columns or not history[test_metric].notna().any():
        raise ExperimentError(f"no trial reported {test_metric!r}: nothing to summarise")
    test = paper_table(
        trials, history, test_metric, select=select, k=k, val_metric=metric, val_mode=mode, rows=rows, baseline=None
    )
    a = test.attrs
    val = paper_table(
        trials,
        history,
        metric,
        select=select,
        k=k,
        val_metric=metric,
        val_mode=mode,
        mode=mode,
        rows=a["rows"],
        baseline=None,
    )
    wide = "noise_type" in a["columns"]
    counts = count_outcomes(outcome_column(trials))
    lines = [
        f"{test_metric}{' (%)' if a['percent'] else ''}: {a['rule']}; mean ± std (n seeds) over seeds"
        + (", columns: noise type" if wide else ""),
        *([f"(n=…, decision), decided on {a['val_metric']}: {a['seed_rule']}"] if a.get("seed_rule") else []),
        *_grid_lines(test, test_metric),
        f"failed trials (left out of the cells): {describe_counts(counts, shown=('errored', 'diverged'))}",
    ]
    if duplicates_line(trials):
        lines.append(duplicates_line(trials))
    lines.append(_best_line(test, val, metric, mode, test_metric))
    return "\n".join(lines) + "\n"


def _grid_lines(test: pd.DataFrame, test_metric: str) -> list[str]:
    """The aligned grid: one row per method × noise rate, one ``mean ± std (n)`` column per noise type."""
    a = test.attrs
    keys = a["rows"] + [c for c in a["columns"] if c != "noise_type"]
    wide = "noise_type" in a["columns"]
    types = sorted(test["noise_type"].unique(), key=str) if wide else [None]
    header = keys + ([str(t) for t in types] if wide else [test_metric])
    body = []
    for key, group in test.groupby(keys, sort=True, dropna=False) if keys else [((), test)]:
        key = key if isinstance(key, tuple) else (key,)
        cells = [format_value(v) for v in key]
        for t in types:
            match = group[group["noise_type"] == t] if wide else group
            cells.append(format_cell(match.iloc[0], a, "console") if len(match) else "–")
        body.append(cells)
    return _aligned(header, body, len(keys))


def _best_line(test: pd.DataFrame, val: pd.DataFrame, metric: str, mode: str, test_metric: str) -> str:
    """The best configuration by the validation metric, with its validation and test cells."""
    best = best_cell(val, mode)
    if best is None:
        return f"best configuration: none (no usable {metric} value)"
    a = test.attrs
    same = test[test["_label"].eq(best["_label"]) & _same_column(test, best, a["columns"])]
    setting = ", ".join(f"{c}={format_value(best[c])}" for c in a["rows"] + a["columns"]) or "all trials"
    return (
        f"best configuration by {val.attrs['rule']}: {setting}: "
        f"{metric} {format_cell(best, val.attrs, 'console')}"
        + (f", {test_metric} {format_cell(same.iloc[0], a, 'console')}" if test_metric != metric else "")
    )


def _aligned(header: list[str], body: list[list[str]], left: int) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        for cells in body
    ]
    return lines


def best_cell(val: pd.DataFrame, mode: str) -> pd.Series | None:
    """Row of a :func:`analysis.paper_table` of the validation metric with the best mean
    (first on ties), or None when no cell has a usable value. Never pass a test-metric table."""
    usable = val[val["n"] > 0]
    if usable.empty:
        return None
    return usable.loc[usable["mean"].idxmax() if mode == "max" else usable["mean"].idxmin()]


def cell_trials(trials: pd.DataFrame, cell: pd.Series, table: pd.DataFrame) -> pd.DataFrame:
    """The trials of ``trials`` that fall into one cell of ``table`` (a :func:`analysis.paper_table`)."""
    mask = pd.Series(True, index=trials.index)
    for name in table.attrs["rows"] + table.attrs["columns"]:
        column = name if name == "experiment" else f"config/{name}"
        mask &= trials[column].map(format_value) == format_value(cell[name])
    return trials[mask]


def _same_column(table: pd.DataFrame, cell: pd.Series, columns: list[str]) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for name in columns:
        mask &= table[name] == cell[name]
    return mask
