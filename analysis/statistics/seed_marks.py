"""The decisions of a `--seeds auto` sweep shown in its tables: each (cell, method)'s n, decision and the
methods it is significantly better than.

`sweeps/engine/seed_search.write_decisions` writes `report/seeds.csv` (`analysis.statistics.seeds.seeds_frame`); the
paper table (`analysis.paper_table`) and the best-runs table (`analysis.best_runs`) of that experiment
take its `seeds_n`, `decision` and `seeds_beats` columns (`attach_decisions`) and the stopping rule's sentence
(`attrs["seed_rule"]`), which their captions state instead of a significance test. Every renderer
(Markdown, LaTeX, text, `--json`) shows the same `decision_mark`.
"""

from __future__ import annotations

import io
import warnings

import pandas as pd

from trainables.experiment import records

_STATISTICS = ("seeds_n", "mean", "std", "diff_vs_best", "p_adjusted", "decision", "beats", "compare", "rule")


def load_decisions(experiment: str | None) -> pd.DataFrame | None:
    """`report/seeds.csv` of an experiment folder (local or URI; `trainables.experiment.records.read_seeds_table`),
    or None when it has none (not `--seeds auto`).

    A file that cannot be read as the decisions (torn, or written before the `compare` and `rule`
    columns) is skipped with a warning naming it; the tables are then shown without decisions.
    """
    if not experiment:
        return None
    path = records.seeds_table_path(experiment)
    try:
        text = records.read_seeds_table(experiment)
        if text is None:
            return None
        frame = pd.read_csv(io.StringIO(text))
    except (OSError, ValueError) as error:  # pandas' ParserError and EmptyDataError are ValueErrors
        warnings.warn(f"{path}: skipped, not readable as --seeds auto decisions ({error})", stacklevel=2)
        return None
    missing = {"method", "n", "decision", "compare", "rule"} - set(frame.columns)
    if missing:
        warnings.warn(f"{path}: skipped, no column(s) {sorted(missing)} (written by an older raysweep)", stacklevel=2)
        return None
    return frame


def attach_decisions(table: pd.DataFrame, attrs: dict) -> pd.DataFrame:
    """`table` (a paper or best-runs table, bare column names) with `seeds_n`, `decision` and `seeds_beats` (the
    methods it is significantly better than, "; "-joined; "" for none) of its rows.

    Args:
        attrs: the trials' `attrs`: its `experiment` is read (one experiment; several: unchanged).
    Returns:
        a copy with the three columns merged on the cell axes and the compared axis both tables have
        (NaN where seeds.csv has no such row) and `attrs["seed_rule"]` the rule's sentence; `table`
        itself (no `seed_rule`) when the experiment has no usable seeds.csv or the tables share no axis.
    """
    several = len(attrs.get("experiments") or []) > 1
    decisions = None if several else load_decisions(attrs.get("experiment"))
    if decisions is None or decisions.empty:
        return table
    compare = str(decisions["compare"].iloc[0])
    decisions = decisions.rename(columns={"method": compare, "n": "seeds_n"})
    on = [c for c in decisions.columns if c in table.columns and c not in _STATISTICS]
    if compare not in on:
        return table
    if "beats" not in decisions.columns:  # written before all pairs were reported
        decisions["beats"] = ""
    decisions["seeds_beats"] = decisions["beats"].fillna("").astype(str)
    columns = ["seeds_n", "decision", "seeds_beats"]
    keyed = decisions[on + columns].astype({c: str for c in on}).drop_duplicates(on)
    merged = table.astype({c: str for c in on}).merge(keyed, on=on, how="left")[columns]
    out = table.copy()
    for column in columns:
        out[column] = merged[column].to_numpy()
    out.attrs = dict(table.attrs, seed_rule=str(decisions["rule"].iloc[0]))
    return out


def decision_mark(row) -> str:
    """`n=6, worse; > gce, sce`: the seeds the rule ran for this method, its decision against the cell's best
    (best, better, worse, equivalent, or undecided: no claim) and, after `>`, the methods of its cell it is
    significantly better than (Holm over the rule's family; none: no `>`); "" for a row without a decision."""
    decision = row.get("decision")
    if not isinstance(decision, str):
        return ""
    beats = row.get("seeds_beats")
    beats = ", ".join(m.strip() for m in beats.split(";")) if isinstance(beats, str) and beats.strip() else ""
    return f"n={int(row['seeds_n'])}, {decision}" + (f"; > {beats}" if beats else "")
