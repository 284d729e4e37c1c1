"""The search table: every trial of a search ranked by the metric, with the parameters the search set,
the epochs it ran and how it ended (its outcome: finished, pruned by ASHA, stopped by the time budget, ...).

Input: one row per trial, as ``ResultGrid.get_dataframe()`` gives it or as
:func:`analysis.figures.search.search_frame` makes it from :func:`analysis.load_trials`:

    - the metric column (e.g. ``val/acc``), optionally ``<metric>_ci95`` (half-width of the 95 % CI
      over seeds) and ``num_seeds``;
    - hyperparameters as ``config/<name>`` columns;
    - ``training_iteration`` (or ``iterations``): epochs run; ``ended``: the trial's outcome
      (:mod:`trainables.experiment.outcome`; else its ``outcome``, else what
      :func:`analysis.reading.trial_outcomes.outcome_column` reads);
    - the trial's name: ``trial``, ``trial_name``, the last part of ``logdir``, or ``trial_id``.
Inputs are never modified.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.reading.pbt_members import BEST_EPOCH, pbt_note
from analysis.reading.trial_outcomes import outcome_column
from analysis.tables.formatting import bare, format_number, render_table
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import LEFT_OUT, NOT_RUN, TIME_BUDGET, outcome_words
from trainables.experiment.rules import format_metric, shown_as_percent

ASHA_NAMES = ("AsyncHyperBandScheduler", "ASHAScheduler")


def search_table(
    df: pd.DataFrame,
    objective: Objective = Objective(),
    *,
    params: list[str] | None = None,
    epochs: int | None = None,
) -> pd.DataFrame:
    """All trials, best first by ``objective``; errored, diverged, interrupted trials and those without a value last,
    unranked.

    Args:
        df: one row per trial (the module docstring).
        objective: its metric is the column that ranks, its mode the direction.
        params: the searched parameters (without ``config/``); default every ``config/`` column
            whose value differs between trials.
        epochs: epochs of a full trial, for :func:`analysis.reading.trial_outcomes.outcome_column` when
            ``df`` has no ``ended`` or ``outcome`` column (default: each trial's ``config/epochs``).
    Returns:
        DataFrame with ``rank`` (1, 2, ...; NA unranked), ``trial``, one column per
        parameter (raw values, NaN where a trial did not have it), ``epochs`` (int), ``best_epoch``
        (a PBT member's, when ``df`` has it: :mod:`analysis.reading.pbt_members`), ``ended``,
        ``n_seeds``, ``metric`` and ``<metric>_ci95`` (NaN with one seed or no interval), as logged;
        ``attrs["metric"]``, ``attrs["mode"]``, ``attrs["params"]`` and ``attrs["percent"]``: whether the metric
        is shown x100 in % (`trainables.experiment.rules.shown_as_percent`, as every other table shows it).
    """
    metric, mode = objective.metric, objective.mode
    if params is None:
        params = [bare(c) for c in sorted(df.columns) if c.startswith("config/") and df[c].nunique(dropna=True) > 1]
    values = pd.to_numeric(df[metric], errors="coerce") if metric in df else pd.Series(np.nan, index=df.index)
    values = values.where(np.isfinite(values))
    ended = df["ended"] if "ended" in df else outcome_column(df, epochs)
    rankable = values.where(~ended.isin(LEFT_OUT))  # a failed or stopped trial's last value is not its result
    order = rankable.sort_values(ascending=(mode == "min"), na_position="last", kind="stable").index
    seeds = df["num_seeds"].fillna(1).astype(int) if "num_seeds" in df else pd.Series(1, index=df.index)
    ci = pd.to_numeric(df[f"{metric}_ci95"], errors="coerce") if f"{metric}_ci95" in df else np.nan
    iterations = next((df[c] for c in ("training_iteration", "iterations") if c in df), pd.Series(0, index=df.index))
    out = pd.DataFrame(
        {
            "trial": trial_names(df),
            **{p: df[f"config/{p}"] if f"config/{p}" in df else np.nan for p in params},
            "epochs": pd.to_numeric(iterations, errors="coerce").fillna(0).astype(int),
            **({BEST_EPOCH: df[BEST_EPOCH]} if BEST_EPOCH in df else {}),
            "ended": ended,
            "n_seeds": seeds,
            metric: values,
            f"{metric}_ci95": pd.Series(ci, index=df.index).where(seeds > 1),
        },
        index=df.index,
    ).loc[order]
    ranked = rankable.loc[order].notna().to_numpy()
    out.insert(0, "rank", pd.array(np.where(ranked, np.cumsum(ranked), 0), dtype="Int64"))
    out.loc[~ranked, "rank"] = pd.NA
    out = out.reset_index(drop=True)
    percent = shown_as_percent(metric, values.dropna().tolist())
    out.attrs.update(metric=metric, mode=mode, params=list(params), percent=percent)
    return out


def search_frame(trials: pd.DataFrame, metric: str, scope: str = "select") -> pd.DataFrame:
    """A :func:`analysis.load_trials` table as the one-row-per-trial frame of this module, in the
    order the trials started (the search's order; trial id breaks ties).

    Args:
        trials: the trial table (with ``select/<metric>`` from :func:`analysis.add_selected` for
            ``scope="select"``, and ``select/<metric>_ci95`` when the trials reported it).
        metric: the metric; its ``<scope>/`` column becomes ``metric``.
    Returns:
        DataFrame with ``trial`` (name), ``trial_id``, the ``config/`` columns, ``metric``,
        ``<metric>_ci95`` and ``num_seeds`` where reported, ``training_iteration``, ``ended`` (its ``outcome``),
        ``timestamp`` (Unix seconds of the last result) and ``time_total_s`` (seconds it ran).
    """
    ordered = trials.sort_values(["start_time", "trial_id"], na_position="last", kind="stable")
    frame = pd.DataFrame(
        {
            "trial": ordered["trial_name"],
            "trial_id": ordered["trial_id"],
            **{c: ordered[c] for c in ordered.columns if c.startswith("config/")},
            metric: pd.to_numeric(ordered[f"{scope}/{metric}"], errors="coerce"),
            "training_iteration": ordered["iterations"],
            "ended": ordered["outcome"],
            **({BEST_EPOCH: ordered[BEST_EPOCH]} if BEST_EPOCH in ordered else {}),
            "timestamp": ordered["end_time"].map(lambda t: t.timestamp() if pd.notna(t) else np.nan),
            "time_total_s": ordered["duration_s"],
        }
    )
    for column, source in ((f"{metric}_ci95", f"{scope}/{metric}_ci95"), ("num_seeds", "last/num_seeds")):
        if source in ordered:
            frame[column] = pd.to_numeric(ordered[source], errors="coerce")
    return frame.reset_index(drop=True)


def experiment_search_table(selected: pd.DataFrame, objective: Objective) -> pd.DataFrame | None:
    """The :func:`search_table` of a loaded search or PBT experiment, None for a grid.

    Args:
        selected: :func:`analysis.load_trials` table with ``select/<metric>`` (:func:`analysis.add_selected`)
            and ``attrs["search"]`` (:class:`analysis.reading.search_record.SearchRecord`).
    Returns:
        the table (its parameters: those the search set), ``attrs`` as :func:`search_table` plus
        ``kind``, ``searcher``, ``scheduler``, ``ended_by`` (why the sweep ended: the words of its
        interrupted trials) and ``not_created`` (its planned trials the searcher never made: not run, no row).
    """
    record = selected.attrs.get("search")
    if record is None:
        return None
    frame = search_frame(selected, objective.metric)
    table = search_table(frame, objective, params=[p for p in record.params if f"config/{p}" in frame])
    table.attrs.update(
        kind=record.kind,
        searcher=record.searcher,
        scheduler=record.scheduler,
        ended_by=selected.attrs.get("ended_by"),
        not_created=int(selected.attrs.get("not_created") or 0),
    )
    return table


def trial_names(df: pd.DataFrame) -> pd.Series:
    """Each row's trial name: ``trial``, ``trial_name``, the last part of ``logdir``, ``trial_id``, or 1, 2, ..."""
    for column in ("trial", "trial_name", "logdir", "trial_id"):
        if column in df:
            names = df[column]
            return names.map(lambda p: str(p).rstrip("/").rsplit("/", 1)[-1]) if column == "logdir" else names
    return pd.Series(range(1, len(df) + 1), index=df.index)


def ended_words(outcome: str, scheduler: str | None = None, ended_by: str | None = None) -> str:
    """An outcome in a table's words (`outcome.outcome_words`): ``pruned by ASHA`` when the scheduler is ASHA,
    an interrupted trial by what stopped it (``stopped by the time budget``: the sweep's ``ended_by``)."""
    short = "ASHA" if scheduler in ASHA_NAMES else scheduler
    return outcome_words(str(outcome), ended_by, short)


def format_search_table(table: pd.DataFrame, style: str = "text", scheduler: str | None = None) -> str:
    """A :func:`search_table` as text, Markdown or LaTeX (``analysis.tables.formatting.render_table``):
    rank, trial, parameters (3 significant digits; blank where a trial did not have one), epochs,
    ended, seeds and the metric (``metric_header``: its unit and spread) as :func:`format_mean` writes it."""
    metric, params, percent = table.attrs["metric"], table.attrs["params"], table.attrs.get("percent", False)
    best_epoch = [BEST_EPOCH] if BEST_EPOCH in table else []
    header = [
        "rank",
        "trial",
        *params,
        "epochs",
        *(c.replace("_", " ") for c in best_epoch),
        "ended",
        "n_seeds",
        metric_header(metric, percent, table[f"{metric}_ci95"].notna().any()),
    ]
    body = [
        [
            "–" if pd.isna(row["rank"]) else str(row["rank"]),
            str(row["trial"]),
            *(format_param(row[p]) for p in params),
            str(row["epochs"]),
            *("–" if pd.isna(row[c]) else str(row[c]) for c in best_epoch),
            ended_words(row["ended"], scheduler, table.attrs.get("ended_by")),
            str(row["n_seeds"]),
            format_mean(row[metric], row[f"{metric}_ci95"], percent),
        ]
        for _, row in table.iterrows()
    ]
    return render_table(header, body, 2 + len(params), style)


def search_caption(table: pd.DataFrame, rule: str, scheduler: str | None = None) -> str:
    """The sentence above the search table: how it is ranked and what each end reason means; the trials the
    searcher never made count among the not run (as in every count of the run), though they have no row."""
    counts = dict(table["ended"].value_counts())  # a plain dict: pandas 3 may hand back a read-only array
    never = int(table.attrs.get("not_created") or 0)
    if never:
        counts[NOT_RUN] = counts.get(NOT_RUN, 0) + never
    ended_by = table.attrs.get("ended_by")
    ended = ", ".join(f"{n} {ended_words(reason, scheduler, ended_by)}" for reason, n in counts.items())
    budget = "; stopped by the time budget: the sweep ended before it did" if ended_by == TIME_BUDGET else ""
    return (
        f"{len(table)} trials ranked by {rule} ({table.attrs['mode']}), mean over the seeds of a trial "
        f"± its 95 % CI; trials without a value (errored, diverged, interrupted) last. Ended: {ended}. "
        f"Pruned: the scheduler stopped it early{budget}."
        + (f" {never} of the not run were never made by the searcher: no row." if never else "")
    )


def format_param(value) -> str:
    """A parameter's value in the table: floats to 3 significant digits, blank where the trial had none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.3g}" if isinstance(value, (float, np.floating)) else str(value)


def metric_header(metric: str, percent: bool, spread: bool) -> str:
    """The metric's column header, saying its unit and its spread: ``val_acc (%; ± 95% CI)``, ``val/loss``."""
    said = ["%"] * percent + ["± 95% CI"] * bool(spread)
    return f"{metric} ({'; '.join(said)})" if said else metric


def format_mean(mean, ci, percent: bool = False) -> str:
    """A trial's value ± the 95 % CI over its seeds: ``91.24 ± 1.10`` x100 when ``percent``
    (`trainables.experiment.rules.format_metric`), else ``0.9124 ± 0.011`` (4 significant digits); no ± without
    an interval, ``–`` without a value."""
    if pd.isna(mean):
        return "–"
    number = (lambda v: format_metric(v, True)) if percent else format_number
    return number(mean) + ("" if pd.isna(ci) else " ± " + number(ci))


def search_outcome_lines(experiment: str, objective: Objective, planned: int, k: int = 10) -> list[str]:
    """What a search (or PBT) prints once it ran: its `planned` trials by outcome (the words and counts of its
    progress block, last line, `--status` and its report; those never created: not run), then the `k` best rows
    of its report's search table (`experiment_search_table`: the same ranking, selection rule and outcomes); only
    the first line when no trial has a value to rank (every trial errored, or it was stopped before any result).

    Args:
        experiment: the experiment folder (or URI), read as `python -m analysis` reads it, after the driver
            recorded its end (`driver.json`).
    """
    from analysis.progress import describe_counts
    from analysis.reading.load import load_experiment
    from analysis.reading.trial_outcomes import trial_counts
    from analysis.statistics.select import add_selected
    from trainables.experiment.errors import ExperimentError
    from trainables.experiment.outcome import count_outcomes

    try:
        trials, history = load_experiment(experiment)
    except ExperimentError:  # stopped before its first trial: none created, all `planned` not run
        counts = count_outcomes([], not_created=planned, over=True)
        return [f"{planned} trials: {describe_counts(counts, shown=('finished', 'pruned'))}"]
    counts = trial_counts(trials)  # those never created (driver.json's not_created): not run, as the last line
    lines = [f"{counts['total']} trials: {describe_counts(counts, shown=('finished', 'pruned'))}"]
    metric = objective.metric
    if metric not in history.columns or not history[metric].notna().any():
        return lines
    ci = [f"{metric}_ci95"] if f"{metric}_ci95" in history.columns else []
    table = experiment_search_table(add_selected(trials, history, [metric, *ci], objective), objective)
    best = table[table["rank"].notna()].head(k) if table is not None else []
    if len(best):
        best.attrs = dict(table.attrs)
        lines += [note for note in (pbt_note(trials),) if note]  # a PBT member is not one configuration
        lines.append(format_search_table(best, "text", table.attrs["scheduler"]).rstrip("\n"))
    return lines
