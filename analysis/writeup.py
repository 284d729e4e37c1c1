"""The write-up of an experiment: its tables, its figures and a ``report.md`` that embeds them, in its
report folder (``<experiment>/report``: the folder and ``report.md`` keep their names, users' paths
depend on them; in the code, "report" is only Tune's ``tune.report``).

What :func:`write_up` writes:

- ``paper_table.md/.tex/.csv`` (:func:`analysis.paper_table` of the objective's test metric, methods
  × noise type × noise rate, Holm-corrected tests against ``baseline``) and ``summary.txt`` (the
  console text of :func:`analysis.sweep_summary`, same numbers), when some trial reported it;
- ``best_runs.csv/.md/.tex`` (:func:`analysis.best_runs` of the objective's metric under its rule;
  ``best_runs.txt`` is the console rendering the CLI prints), ``trials.csv``;
- figures, in each of ``formats``: ``noise_rate_curves`` (the paper table vs noise rate, 95 % CI
  bands), ``confusion`` (clean-test confusion matrix summed over the seeds of the best
  configuration by the metric, only when its trials saved ``confusion.json``),
  ``learning_curves``, ``metric_vs_noise_rate`` (when the config has ``noise_rate``),
  ``heatmap`` (noise rate × noise type, or the first two varying config keys), ``timeline``;
- ``report.md``, starting with the paper table, embedding the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from analysis.figures.confusion import CONFUSION_SELECT, load_confusion
from analysis.figures.curves import plot_learning_curves, plot_metric_vs_noise_rate, plot_paper_curves
from analysis.figures.packing import sweep_efficiency
from analysis.figures.plots import plot_confusion, plot_heatmap, plot_timeline, save_figure
from analysis.reading.load import (
    ExperimentError,
    config_column,
    duplicates_line,
    load_experiment,
    resolve_objective,
    varying_config_columns,
)
from analysis.reading.provenance import writeup_lines as provenance_lines
from analysis.statistics.select import add_selected
from analysis.tables.best_runs import best_runs, failed, format_table, write_table
from analysis.tables.paper_format import format_paper_table, write_paper_table
from analysis.tables.summary import SweepTables, cell_trials, format_summary, sweep_tables
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
    out = Path(out_dir if out_dir is not None else writeup_folder(trials))
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, str] = {}

    def save(name: str, title: str, fig) -> None:
        save_figure(fig, out / name, tuple(dict.fromkeys(("png", *formats))))
        figures[title] = f"{name}.png"

    selected = add_selected(trials, history, [objective.metric], objective)
    table, rule = _write_best_runs(trials, selected, objective, out)
    paper = summary = None
    test_metric = objective.test_metric  # a sweep without one: no paper table (`python -m analysis --paper` has one)
    if test_metric in history.columns and history[test_metric].notna().any():
        tables = sweep_tables(trials, history, objective, rows=rows, baseline=baseline, bootstrap=bootstrap)
        paper, summary = tables.test, _write_paper(trials, tables, out, save)
    _figures(trials, history, selected, objective, save)
    (out / "report.md").write_text(_markdown(trials, table, objective, rule, paper, summary, figures))
    return out


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


def _write_paper(trials: pd.DataFrame, tables: SweepTables, out: Path, save) -> str:
    """``paper_table.*``, ``summary.txt``, the noise-rate curves and the confusion matrix; returns the summary."""
    paper = tables.test
    write_paper_table(paper, out / "paper_table")
    summary = format_summary(trials, tables)
    (out / "summary.txt").write_text(summary)
    if "noise_rate" in paper.attrs["columns"]:
        save("noise_rate_curves", f"{paper.attrs['metric']} vs noise rate", plot_paper_curves(paper))
    confusion = _best_confusion(trials, tables)
    if confusion is not None:
        save("confusion", "Confusion matrix of the best configuration", confusion)
    return summary


def _figures(trials, history, selected, objective: Objective, save) -> None:
    """Learning curves, metric vs noise rate, heatmap and timeline."""
    metric = objective.metric
    save("learning_curves", "Learning curves", plot_learning_curves(history, trials, metric))
    if _has(trials, "noise_rate"):
        figure = plot_metric_vs_noise_rate(selected, objective, scope="select")
        save("metric_vs_noise_rate", f"{metric} vs noise rate", figure)
    axes = _heatmap_axes(trials)
    if axes:
        save("heatmap", f"{metric} over {axes[0]} × {axes[1]}", plot_heatmap(selected, metric, *axes, scope="select"))
    save("timeline", "Trial timeline", plot_timeline(trials))


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
    where = ", ".join(f"{c}={best[c]}" for c in val.attrs["rows"] + val.attrs["columns"])
    return plot_confusion(
        sum(matrices), f"{where}: clean test set at the {select} epoch, summed over {len(matrices)} seed(s)"
    )


def _has(trials: pd.DataFrame, key: str) -> bool:
    try:
        config_column(trials, key)
        return True
    except ExperimentError:
        return False


def _heatmap_axes(trials: pd.DataFrame) -> tuple[str, str] | None:
    varying = varying_config_columns(trials)
    if (
        _has(trials, "noise_rate")
        and _has(trials, "noise_type")
        and {"config/noise_rate", "config/noise_type"} <= set(varying)
    ):
        return "noise_rate", "noise_type"
    return (varying[0], varying[1]) if len(varying) >= 2 else None


def _overview_lines(trials: pd.DataFrame, objective: Objective, rule: str) -> list[str]:
    """The write-up's bullet list: experiment, trial counts by status, duplicates, metric, efficiency."""
    counts = trials["status"].value_counts()
    status = ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    diverged = int(trials["diverged"].sum())
    efficiency = sweep_efficiency(trials)
    return [
        f"- experiment: `{trials.attrs['experiment']}`",
        f"- trials: {len(trials)} ({status}; {diverged} diverged)",
        *([f"- {duplicates_line(trials)}"] if duplicates_line(trials) else []),
        f"- metric: `{objective.metric}` ({objective.mode}); each trial's value: {rule}",
        f"- sweep efficiency: {efficiency:.0%} (busy slot-time / (slots × makespan))"
        if efficiency == efficiency
        else "- sweep efficiency: n/a (no timed trials)",
        "",
    ]


def _markdown(
    trials: pd.DataFrame,
    table: pd.DataFrame,
    objective: Objective,
    rule: str,
    paper: pd.DataFrame | None,
    summary: str | None,
    figures: dict,
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
    for title, file in figures.items():
        lines += [f"## {title}", "", f"![{title}]({file})", ""]
    lines += provenance_lines(trials.attrs["experiment"])
    return "\n".join(lines)


write_report = write_up  # its first name, kept for notebooks and scripts that call it
