"""The paper table rendered: its caption, Markdown and LaTeX (booktabs) tables, and the files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.statistics.seed_marks import decision_mark
from analysis.tables.formatting import format_value, latex_escape, latex_tabular, markdown_table, sort_key
from trainables.experiment.rules import format_metric


def paper_caption(table: pd.DataFrame, style: str = "markdown") -> str:
    """The caption of a :func:`analysis.paper_table`: metric, rule, n, marks, the test used and
    its correction (Holm over the number of comparisons, at ``attrs["alpha"]``); first "No test
    metric" when the cells are the validation metric (a sweep that has no test metric).

    Plain text in both styles (``±``, ``†``); :func:`format_paper_table` escapes it for LaTeX.
    """
    a = table.attrs
    text = (
        ("No test metric: the cells are the validation metric itself. " if a["metric"] == a["val_metric"] else "")
        + f"{a['metric']}{' (%)' if a['percent'] else ''}: {a['rule']}. Mean ± std over "
        f"{a['n_seeds']} seeds; (n=…) where fewer seeds finished; failed / diverged: every seed of the "
        "cell errored / diverged."
    )
    if a.get("bootstrap"):
        text += f" [low, high]: {a['bootstrap']} bootstrap 95 % interval of the mean (Efron 1987)."
    text += (
        " Best per column in bold, second best underlined (columns with two or more methods)."
        if table["rank"].notna().any()
        else " No best marked: no column has two methods to compare."
    )
    if a.get("seed_rule"):
        return text + f" (n=…, decision) in every cell, decided on {a['val_metric']}: {a['seed_rule']}"
    if a["baseline"] is None:
        return text + " No significance test (no baseline row)."
    return text + (
        f" † p < {a['alpha']:g} against {a['baseline']} (paired t-test over seeds, same seed = same noise "
        f"draw; Holm-corrected over {a['n_comparisons']} comparisons, α = {a['alpha']:g}; the Wilcoxon "
        "signed-rank p, both p's Holm-adjusted and the 95 % CI of the mean difference are in "
        "paper_table.csv); no test where fewer than 3 seeds pair up."
    )


def format_paper_table(table: pd.DataFrame, style: str = "markdown") -> str:
    """Render a :func:`analysis.paper_table` wide: one row per method, one column per noise type × rate.

    Args:
        table: output of :func:`analysis.paper_table`.
        style: ``"markdown"`` (caption line, then a pipe table; best ``**bold**``, second
            ``<u>underlined</u>``) or ``"latex"`` (a ``table`` with a booktabs ``tabular``:
            ``\\toprule``/``\\midrule``/``\\bottomrule``, ``\\textbf``, ``\\underline``, one
            ``\\multicolumn`` per noise type over its rates).

    Raises:
        ValueError: unknown ``style``.
    """
    if style not in ("markdown", "latex"):
        raise ValueError(f"style must be 'markdown' or 'latex', not {style!r}")
    columns = table.attrs["columns"]
    column_values = list(dict.fromkeys(table[columns].itertuples(index=False, name=None))) if columns else [()]
    column_values.sort(key=sort_key)
    body = _body(table, column_values, style)
    if style == "markdown":
        return _markdown(table, column_values, body)
    return _latex(table, column_values, body)


def _body(table: pd.DataFrame, column_values: list[tuple], style: str) -> list[list[str]]:
    """One list of cells per method row: its key values, then one formatted cell per column."""
    a = table.attrs
    keys, columns = a["rows"], a["columns"]
    grid = table.set_index("_label")
    body = []
    for row_label in dict.fromkeys(table["_label"]):
        rows = grid.loc[[row_label]]
        cells = [format_value(rows.iloc[0][key]) for key in keys] if keys else [a["metric"]]
        for value in column_values:
            match = rows[(rows[columns].apply(tuple, axis=1) == value)] if columns else rows
            cells.append(format_cell(match.iloc[0], a, style) if len(match) else "–")
        body.append(cells)
    return body


def _markdown(table: pd.DataFrame, column_values: list[tuple], body: list[list[str]]) -> str:
    header_keys = table.attrs["rows"] or [""]
    names = [_column_name(table.attrs["columns"], v) for v in column_values]
    lines = [paper_caption(table, "markdown"), "", *markdown_table(header_keys + names, body, len(header_keys))]
    return "\n".join(lines) + "\n"


def _latex(table: pd.DataFrame, column_values: list[tuple], body: list[list[str]]) -> str:
    columns, header_keys = table.attrs["columns"], table.attrs["rows"] or [""]
    nk = len(header_keys)
    spans = _latex_spans(column_values, nk) if len(columns) == 2 else []  # noise type over its rates
    names = [format_value(v[1]) if spans else _column_name(columns, v) for v in column_values]
    lines = [r"\begin{table}[t]", r"\centering", r"\caption{" + latex_escape(paper_caption(table, "latex")) + "}"]
    lines += latex_tabular(header_keys + names, body, nk, align="c", above=spans, latex_values=True)
    return "\n".join(lines + [r"\end{table}"]) + "\n"


def _latex_spans(column_values: list[tuple], nk: int) -> list[str]:
    """The ``\\multicolumn`` line of noise types over their rates and its ``\\cmidrule``s."""
    types = dict.fromkeys(v[0] for v in column_values)
    spans = [(t, sum(1 for v in column_values if v[0] == t)) for t in types]
    header = " & " * nk + " & ".join(rf"\multicolumn{{{w}}}{{c}}{{{latex_escape(format_value(t))}}}" for t, w in spans)
    start, rules = nk + 1, []
    for _, w in spans:
        rules.append(rf"\cmidrule(lr){{{start}-{start + w - 1}}}")
        start += w
    return [header + r" \\", " ".join(rules)]


def format_cell(row: pd.Series, attrs: dict, style: str = "text") -> str:
    """One cell: ``mean ± std``, ``[low, high]`` when the table has bootstrap intervals,
    ``(n=…)`` below ``attrs["n_seeds"]``, best/second marks in ``"markdown"``/``"latex"``, †
    when significant after Holm's correction; why, when no seed is usable (:func:`empty_cell`);
    ``(n)`` always in ``"console"`` style (no marks, no intervals). A ``--seeds auto`` cell shows
    ``(n=3, worse)`` instead of ``(n=…)`` (:func:`analysis.statistics.seed_marks.decision_mark`), in every style."""
    if row["n"] == 0:
        return empty_cell(row)
    percent = attrs["percent"]
    pm = r" $\pm$ " if style == "latex" else " ± "
    text = format_metric(row["mean"], percent)
    if not pd.isna(row["std"]):
        text += pm + format_metric(row["std"], percent)
    if attrs.get("bootstrap") and style != "console" and not pd.isna(row.get("boot_low")):
        text += f" [{format_metric(row['boot_low'], percent)}, {format_metric(row['boot_high'], percent)}]"
    mark = decision_mark(row)  # --seeds auto: n and the decision against the cell's best
    if style == "console":
        return f"{text} ({mark or row['n']})"
    if row["rank"] == 1:
        text = rf"\textbf{{{text}}}" if style == "latex" else f"**{text}**"
    elif row["rank"] == 2:
        text = rf"\underline{{{text}}}" if style == "latex" else f"<u>{text}</u>"
    if mark:
        text += f" ({mark})"
    elif row["n"] < attrs["n_seeds"]:
        text += f" (n={row['n']})"
    if bool(row.get("significant", False)):
        text += r"$^\dagger$" if style == "latex" else "†"
    return text


def empty_cell(row: pd.Series) -> str | None:
    """Why a cell of :func:`analysis.paper_table` has no usable value (None when it has one): ``no metric``,
    ``diverged`` or ``errored`` when every failed trial of it failed that way (``failed`` for a mix);
    with none failed, ``interrupted`` or ``not run`` (the sweep stopped them, or never started them);
    else ``no metric`` (its trials ended without a finite value of the table's metric)."""
    if row["n"] > 0:
        return None
    failed, diverged, no_metric = (int(row.get(c, 0)) for c in ("n_failed", "n_diverged", "n_no_metric"))
    if failed:
        if no_metric == failed:
            return "no metric"
        return "diverged" if diverged == failed else "errored" if diverged == 0 else "failed"
    if row.get("n_interrupted", 0):
        return "interrupted"
    return "not run" if row.get("n_not_run", 0) else "no metric"


def write_paper_table(table: pd.DataFrame, path: str | Path) -> list[Path]:
    """Write ``<path>.md``, ``<path>.tex`` (:func:`format_paper_table`) and ``<path>.csv`` (the
    long table with every statistic and p-value, raw and Holm-adjusted; a ``rule`` column states
    the selection rule, a ``correction`` column the multiple-comparison rule).

    ``path`` has no suffix, e.g. ``report/paper_table``. Returns the three paths.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    md, tex, csv = (path.with_name(path.name + suffix) for suffix in (".md", ".tex", ".csv"))
    md.write_text(format_paper_table(table, "markdown"))
    tex.write_text(format_paper_table(table, "latex"))
    a = table.attrs
    correction = f"holm over {a['n_comparisons']} comparisons, alpha={a['alpha']:g}" if a["baseline"] else "none"
    correction = a.get("seed_rule") or correction
    table.drop(columns=["_label"]).assign(
        metric=a["metric"], rule=a["rule"], baseline=a["baseline"], correction=correction
    ).to_csv(csv, index=False)
    return [md, tex, csv]


def _column_name(columns: list[str], value: tuple) -> str:
    return " ".join(format_value(v) for v in value) if columns else "all"
