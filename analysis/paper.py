"""The paper table of a label-noise sweep: methods × (noise type, noise rate), mean ± std over
seeds of one selected value per trial, best per column marked, paired tests against a baseline.

How papers report it: GCE (Zhang & Sabuncu 2018) and SCE (Wang et al. 2019) give mean ± std of
5 runs with the best in bold; the value per run is chosen by a named rule (:mod:`analysis.rules`).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.special import stdtrit  # Student t quantile; much lighter to import than scipy.stats

from analysis.errors import ExperimentError
from analysis.load import SEED_KEY, config_column, guess_mode, varying_config_columns
from analysis.rules import (
    DEFAULT_K,
    DEFAULT_METRIC,
    DEFAULT_SELECT,
    DEFAULT_TEST_METRIC,
    describe_select,
    shown_as_percent,
)
from analysis.select import select_values

NOISE_TYPE, NOISE_RATE = "config/noise_type", "config/noise_rate"
"""The column axes of the paper table (when the trials have them)."""

ALPHA = 0.05
"""Significance level of the mark in the table (paired t-test against the baseline row)."""

_STATS = [
    "n",
    "n_failed",
    "n_diverged",
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
    "test",
]


def paper_table(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    metric: str = DEFAULT_TEST_METRIC,
    *,
    select: str = DEFAULT_SELECT,
    k: int = DEFAULT_K,
    val_metric: str | None = None,
    val_mode: str | None = None,
    mode: str | None = None,
    rows: Sequence[str] | None = None,
    baseline: str | None = "auto",
    seed: str = SEED_KEY,
) -> pd.DataFrame:
    """The paper table in long form: one row per (method, noise type, noise rate) cell.

    Each trial contributes one value of ``metric``, chosen by ``select``
    (:func:`analysis.select.select_values`); a cell is the mean ± std over seeds of the usable
    trials (not errored, not diverged, finite value).

    Args:
        trials, history: :func:`analysis.load_experiment` of one experiment or a list of them.
        metric: the reported metric, e.g. ``"test/acc"``.
        select, k: selection rule (``"best-val"``, ``"last"``, ``"last-k"``) and its window.
        val_metric, val_mode: validation metric for ``best-val``; default the sweep's recorded
            metric and mode (``trials.attrs``), else ``val/acc``/``max``.
        mode: direction of ``metric`` for best/second best; default :func:`guess_mode`.
        rows: config keys that make a method (``["loss"]``, ``["loss", "lr"]``, or
            ``"experiment"``). Default: every varying config key except noise type, noise rate
            and the seed; ``experiment`` is added in front when experiments would otherwise share
            a cell; ``loss`` when nothing varies.
        baseline: method row the others are tested against, by its label (row key values joined
            with ``", "``, e.g. ``"ce"``) or one of its values; ``"auto"`` = the row with ``ce``
            when exactly one has it; None = no tests.
        seed: config key of the seed axis; pairs are formed on equal seeds (same seed = same
            noise draw).

    Returns:
        DataFrame with the row keys (``config/`` dropped), ``noise_type``, ``noise_rate`` (those
        present), then ``n`` (usable seeds), ``n_failed`` (errored or diverged trials),
        ``n_diverged``, ``mean``, ``std`` (ddof=1; NaN for n < 2), ``ci95`` (half width, Student
        t over seeds), ``rank`` (1 = best in its column, ties share; NaN when n = 0 or when
        fewer than two methods in the column have a value: nothing to be best against),
        ``is_baseline``, and against the baseline (:func:`paired_test`): ``n_pairs``,
        ``diff_mean`` (row − baseline), ``diff_ci95_low``/``diff_ci95_high``, ``p_ttest``,
        ``p_wilcoxon``, ``test`` (what was done, in words). Sorted by the row keys, then noise
        type and rate. ``attrs``: ``metric``, ``mode``, ``select``, ``k``, ``val_metric``,
        ``rule`` (:func:`analysis.rules.describe_select`), ``rows``, ``columns``, ``baseline``
        (label or None), ``n_seeds`` (distinct seeds in the trials), ``percent`` (accuracy in
        [0, 1]: shown ×100).

    Raises:
        ExperimentError: bad rule or k, ``metric`` or (for best-val) the validation metric not in
            the history, a row key or baseline that does not exist (the message lists the
            available ones).
    """
    val_metric = val_metric or trials.attrs.get("metric") or DEFAULT_METRIC
    val_mode = (
        val_mode
        or (trials.attrs.get("mode") if val_metric == trials.attrs.get("metric") else None)
        or guess_mode(val_metric)
    )
    mode = mode or guess_mode(metric)
    values = select_values(history, metric, select, k=k, val_metric=val_metric, val_mode=val_mode)["value"]
    columns = [c for c in (NOISE_TYPE, NOISE_RATE) if c in trials.columns]
    keys = _row_keys(trials, rows, columns, seed)
    seed_column = f"config/{seed}" if f"config/{seed}" in trials.columns else None

    value = values.reindex(trials["trial_id"]).to_numpy(dtype=float)
    errored = (trials["status"] == "ERROR").to_numpy()
    diverged = trials["diverged"].astype(bool).to_numpy() & ~errored
    work = pd.DataFrame({c: trials[c].to_numpy() for c in dict.fromkeys(keys + columns)})
    work["_seed"] = trials[seed_column].to_numpy() if seed_column else np.arange(len(trials))
    work["_value"] = value
    work["_usable"] = ~errored & ~diverged & np.isfinite(value)
    work["_errored"], work["_diverged"] = errored, diverged

    cells = []
    groups = work.groupby(keys + columns, sort=True, dropna=False) if keys + columns else [((), work)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        ok = group[group["_usable"]]
        v = ok["_value"].to_numpy(dtype=float)
        n = len(v)
        std = v.std(ddof=1) if n > 1 else np.nan
        cells.append(
            {
                **dict(zip(keys + columns, key)),
                "n": n,
                "n_failed": int(group["_errored"].sum() + group["_diverged"].sum()),
                "n_diverged": int(group["_diverged"].sum()),
                "mean": v.mean() if n else np.nan,
                "std": std,
                "ci95": stdtrit(n - 1, 0.975) * std / math.sqrt(n) if n > 1 else np.nan,
                "_seeds": dict(zip(ok["_seed"], v)),
            }
        )
    table = pd.DataFrame(cells)
    labels = [_label(row[keys]) for _, row in table.iterrows()] if keys else [""] * len(table)
    table["_label"] = labels

    column_of = table[columns].apply(tuple, axis=1) if columns else pd.Series([()] * len(table))
    usable = table["n"] > 0
    ranked = table["mean"].where(usable)
    contested = usable.groupby(column_of).transform("sum") >= 2  # a rank among one method means nothing
    table["rank"] = ranked.where(contested).groupby(column_of).rank(ascending=(mode == "min"), method="min")

    base_label = _resolve_baseline(baseline, table, keys)
    table["is_baseline"] = table["_label"] == base_label if base_label is not None else False
    tests = []
    for i, row in table.iterrows():
        if base_label is None:
            tests.append({"test": "no baseline"})
            continue
        if row["is_baseline"]:
            tests.append({"test": "baseline"})
            continue
        same = table[(table["_label"] == base_label) & (column_of == column_of[i])]
        base_seeds = same["_seeds"].iloc[0] if len(same) else {}
        common = [s for s in row["_seeds"] if s in base_seeds] if seed_column else []
        tests.append(paired_test([row["_seeds"][s] for s in common], [base_seeds[s] for s in common]))
    tests = pd.DataFrame(tests, index=table.index)
    for column in _STATS[_STATS.index("n_pairs") :]:
        table[column] = tests[column] if column in tests else np.nan
    table["n_pairs"] = table["n_pairs"].astype("Int64")

    bare = {c: c[len("config/") :] if c.startswith("config/") else c for c in keys + columns}
    table = table.drop(columns=["_seeds"]).rename(columns=bare)
    table = table[[*dict.fromkeys(bare[c] for c in keys + columns), *_STATS, "_label"]]
    finite = table["mean"].dropna()
    seeds = trials[seed_column].nunique() if seed_column else int(table[["n", "n_failed"]].sum(axis=1).max())
    table.attrs.update(
        metric=metric,
        mode=mode,
        select=select,
        k=k,
        val_metric=val_metric,
        rule=describe_select(select, metric, val_metric, k),
        rows=[bare[c] for c in keys],
        columns=[bare[c] for c in columns],
        baseline=base_label,
        n_seeds=int(seeds),
        percent=shown_as_percent(metric, finite.tolist()),
        experiment=trials.attrs.get("experiment"),
    )
    return table.reset_index(drop=True)


def paired_test(values: Sequence[float], baseline: Sequence[float], level: float = 0.95) -> dict:
    """Paired comparison of a method with a baseline over the same seeds.

    Args:
        values, baseline: the two methods' values, position i from the same seed (same noise
            draw), equal lengths.
        level: confidence level of the interval of the mean difference.

    Returns:
        dict with ``n_pairs``; ``diff_mean`` (mean of values − baseline); ``diff_ci95_low`` and
        ``diff_ci95_high``: ``diff_mean ± t(1 − (1 − level)/2, n − 1) · sd / √n`` (Student t on
        the paired differences); ``p_ttest`` (two-sided paired t-test,
        ``scipy.stats.ttest_rel``); ``p_wilcoxon`` (two-sided Wilcoxon signed-rank,
        ``scipy.stats.wilcoxon``; NaN when every difference is 0); ``test`` in words. With
        fewer than 3 pairs no test is made: the p-values and interval are NaN and ``test``
        says so.
    """
    a, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    d = a - b
    n = len(d)
    out = {
        "n_pairs": n,
        "diff_mean": d.mean() if n else np.nan,
        "diff_ci95_low": np.nan,
        "diff_ci95_high": np.nan,
        "p_ttest": np.nan,
        "p_wilcoxon": np.nan,
    }
    if n < 3:
        return {**out, "test": f"no test possible: {n} paired seed(s), fewer than 3"}
    from scipy import stats  # slow to import: only when a test is made

    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant differences: scipy warns and returns NaN
        p_t = stats.ttest_rel(a, b).pvalue
        try:
            p_w = stats.wilcoxon(a, b).pvalue if np.any(d != 0) else np.nan
        except ValueError:
            p_w = np.nan
    return {
        **out,
        "diff_ci95_low": out["diff_mean"] - half,
        "diff_ci95_high": out["diff_mean"] + half,
        "p_ttest": float(p_t),
        "p_wilcoxon": float(p_w),
        "test": f"paired t-test and Wilcoxon, {n} seeds",
    }


def paper_caption(table: pd.DataFrame, style: str = "markdown") -> str:
    """The caption of a :func:`paper_table`: metric, rule, n, marks and the test used."""
    a = table.attrs
    pm, dagger = ("±", "†") if style != "latex" else (r"$\pm$", r"$^\dagger$")
    text = (
        f"{a['metric']}{' (%)' if a['percent'] else ''}: {a['rule']}. Mean {pm} std over "
        f"{a['n_seeds']} seeds; (n=…) where fewer seeds finished; failed / diverged: every seed of the "
        "cell errored / diverged."
    )
    text += (
        " Best per column in bold, second best underlined (columns with two or more methods)."
        if table["rank"].notna().any()
        else " No best marked: no column has two methods to compare."
    )
    if a["baseline"] is None:
        return text + " No significance test (no baseline row)."
    p = f"$p < {ALPHA:g}$" if style == "latex" else f"p < {ALPHA:g}"
    return (
        text + f" {dagger} {p} against {a['baseline']} (paired t-test over seeds, same seed = "
        "same noise draw; the Wilcoxon signed-rank p and the 95 % CI of the mean difference are in "
        "paper_table.csv); no test where fewer than 3 seeds pair up."
    )


def format_paper_table(table: pd.DataFrame, style: str = "markdown") -> str:
    """Render a :func:`paper_table` wide: one row per method, one column per noise type × rate.

    Args:
        table: output of :func:`paper_table`.
        style: ``"markdown"`` (caption line, then a pipe table; best ``**bold**``, second
            ``<u>underlined</u>``) or ``"latex"`` (a ``table`` with a booktabs ``tabular``:
            ``\\toprule``/``\\midrule``/``\\bottomrule``, ``\\textbf``, ``\\underline``, one
            ``\\multicolumn`` per noise type over its rates).

    Raises:
        ValueError: unknown ``style``.
    """
    if style not in ("markdown", "latex"):
        raise ValueError(f"style must be 'markdown' or 'latex', not {style!r}")
    a = table.attrs
    keys, columns = a["rows"], a["columns"]
    grid = table.set_index("_label")
    column_values = list(dict.fromkeys(table[columns].itertuples(index=False, name=None))) if columns else [()]
    column_values.sort(key=_sort_key)
    row_labels = list(dict.fromkeys(table["_label"]))
    header_keys = keys or [""]

    body = []
    for label in row_labels:
        rows = grid.loc[[label]]
        first = rows.iloc[0]
        cells = [_fmt(first[key]) for key in keys] if keys else [a["metric"]]
        for value in column_values:
            match = rows[(rows[columns].apply(tuple, axis=1) == value)] if columns else rows
            cells.append(format_cell(match.iloc[0], a, style) if len(match) else "–")
        body.append(cells)

    if style == "markdown":
        names = [_column_name(columns, v) for v in column_values]
        lines = [
            paper_caption(table, "markdown"),
            "",
            "| " + " | ".join(header_keys + names) + " |",
            "|" + "|".join([":--"] * len(header_keys) + ["--:"] * len(names)) + "|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n"

    nk = len(header_keys)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + _latex(paper_caption(table, "latex")) + "}",
        r"\begin{tabular}{" + "l" * nk + "c" * len(column_values) + "}",
        r"\toprule",
    ]
    if len(columns) == 2:  # noise type over its rates
        spans = [(t, sum(1 for v in column_values if v[0] == t)) for t in dict.fromkeys(v[0] for v in column_values)]
        lines.append(
            " & " * nk + " & ".join(rf"\multicolumn{{{w}}}{{c}}{{{_latex(_fmt(t))}}}" for t, w in spans) + r" \\"
        )
        start, rules = nk + 1, []
        for _, w in spans:
            rules.append(rf"\cmidrule(lr){{{start}-{start + w - 1}}}")
            start += w
        lines.append(" ".join(rules))
        names = [_fmt(v[1]) for v in column_values]
    else:
        names = [_column_name(columns, v) for v in column_values]
    lines.append(" & ".join(_latex(h) for h in header_keys + names) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join([_latex(c) for c in cells[:nk]] + cells[nk:]) + r" \\" for cells in body]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def format_cell(row: pd.Series, attrs: dict, style: str = "text") -> str:
    """One cell: ``mean ± std``, ``(n=…)`` below ``attrs["n_seeds"]``, best/second marks in
    ``"markdown"``/``"latex"``, † when p < :data:`ALPHA`; ``failed``/``diverged``/``error``
    when no seed is usable; ``(n)`` always in ``"console"`` style (no marks)."""
    if row["n"] == 0:
        if row["n_failed"] == 0:
            return "--" if style == "latex" else "–"
        return "diverged" if row["n_diverged"] == row["n_failed"] else ("error" if row["n_diverged"] == 0 else "failed")
    scale, spec = (100.0, ".2f") if attrs["percent"] else (1.0, ".4f")
    pm = r" $\pm$ " if style == "latex" else " ± "
    text = format(row["mean"] * scale, spec)
    if not pd.isna(row["std"]):
        text += pm + format(row["std"] * scale, spec)
    if style == "console":
        return f"{text} ({row['n']})"
    if row["rank"] == 1:
        text = rf"\textbf{{{text}}}" if style == "latex" else f"**{text}**"
    elif row["rank"] == 2:
        text = rf"\underline{{{text}}}" if style == "latex" else f"<u>{text}</u>"
    if row["n"] < attrs["n_seeds"]:
        text += f" (n={row['n']})"
    if not pd.isna(row["p_ttest"]) and row["p_ttest"] < ALPHA:
        text += r"$^\dagger$" if style == "latex" else "†"
    return text


def write_paper_table(table: pd.DataFrame, path: str | Path) -> list[Path]:
    """Write ``<path>.md``, ``<path>.tex`` (:func:`format_paper_table`) and ``<path>.csv`` (the
    long table with every statistic and p-value, a ``rule`` column stating the selection rule).

    ``path`` has no suffix, e.g. ``report/paper_table``. Returns the three paths.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    md, tex, csv = (path.with_name(path.name + suffix) for suffix in (".md", ".tex", ".csv"))
    md.write_text(format_paper_table(table, "markdown"))
    tex.write_text(format_paper_table(table, "latex"))
    table.drop(columns=["_label"]).assign(
        metric=table.attrs["metric"], rule=table.attrs["rule"], baseline=table.attrs["baseline"]
    ).to_csv(csv, index=False)
    return [md, tex, csv]


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
                    ", ".join(c[len("config/") :] for c in varying_config_columns(trials, seed) if c not in columns)
                    or "none"
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


def _resolve_baseline(baseline: str | None, table: pd.DataFrame, keys: list[str]) -> str | None:
    labels = list(dict.fromkeys(table["_label"]))
    if baseline is None or not keys:
        return None
    values = {
        label: {_fmt(v) for v in row}
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


def _label(values) -> str:
    return ", ".join(_fmt(v) for v in values)


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


def _column_name(columns: list[str], value: tuple) -> str:
    return " ".join(_fmt(v) for v in value) if columns else "all"


def _sort_key(values: tuple) -> tuple:
    """Sorts tuples of mixed types (numbers before strings) without TypeError."""
    return tuple((isinstance(v, str), 0 if isinstance(v, str) else v, str(v)) for v in values)


_LATEX = str.maketrans({"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "–": "--", "…": r"\dots{}"})


def _latex(text: str) -> str:
    return text.translate(_LATEX)
