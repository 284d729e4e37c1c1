"""The paper table of a label-noise sweep: methods × (noise type, noise rate), mean ± std over
seeds of one selected value per trial, best per column marked, Holm-corrected paired tests.

How papers report it: GCE (Zhang & Sabuncu 2018) and SCE (Wang et al. 2019) give mean ± std of
5 runs with the best in bold; the value per run is chosen by a named rule (:mod:`trainables.experiment.rules`).
Rendering (Markdown, LaTeX, CSV) is :mod:`analysis.tables.paper_format`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analysis.reading.load import SEED_KEY, config_column, resolve_objective, varying_config_columns
from analysis.reading.trial_outcomes import outcome_column
from analysis.statistics.seed_marks import attach_decisions, load_decisions
from analysis.statistics.select import select_values
from analysis.statistics.stats import BOOTSTRAP_METHOD, bootstrap_ci, cell_stats, holm, paired_test
from analysis.tables.formatting import bare, format_value, label
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import DIVERGED, ERRORED, INTERRUPTED, LEFT_OUT, NO_METRIC, NOT_RUN
from trainables.experiment.rules import shown_as_percent

NOISE_TYPE, NOISE_RATE = "config/noise_type", "config/noise_rate"
"""The column axes of the paper table (when the trials have them)."""

ALPHA = 0.05
"""Family-wise significance level of the † mark (paired t-test against the baseline row,
Holm-corrected over every comparison in the table)."""

COLUMNS = [
    "n",
    "n_failed",
    "n_diverged",
    "n_no_metric",
    "n_interrupted",
    "n_not_run",
    "mean",
    "std",
    "ci95",
    "rank",
    "is_baseline",
    "n_pairs",
    "diff_mean",
    "diff_ci95_low",
    "diff_ci95_high",
    "p_ttest",
    "p_wilcoxon",
    "p_ttest_holm",
    "p_wilcoxon_holm",
    "significant",
    "test",
]
"""Statistics of a :func:`paper_table` cell, after its row keys and noise type / rate:

- ``n`` usable seeds (not errored, not diverged, not stopped, finite value); ``n_failed`` errored or
  diverged trials; ``n_diverged``; ``n_no_metric`` (errored: a command that never reported its metric);
  ``n_interrupted`` and ``n_not_run``: trials the sweep stopped or never started (not failed);
- ``mean``, ``std`` (ddof = 1, NaN for n < 2), ``ci95`` (Student-t half width,
  :func:`analysis.statistics.stats.seed_stats`);
- ``rank``: 1 = best in its column, ties share; NaN when n = 0 or fewer than two methods in the
  column have a value (nothing to be best against);
- ``is_baseline``; against the baseline (:func:`analysis.statistics.stats.paired_test`, pairs on equal
  seeds): ``n_pairs``, ``diff_mean`` (row − baseline), ``diff_ci95_low``/``_high``, ``p_ttest``,
  ``p_wilcoxon`` (uncorrected);
- ``p_ttest_holm``, ``p_wilcoxon_holm``: Holm-adjusted over every test of the table
  (:func:`analysis.statistics.stats.holm`); ``significant``: ``p_ttest_holm`` ≤ :data:`ALPHA` (the † mark);
- ``test``: what was done, in words;
- with ``bootstrap``: ``boot_low``, ``boot_high`` (:func:`analysis.statistics.stats.bootstrap_ci`).
"""


def paper_table(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    objective: Objective | None = None,
    *,
    rows: Sequence[str] | None = None,
    baseline: str | None = "auto",
    seed: str = SEED_KEY,
    bootstrap: bool = False,
) -> pd.DataFrame:
    """The paper table in long form: one row per (method, noise type, noise rate) cell.

    Each trial gives one value of ``objective.table_metric`` (its test metric; without one, its metric)
    by the objective's selection rule (:func:`analysis.statistics.select.select_values`); the best
    per column is by ``objective.table_mode``. ``objective.validation()`` gives the table of the
    validation metric, the one the best configuration is chosen by.
    Args:
        trials, history: :func:`analysis.load_experiment` of one experiment or a list of them.
        objective: default: the sweep's (:func:`analysis.reading.load.resolve_objective`).
        rows: config keys that make a method (``["loss", "lr"]``, ``"experiment"``); default every
            varying key but noise and seed (``experiment`` first when experiments share a cell).
        baseline: label (``"gce, 0.001"``) or a value of the row the others are tested against;
            ``"auto"``: the one row with ``ce`` (none in a ``--seeds auto`` sweep); None: no tests.
        seed: config key of the seed axis; pairs are formed on equal seeds (same noise draw).
        bootstrap: add BCa bootstrap intervals of each cell's mean (``boot_low``, ``boot_high``).

    Returns:
        DataFrame with the row keys (``config/`` dropped), ``noise_type``, ``noise_rate`` (those
        present), then :data:`COLUMNS`; sorted by row keys, noise type and rate. ``attrs``:
        ``objective``, ``metric`` and ``mode`` (its table metric and direction), ``select``, ``k``,
        ``val_metric``, ``rule`` (``Objective.rule``), ``rows``,
        ``columns``, ``baseline`` (label or None), ``n_seeds``, ``percent`` (accuracy in [0, 1]: shown ×100),
        ``alpha``, ``correction``, ``n_comparisons``, ``bootstrap`` (method or None), ``seed_rule`` (``--seeds
        auto``, with ``seeds_n``, ``decision`` columns: :func:`analysis.statistics.seed_marks.attach_decisions`).

    Raises:
        ExperimentError: a metric, row key or baseline that does not exist.
    """
    objective = resolve_objective(trials, history, objective)
    values = select_values(history, objective.table_metric, objective)["value"]
    columns = [c for c in (NOISE_TYPE, NOISE_RATE) if c in trials.columns]
    keys = _row_keys(trials, rows, columns, seed)
    seed_column = f"config/{seed}" if f"config/{seed}" in trials.columns else None
    table = _cells(_per_trial(trials, values, keys + columns, seed_column), keys, columns)
    column_of = table[columns].apply(tuple, axis=1) if columns else pd.Series([()] * len(table))
    table["rank"] = _ranks(table, column_of, objective.table_mode)
    base_label = _resolve_baseline(baseline, table, keys, trials.attrs)
    table = _tests(table, base_label, column_of, paired=seed_column is not None)
    if bootstrap:
        table[["boot_low", "boot_high"]] = [bootstrap_ci(list(s.values())) for s in table["_seeds"]]
    table = _tidy(table, keys, columns, bootstrap)
    n_seeds = trials[seed_column].nunique() if seed_column else int(table[["n", "n_failed"]].sum(axis=1).max())
    table.attrs.update(_attrs(table, objective, keys, columns, base_label, int(n_seeds), bootstrap, trials.attrs))
    return attach_decisions(table, trials.attrs)


def _attrs(table, objective, keys, columns, base_label, n_seeds: int, bootstrap: bool, trial_attrs: dict) -> dict:
    """The ``attrs`` of a paper table (listed in :func:`paper_table`)."""
    return dict(
        objective=objective,
        metric=objective.table_metric,
        mode=objective.table_mode,
        select=objective.select,
        k=objective.k,
        val_metric=objective.metric,
        rule=objective.rule,
        rows=[bare(c) for c in keys],
        columns=[bare(c) for c in columns],
        baseline=base_label,
        n_seeds=n_seeds,
        percent=shown_as_percent(objective.table_metric, table["mean"].dropna().tolist()),
        experiment=trial_attrs.get("experiment"),
        alpha=ALPHA,
        correction="holm",
        n_comparisons=int(table["p_ttest"].notna().sum()),
        bootstrap=BOOTSTRAP_METHOD if bootstrap else None,
    )


def _per_trial(trials: pd.DataFrame, values: pd.Series, cell: list[str], seed_column: str | None) -> pd.DataFrame:
    """One row per trial: its cell columns, seed, selected value, and whether it errored, diverged or is usable."""
    value = values.reindex(trials["trial_id"]).to_numpy(dtype=float)
    outcome = outcome_column(trials).to_numpy()
    work = pd.DataFrame({c: trials[c].to_numpy() for c in dict.fromkeys(cell)})
    work["_seed"] = trials[seed_column].to_numpy() if seed_column else np.arange(len(trials))
    work["_value"] = value
    work["_usable"] = ~np.isin(outcome, LEFT_OUT) & np.isfinite(value)
    work["_errored"], work["_diverged"] = np.isin(outcome, (ERRORED, NO_METRIC)), outcome == DIVERGED
    work["_no_metric"], work["_interrupted"], work["_not_run"] = (
        outcome == o for o in (NO_METRIC, INTERRUPTED, NOT_RUN)
    )
    return work


def _cells(work: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """Seed statistics per cell, its failure counts, its values by seed (``_seeds``) and its row ``_label``."""

    def extra(ok: pd.DataFrame, group: pd.DataFrame) -> dict:
        return {
            "n_failed": int(group["_errored"].sum() + group["_diverged"].sum()),
            "n_diverged": int(group["_diverged"].sum()),
            **{f"n{c}": int(group[c].sum()) for c in ("_no_metric", "_interrupted", "_not_run")},
            "_seeds": dict(zip(ok["_seed"], ok["_value"].to_numpy(dtype=float))),
        }

    table = cell_stats(work, keys + columns, "_value", "_usable", extra)
    table["_label"] = [label(row) for row in table[keys].itertuples(index=False, name=None)] if keys else ""
    return table


def _ranks(table: pd.DataFrame, column_of: pd.Series, mode: str) -> pd.Series:
    """Rank of each cell's mean in its column (1 = best); NaN where fewer than two methods have a value."""
    usable = table["n"] > 0
    contested = usable.groupby(column_of).transform("sum") >= 2  # a rank among one method means nothing
    ranked = table["mean"].where(usable).where(contested)
    return ranked.groupby(column_of).rank(ascending=(mode == "min"), method="min")


def _tests(table: pd.DataFrame, base_label: str | None, column_of: pd.Series, paired: bool) -> pd.DataFrame:
    """Paired tests of each cell against the baseline cell of its column, then Holm over all of them."""
    table = table.copy()
    table["is_baseline"] = table["_label"] == base_label if base_label is not None else False
    tests = []
    for i, row in table.iterrows():
        if base_label is None or row["is_baseline"]:
            tests.append({"test": "baseline" if base_label is not None else "no baseline"})
            continue
        same = table[(table["_label"] == base_label) & (column_of == column_of[i])]
        base_seeds = same["_seeds"].iloc[0] if len(same) else {}
        common = [s for s in row["_seeds"] if s in base_seeds] if paired else []
        tests.append(paired_test([row["_seeds"][s] for s in common], [base_seeds[s] for s in common]))
    tests = pd.DataFrame(tests, index=table.index)
    for column in COLUMNS[COLUMNS.index("n_pairs") : COLUMNS.index("p_ttest_holm")] + ["test"]:
        table[column] = tests[column] if column in tests else np.nan
    table["n_pairs"] = table["n_pairs"].astype("Int64")
    table["p_ttest_holm"], table["significant"] = holm(table["p_ttest"], ALPHA)
    table["p_wilcoxon_holm"] = holm(table["p_wilcoxon"], ALPHA)[0]
    return table


def _tidy(table: pd.DataFrame, keys: list[str], columns: list[str], bootstrap: bool) -> pd.DataFrame:
    """Bare column names, the documented column order (:data:`COLUMNS`), a fresh index."""
    names = {c: bare(c) for c in keys + columns}
    table = table.drop(columns=["_seeds"]).rename(columns=names)
    extra = ["boot_low", "boot_high"] if bootstrap else []
    return table[[*dict.fromkeys(names.values()), *COLUMNS, *extra, "_label"]].reset_index(drop=True)


def _row_keys(trials: pd.DataFrame, rows: Sequence[str] | None, columns: list[str], seed: str) -> list[str]:
    several = "experiment" in trials.columns and trials["experiment"].nunique() > 1
    if rows is not None:
        keys = []
        for name in rows:
            if name == "experiment" and "experiment" in trials.columns:
                keys.append("experiment")
                continue
            try:
                column = config_column(trials, name)
            except ExperimentError:
                available = (
                    ", ".join(bare(c) for c in varying_config_columns(trials, seed) if c not in columns) or "none"
                )
                raise ExperimentError(
                    f"row key {name!r} is not a config key of these trials; varying keys: {available}"
                ) from None
            if column in columns:
                raise ExperimentError(f"row key {name!r} is a column axis of the paper table (noise type, noise rate)")
            keys.append(column)
        return keys
    keys = [c for c in varying_config_columns(trials, seed) if c not in columns]
    if several:
        cell = keys + columns + ([f"config/{seed}"] if f"config/{seed}" in trials.columns else [])
        shared = trials.groupby([trials[c].map(str) for c in cell])["experiment"].nunique().max() > 1 if cell else True
        if shared:
            keys = ["experiment", *keys]
    if not keys and "config/loss" in trials.columns:
        keys = ["config/loss"]
    return keys


def _resolve_baseline(baseline: str | None, table: pd.DataFrame, keys: list[str], attrs: dict) -> str | None:
    labels = list(dict.fromkeys(table["_label"]))
    if baseline is None or not keys:
        return None
    if baseline == "auto" and load_decisions(attrs.get("experiment")) is not None:
        return None  # --seeds auto: its sequential decisions are the table's test, not fixed-n t-tests
    values = {
        label: {format_value(v) for v in row}
        for label, row in zip(table["_label"], table[keys].itertuples(index=False, name=None))
    }
    wanted = "ce" if baseline == "auto" else baseline
    matches = [label for label in labels if label == wanted] or [label for label in labels if wanted in values[label]]
    if len(matches) == 1:
        return matches[0]
    if baseline == "auto":
        return None
    if not matches:
        raise ExperimentError(f"baseline {baseline!r} is not a row of the table; rows: {'; '.join(labels)}")
    raise ExperimentError(f"baseline {baseline!r} matches several rows ({'; '.join(matches)}); give the full row label")
