"""The write-up of an experiment: its tables, its figures and a ``report.md`` that embeds them, in its
report folder (``<experiment>/report``: the folder and ``report.md`` keep their names, users' paths
depend on them; in the code, "report" is only Tune's ``tune.report``).

What :func:`write_up` writes:

- ``paper_table.md/.tex/.csv`` (:func:`analysis.paper_table` of the objective's test metric, methods
  × noise type × noise rate, Holm-corrected tests against ``baseline``) and ``summary.txt`` (the
  console text of :func:`analysis.sweep_summary`, same numbers), when some trial reported it;
- ``best_runs.csv/.md/.tex`` (:func:`analysis.best_runs` of the objective's metric under its rule;
  ``best_runs.txt`` is the console rendering the CLI prints), ``trials.csv``;
- of a search or PBT (``trials.attrs["search"]``, :mod:`analysis.reading.search_record`),
  ``search_table.csv/.md/.tex`` (:func:`analysis.tables.search_table.search_table`: every trial ranked,
  its searched parameters, epochs and why it ended) and its pictures
  (:func:`analysis.figures.search.search_pictures`: Optuna's ``optimization_history``, ``slice``,
  ``param_importances``, ``parallel_coordinate``, and ``optimization_history_time``; PBT's ``pbt_schedule``);
- figures, in each of ``formats``: ``noise_rate_curves`` (the paper table vs noise rate, 95 % CI
  bands) and ``metric_vs_noise_rate`` with two noise rates or more, ``confusion`` (clean-test
  confusion matrix summed over the seeds of the best configuration by the metric, only when its
  trials saved ``confusion.json``), ``learning_curves`` (the best ``CURVES_SHOWN`` in colour
  when there are more), ``heatmap`` (noise rate × noise type, or the first two varying config keys
  of at most ``HEATMAP_VALUES`` values; never over a search's sampled parameters), ``timeline``;
- ``report.md``, starting with the paper table, embedding the rest; its last section lists the
  pictures left out and why (:mod:`analysis.writeup_pictures`). A picture that cannot be drawn is also
  one line on the console.

The folder is replaced whole: everything is written into a copy of it, ``report.writing`` beside it, which
then takes its place (two renames), so a writer killed midway leaves the previous report (or none) and
that ``.writing`` folder, which ``--status`` names with the command that rebuilds the report, never a
report that looks whole.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from analysis.figures.confusion import CONFUSION_SELECT, load_confusion
from analysis.figures.packing import run_efficiencies, sweep_efficiency
from analysis.figures.plots import plot_confusion
from analysis.figures.search import search_pictures
from analysis.progress import describe_counts, format_duration
from analysis.reading.load import (
    duplicates_line,
    load_experiment,
    resolve_objective,
)
from analysis.reading.oom_rounds import reruns_line
from analysis.reading.pbt_members import pbt_note
from analysis.reading.provenance import writeup_lines as provenance_lines
from analysis.reading.trial_outcomes import trial_counts
from analysis.statistics.select import add_selected
from analysis.tables.best_runs import best_runs, failed, format_table, write_table
from analysis.tables.formatting import short_value
from analysis.tables.paper_format import format_paper_table, write_paper_table
from analysis.tables.search_table import experiment_search_table, format_search_table, search_caption
from analysis.tables.summary import SweepTables, cell_trials, format_summary, sweep_tables
from analysis.writeup_pictures import Pictures, experiment_pictures, experiment_runs, paper_curves_picture
from trainables.experiment import records
from trainables.experiment.objective import Objective


def write_up(
    source: Any,
    out_dir: str | os.PathLike | None = None,
    objective: Objective | Mapping[str, Any] | None = None,
    *,
    formats: tuple[str, ...] = ("png",),
    rows: Sequence[str] | None = None,
    baseline: str | None = "auto",
    bootstrap: bool = False,
) -> Path:
    """Write the write-up of an experiment (or of several, compared) into its report folder and return the folder.

    Every value per trial follows the objective's selection rule (:mod:`trainables.experiment.rules`),
    stated in each table, caption and axis label. The files are listed in this module's docstring.

    Args:
        source: experiment folder, URI, ``ResultGrid``, or a list of them (as for
            :func:`analysis.load_trials`).
        out_dir: the report folder; default ``<experiment>/report`` for one local experiment, else
            ``./reports/<experiment name(s) joined by +>``.
        objective: the validation metric and mode, the test metric of the paper table (none: no paper
            table) and the selection rule: an `Objective`, or the fields asked for, the rest the sweep's
            (:func:`analysis.reading.load.resolve_objective`).
        formats: figure formats, e.g. ``("png", "svg")``; PNG is always written for report.md.
        rows, baseline, bootstrap: as for :func:`analysis.paper_table`.

    Raises:
        ExperimentError: as :func:`analysis.load_trials`, :func:`analysis.reading.load.resolve_objective`
            and :func:`analysis.paper_table` (bad rule, row key or baseline).
    """
    trials, history = load_experiment(source)
    objective = resolve_objective(trials, history, objective)
    metric = objective.metric
    final = Path(out_dir if out_dir is not None else writeup_folder(trials))
    out = _staged(final)
    pictures = Pictures(out, tuple(dict.fromkeys(("png", *formats))))
    ci = [f"{metric}_ci95"] if f"{metric}_ci95" in history.columns else []  # --repeat: each trial's seed interval
    selected = add_selected(trials, history, [metric, *ci], objective)
    table, rule = _write_best_runs(trials, selected, objective, out)
    searched = _write_search_table(selected, objective, rule, out)
    for picture in search_pictures(selected, history, objective):
        pictures.add(picture)
    paper = summary = None
    test_metric = objective.test_metric  # a sweep without one: no paper table (`python -m analysis --paper` has one)
    if test_metric in history.columns and history[test_metric].notna().any():
        tables = sweep_tables(trials, history, objective, rows=rows, baseline=baseline, bootstrap=bootstrap)
        paper, summary = tables.test, _write_paper(trials, tables, out, pictures)
    for picture in experiment_pictures(trials, history, selected, objective):
        pictures.add(picture)
    (out / "report.md").write_text(_markdown(trials, table, objective, rule, paper, summary, searched, pictures))
    _publish(out, final)
    return final


def _staged(final: Path) -> Path:
    """`<final>.writing` beside the report folder `final`: afresh, holding a copy of `final` when it exists (what
    the write-up does not write again, such as `seeds.csv`, stays), where the write-up is written."""
    staging = final.with_name(final.name + records.WRITING)
    shutil.rmtree(staging, ignore_errors=True)  # a writer killed midway
    if final.is_dir():
        shutil.copytree(final, staging)
    else:
        staging.mkdir(parents=True)
    return staging


def _publish(staging: Path, final: Path) -> None:
    """Put the finished `staging` folder in place of `final`: a folder cannot be replaced in one rename, so the
    old one is renamed away first (`<final>.old`), then removed."""
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def _write_best_runs(
    trials: pd.DataFrame, selected: pd.DataFrame, objective: Objective, out: Path
) -> tuple[pd.DataFrame, str]:
    """``best_runs.*``, ``best_runs.txt`` and ``trials.csv``; returns the table and the rule in words."""
    table = best_runs(selected, objective, scope="select")
    write_table(table, out / "best_runs")
    rule = selected.attrs["select_text"][objective.metric]
    duplicates = duplicates_line(trials)
    (out / "best_runs.txt").write_text(
        f"{objective.metric} ({objective.mode}; {rule}), mean over seeds ± 95% CI:\n"
        + format_table(table)
        + (table.attrs["seed_rule"] + "\n" if table.attrs.get("seed_rule") else "")
        + (duplicates + "\n" if duplicates else "")
    )
    trials.to_csv(out / "trials.csv", index=False)
    return table, rule


def _write_search_table(selected: pd.DataFrame, objective: Objective, rule: str, out: Path) -> str | None:
    """``search_table.csv/.md/.tex`` of a search or PBT experiment; returns its Markdown (with its
    caption), None for a grid."""
    table = experiment_search_table(selected, objective)
    if table is None:
        return None
    caption = search_caption(table, rule, table.attrs["scheduler"])
    if pbt_note(selected):
        caption += " " + pbt_note(selected)
    formatter = functools.partial(format_search_table, scheduler=table.attrs["scheduler"])
    write_table(table, out / "search_table", caption=caption, formatter=formatter)
    return caption + " Also as `search_table.csv` and `search_table.tex`.\n\n" + formatter(table, "markdown")


def _write_paper(trials: pd.DataFrame, tables: SweepTables, out: Path, pictures: Pictures) -> str:
    """``paper_table.*``, ``summary.txt``, the noise-rate curves and the confusion matrix; returns the summary."""
    paper = tables.test
    write_paper_table(paper, out / "paper_table")
    summary = format_summary(trials, tables)
    (out / "summary.txt").write_text(summary)
    pictures.add(paper_curves_picture(paper, trials))
    confusion = _best_confusion(trials, tables)
    if confusion is not None:
        pictures.save("confusion", "Confusion matrix of the best configuration", confusion)
    return summary


def writeup_folder(trials: pd.DataFrame) -> Path:
    """The default report folder: ``<experiment>/report`` for one local experiment, else
    ``./reports/<experiment names joined by +>``."""
    paths = trials.attrs.get("experiments") or [trials.attrs["experiment"]]
    if len(paths) == 1 and "://" not in paths[0]:
        return Path(paths[0]) / "report"
    return Path("reports") / "+".join(p.rstrip("/").rsplit("/", 1)[-1] for p in paths)


def _best_confusion(trials: pd.DataFrame, tables: SweepTables):
    """Confusion figure of the best configuration by the validation metric, summed over its
    seeds; None when none of its trials saved ``confusion.json`` (or the rule is last-k)."""
    val, best, select = tables.val, tables.best, tables.val.attrs["select"]
    if select not in CONFUSION_SELECT or best is None:
        return None
    matrices = []
    for trial_dir in cell_trials(trials[~failed(trials)], best, val)["trial_dir"].dropna():
        try:
            matrices.append(load_confusion(trial_dir, select))
        except (FileNotFoundError, ValueError):
            continue
    if not matrices or len({m.shape for m in matrices}) > 1:
        return None
    where = ", ".join(f"{c}={short_value(best[c])}" for c in val.attrs["rows"] + val.attrs["columns"])
    return plot_confusion(
        sum(matrices), f"{where}: clean test set at the {select} epoch, summed over {len(matrices)} seed(s)"
    )


def _overview_lines(trials: pd.DataFrame, objective: Objective, rule: str) -> list[str]:
    """The write-up's bullet list: experiment, trial counts by outcome (the words of `--status`), duplicates,
    out-of-memory re-runs counted in place of their failures, metric, efficiency (per run of the sweep when it ran
    more than once, `efficiency_lines`)."""
    counts = trial_counts(trials)
    return [
        f"- experiment: `{trials.attrs['experiment']}`",
        f"- trials: {counts['total']} ({describe_counts(counts, shown=('finished', 'errored', 'diverged'))})",
        *([f"- {duplicates_line(trials)}"] if duplicates_line(trials) else []),
        *([f"- {reruns}"] if (reruns := reruns_line(trials.attrs.get("oom_reruns") or ())) else []),
        f"- metric: `{objective.metric}` ({objective.mode}); each trial's value: {rule}",
        *([f"- {pbt_note(trials)}"] if pbt_note(trials) else []),
        *efficiency_lines(trials, experiment_runs(trials)),
        "",
    ]


def efficiency_lines(trials: pd.DataFrame, runs: list[tuple[float, str]]) -> list[str]:
    """`- sweep efficiency: 93% (busy slot-time / (slots × makespan))`; for a sweep run several times
    (`runs`: (start, kind) each), the figure of all runs with the gaps between them left out, then
    one line per run (when it started, what it was, its trials, makespan, efficiency, the gap before it)."""
    starts = [start for start, _ in runs] if len(runs) > 1 else None
    efficiency = sweep_efficiency(trials, runs=starts)
    if efficiency != efficiency:
        return ["- sweep efficiency: n/a (no timed trials)"]
    if starts is None:
        return [f"- sweep efficiency: {efficiency:.0%} (busy slot-time / (slots × makespan))"]
    table = run_efficiencies(trials, starts)
    gaps = table["gap_s"].dropna()
    lines = [
        f"- sweep efficiency: {efficiency:.0%} over {len(table)} runs, the {format_duration(gaps.sum())} between them "
        "left out (busy slot-time / (slots × makespan), per run:)"
    ]
    for row in table.itertuples():
        kind = runs[row.run - 1][1]
        gap = f", after a gap of {format_duration(row.gap_s)}" if row.gap_s == row.gap_s else ""
        lines.append(
            f"  - run {row.run} ({kind}, {row.start:%Y-%m-%d %H:%M} UTC{gap}): {row.trials} trials, "
            f"{format_duration(row.makespan_s)}, efficiency {row.efficiency:.0%}"
        )
    return lines


def _markdown(
    trials: pd.DataFrame,
    table: pd.DataFrame,
    objective: Objective,
    rule: str,
    paper: pd.DataFrame | None,
    summary: str | None,
    searched: str | None,
    pictures: Pictures,
) -> str:
    name = " + ".join(
        p.rstrip("/").rsplit("/", 1)[-1] for p in trials.attrs.get("experiments") or [trials.attrs["experiment"]]
    )
    lines = [f"# Report: {name}", ""]
    if paper is not None:
        lines += [
            "## Paper table",
            "",
            format_paper_table(paper, "markdown"),
            "Also as `paper_table.tex` (booktabs) and `paper_table.csv` (with p-values and the 95 % CI of "
            "each difference to the baseline).",
            "",
        ]
    lines += _overview_lines(trials, objective, rule)
    if summary is not None:
        lines += [
            "## Sweep summary",
            "",
            "As printed at the end of the sweep (same numbers as the paper table).",
            "",
            "```text",
            summary.rstrip("\n"),
            "```",
            "",
        ]
    lines += [
        "## Best configurations",
        "",
        f"{objective.metric}: {rule}. Mean over seeds with a 95 % Student-t confidence interval; errored and diverged "
        "trials are counted under *failed* and left out of the statistics. Also as `best_runs.csv` and "
        "`best_runs.tex`." + (f" seeds, decision: {table.attrs['seed_rule']}" if table.attrs.get("seed_rule") else ""),
        "",
        format_table(table, "markdown"),
    ]
    if searched is not None:
        lines += ["## Search", "", searched]
    for title, file, caption in pictures.drawn:
        lines += [f"## {title}", "", *([caption, ""] if caption else []), f"![{title}]({file})", ""]
    if pictures.left_out:
        lines += ["## Pictures left out", "", *(f"- {line}" for line in pictures.left_out), ""]
    lines += provenance_lines(trials.attrs["experiment"])
    return "\n".join(lines)


write_report = write_up  # its first name, kept for notebooks and scripts that call it
