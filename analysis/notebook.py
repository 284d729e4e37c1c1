"""What the notebooks in ``notebooks/`` call, so that each runs unedited on any experiment: a grid, a command
sweep, a search, a PBT run or a plain Ray Tune experiment (``Tuner(...).fit()`` without raysweep's records).

    experiment = open_experiment(os.environ.get(EXPERIMENT_VARIABLE), {"select": "last"})
    print(experiment.header)
    for picture in experiment_pictures(...): show_picture(picture)   # drawn, or one line saying why not

The objective is the experiment's own (:func:`analysis.reading.load.resolve_objective`: ``raysweep.json``, else
Tune's ``TuneConfig(metric=...)``); an experiment that recorded none and never reported ``val/acc`` is ranked by its
first reported metric, and the header says so. Nothing here computes a number: the tables and figures are
those of ``python -m analysis`` (:mod:`analysis.writeup`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.search import Picture
from analysis.reading.load import load_experiment, reported_metrics, resolve_objective
from analysis.reading.tune_state import latest_experiment
from analysis.statistics.select import add_selected
from analysis.tables.best_runs import best_runs, format_table
from analysis.tables.search_table import (
    experiment_search_table,
    format_search_table,
    search_caption,
    search_frame,
    search_table,
)
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective

EXPERIMENT_VARIABLE = "RAYSWEEP_EXPERIMENT"
"""Environment variable naming the experiment a notebook reads (a folder or URI); unset: the newest under ./runs."""


@dataclasses.dataclass(frozen=True)
class NotebookExperiment:
    """An experiment as a notebook reads it: its tables, the objective and one line per fact the reader needs first."""

    trials: pd.DataFrame  # analysis.load_trials
    history: pd.DataFrame  # analysis.load_history
    selected: pd.DataFrame  # trials with select/<metric>: each trial's value under the objective's rule
    objective: Objective
    header: str  # the experiment, its trials, how they are ranked (and, without a recorded metric, why by this one)


def notebook_objective(
    trials: pd.DataFrame, history: pd.DataFrame, asked: Mapping[str, Any] | None = None
) -> tuple[Objective, str | None]:
    """The objective asked for, else the experiment's (:func:`analysis.reading.load.resolve_objective`), else, for an
    experiment that recorded none and did not report ``val/acc`` (a plain Tune run), its first reported metric.

    Args:
        asked: field -> value (None: the experiment's), e.g. ``{"metric": None, "select": "last"}``.
    Returns:
        the objective, and the line that says the metric was not recorded (None when it was, or was asked for).
    Raises:
        ExperimentError: as ``resolve_objective`` (a metric not reported, a bad mode or rule); no metric reported.
    """
    asked = {name: value for name, value in (asked or {}).items() if value is not None}
    unrecorded = not asked.get("metric") and not trials.attrs.get("metric")
    if not unrecorded or Objective.metric in reported_metrics(trials):
        return resolve_objective(trials, history, asked), None
    metrics = reported_metrics(trials)
    if not metrics:
        raise ExperimentError(f"{trials.attrs.get('experiment')}: no trial reported a metric")
    objective = resolve_objective(trials, history, {**asked, "metric": metrics[0]})
    note = (
        f"the experiment recorded no metric: ranked by its first reported one, {objective.metric} "
        f"({objective.mode}, from its name); set METRIC and MODE to choose (reported: {', '.join(metrics)})"
    )
    return objective, note


def open_experiment(
    experiment: str | None, asked: Mapping[str, Any] | None = None, runs: str = "runs"
) -> NotebookExperiment:
    """Load an experiment for a notebook: ``experiment`` (a folder or URI; None: the newest under ``runs``,
    :func:`analysis.reading.tune_state.latest_experiment`), its objective (:func:`notebook_objective`) and each
    trial's value under the objective's rule (:func:`analysis.add_selected`).

    Raises:
        ExperimentError: as :func:`analysis.load_experiment` and :func:`notebook_objective`.
    """
    source = experiment or latest_experiment(runs)
    trials, history = load_experiment(source)
    objective, note = notebook_objective(trials, history, asked)
    selected = add_selected(trials, history, [objective.metric], objective)
    header = f"{source}: {len(trials)} trials, ranked by {objective.metric} ({objective.mode})"
    header += f"; each trial's value: {selected.attrs['select_text'][objective.metric]}"
    return NotebookExperiment(trials, history, selected, objective, header + (f"\n{note}" if note else ""))


def best_runs_markdown(experiment: NotebookExperiment) -> str:
    """The best-configurations table (:func:`analysis.best_runs` of each trial's value under the objective's rule),
    under one line naming the metric, its mode and the rule."""
    objective, selected = experiment.objective, experiment.selected
    table = best_runs(selected, objective, scope="select")
    rule = selected.attrs["select_text"][objective.metric]
    return f"**{objective.metric}** ({objective.mode}; {rule}), mean over seeds ± 95 % CI\n\n" + format_table(
        table, "markdown"
    )


def search_kind(trials: pd.DataFrame) -> str:
    """One line: a search (its searcher and scheduler), a PBT run, or not a search (what the notebook shows instead)."""
    record = trials.attrs.get("search")
    if record is None:
        return (
            "not a search or PBT run (no searcher or scheduler recorded): below, its trials ranked and their learning "
            "curves (notebooks/noise_grid_analysis.ipynb shows the rest)"
        )
    by = ", ".join(name for name in (record.searcher, record.scheduler) if name)
    return f"a {'PBT run' if record.kind == 'pbt' else 'search'} ({by})"


def search_markdown(experiment: NotebookExperiment) -> str:
    """The search table with its caption (:func:`analysis.tables.search_table.experiment_search_table`); of an
    experiment that is not a search, every trial ranked the same way, its varying config keys as parameters."""
    selected, objective = experiment.selected, experiment.objective
    rule = selected.attrs["select_text"][objective.metric]
    table = experiment_search_table(selected, objective)
    if table is None:
        table = search_table(search_frame(selected, objective.metric), objective)
        return search_caption(table, rule) + "\n\n" + format_search_table(table, "markdown")
    scheduler = table.attrs["scheduler"]
    return search_caption(table, rule, scheduler) + "\n\n" + format_search_table(table, "markdown", scheduler)


def show_picture(picture: Picture) -> Figure | None:
    """Draw a picture for a notebook cell to display, or print one line saying why it is left out (or could
    not be drawn: the error, never a blank figure) and return None."""
    if picture.draw is None:
        print(f"{picture.name} left out: {picture.why}")
        return None
    try:
        figure = picture.draw()
    except Exception as error:  # as a write-up does: one figure that cannot be drawn, the notebook goes on
        print(f"{picture.name} not drawn: {type(error).__name__}: {error}")
        return None
    if picture.caption:
        print(picture.caption)
    return figure
