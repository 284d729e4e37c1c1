"""The console summary printed at the end of a sweep, shaped like the grid (not ranked), and the tables it
reads (`sweep_tables`): the paper table of the test metric and the one of the validation metric the best
configuration is chosen on, computed once and read by the summary, the report and ``--json``.

``report.md`` embeds the same text, so the console and the report cannot disagree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from analysis.progress import describe_counts
from analysis.reading.load import duplicates_line, load_experiment
from analysis.reading.oom_rounds import reruns_line
from analysis.reading.pbt_members import BEST_EPOCH, MEMBER, pbt_note
from analysis.reading.trial_outcomes import trial_counts
from analysis.tables.formatting import aligned_text, format_value
from analysis.tables.paper import paper_table
from analysis.tables.paper_format import format_cell
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective


def sweep_summary(experiment: Any, objective: Objective = Objective()) -> str:
    """The text printed at the end of a sweep (see :func:`summary_text`).

    Args:
        experiment: experiment folder, URI, ``ResultGrid``, or a list of them.
        objective: its metric and mode choose the best configuration (never the test metric), its
            table metric fills the cells (the test metric; without one, the metric), its rule picks
            each trial's value.

    Raises:
        ExperimentError: nothing to show (no trial reported the table metric; not an experiment).
    """
    trials, history = load_experiment(experiment)
    return summary_text(trials, history, objective)


def summary_text(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    objective: Objective = Objective(),
    *,
    rows: list[str] | None = None,
) -> str:
    """Grid-shaped summary of one experiment (or several) as plain text.

    Lines: a header stating the selection rule; a table with one row per method × noise rate
    (every varying config key but noise type and seed) and one column per noise type, each
    cell ``mean ± std (n)`` over seeds of the objective's table metric under its rule (the numbers of
    :func:`analysis.paper_table`, formatted the same way: accuracies in %); the count of
    errored and diverged trials; the duplicates left out (:func:`analysis.reading.load.duplicates_line`,
    only when there were some); the trials re-run after running out of GPU memory, counted in place of their
    failures (:func:`analysis.reading.oom_rounds.reruns_line`, only when there were some); one line naming
    the best configuration by the objective's metric under the same rule, with its metric and test metric cells.

    Raises:
        ExperimentError: no trial reported the table metric (nothing to show), or as
            :func:`analysis.paper_table`.
    """
    return format_summary(trials, sweep_tables(trials, history, objective, rows=rows))


@dataclasses.dataclass(frozen=True)
class SweepTables:
    """The tables a sweep's summary, report and ``--json`` read (`sweep_tables`).

    Fields:
        test: the paper table of the objective's table metric (:func:`analysis.paper_table`): the cells.
        val: the paper table of its validation metric on the same rows: the best configuration is
            chosen on it, never on the test metric.
        best: that configuration, its row of `val` (`best_cell`); None when no cell has a usable value.
        counts: the trials by how they ended (`trainables.experiment.outcome.count_outcomes`); those
            errored, diverged, interrupted or not run are left out of the cells.
    """

    test: pd.DataFrame
    val: pd.DataFrame
    best: pd.Series | None
    counts: dict


def sweep_tables(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    objective: Objective,
    *,
    rows: list[str] | None = None,
    baseline: str | None = None,
    bootstrap: bool = False,
) -> SweepTables:
    """The test and validation tables of a sweep and its best configuration, computed once.

    Args:
        trials, history: :func:`analysis.load_experiment` of one experiment or several.
        objective: what the tables show and the best configuration is chosen by.
        rows, baseline, bootstrap: as for :func:`analysis.paper_table` (of `test`; `val` has no tests).
    Raises:
        ExperimentError: no trial reported the objective's table metric (nothing to show), or as
            :func:`analysis.paper_table`.
    """
    metric = objective.table_metric
    if metric not in history.columns or not history[metric].notna().any():
        raise ExperimentError(f"no trial reported {metric!r}: nothing to summarise")
    test = paper_table(trials, history, objective, rows=rows, baseline=baseline, bootstrap=bootstrap)
    val = paper_table(trials, history, objective.validation(), rows=test.attrs["rows"], baseline=None)
    return SweepTables(test, val, best_cell(val), trial_counts(trials))


def format_summary(trials: pd.DataFrame, tables: SweepTables) -> str:
    """The text of :func:`summary_text`, of tables already computed (`sweep_tables`)."""
    test, a = tables.test, tables.test.attrs
    wide = "noise_type" in a["columns"]
    lines = [
        f"{a['metric']}{' (%)' if a['percent'] else ''}: {a['rule']}; mean ± std (n seeds) over seeds"
        + (", columns: noise type" if wide else ""),
        *([f"(n=…, decision), decided on {a['val_metric']}: {a['seed_rule']}"] if a.get("seed_rule") else []),
        *_grid_lines(test, a["metric"]),
        f"failed trials (left out of the cells): {describe_counts(_not_in_cells(tables.counts), shown=FAILED)}",
    ]
    if duplicates_line(trials):
        lines.append(duplicates_line(trials))
    if reruns_line(trials.attrs.get("oom_reruns") or ()):  # analysis/reading/oom_rounds.py
        lines.append(reruns_line(trials.attrs["oom_reruns"]))
    lines += [line for line in (pbt_note(trials),) if line]
    lines.append(_best_line(tables) + _best_epoch(trials, tables.best))
    return "\n".join(lines) + "\n"


FAILED = ("errored", "diverged")  # the counts said always in the summary's line of trials left out


def _not_in_cells(counts: dict) -> dict:
    """The counts of the trials left out of the cells (`outcome.LEFT_OUT`, and those still running or pending)."""
    return {key: n for key, n in counts.items() if key not in ("finished", "pruned")}


def _best_epoch(trials: pd.DataFrame, best: pd.Series | None) -> str:
    """Of a PBT experiment's best member: `; its best val/acc at epoch 17` (`analysis.reading.pbt_members`)."""
    pbt = trials.attrs.get("pbt")
    if not pbt or best is None or "member" not in best or MEMBER not in trials:
        return ""
    epochs = trials.loc[trials[MEMBER] == best["member"], BEST_EPOCH].dropna()
    return f"; its best {pbt['metric']} at epoch {epochs.iloc[0]}" if len(epochs) else ""


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
    return aligned_text(header, body, len(keys))


def _best_line(tables: SweepTables) -> str:
    """The best configuration by the validation metric, with its validation and test cells."""
    test, val, best = tables.test, tables.val, tables.best
    metric, test_metric = val.attrs["metric"], test.attrs["metric"]
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


def best_cell(val: pd.DataFrame) -> pd.Series | None:
    """Row of a :func:`analysis.paper_table` of the validation metric (``objective.validation()``) with
    the best mean by its mode (first on ties), or None when no cell has a usable value. Never pass a
    test-metric table."""
    usable = val[val["n"] > 0]
    if usable.empty:
        return None
    return usable.loc[usable["mean"].idxmax() if val.attrs["mode"] == "max" else usable["mean"].idxmin()]


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
