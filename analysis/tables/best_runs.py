"""Best-run tables: one row per configuration, statistics over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.reading.load import SEED_KEY, config_column, metric_column, varying_config_columns
from analysis.reading.trial_outcomes import outcome_column
from analysis.statistics.seed_marks import attach_decisions, decision_mark
from analysis.statistics.stats import cell_stats
from analysis.tables.formatting import bare, format_number, latex_escape, render_table
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import LEFT_OUT
from trainables.experiment.rules import format_metric, shown_as_percent


def failed(trials: pd.DataFrame) -> pd.Series:
    """Boolean Series: the trial errored (`no metric` included), diverged, or did not end by itself
    (interrupted, not run): its values are left out of statistics."""
    return outcome_column(trials).isin(LEFT_OUT)


def best_runs(
    trials: pd.DataFrame,
    objective: Objective,
    by: Sequence[str] | None = None,
    *,
    scope: str = "last",
    seed: str = SEED_KEY,
) -> pd.DataFrame:
    """Statistics of ``objective.metric`` over seeds, one row per configuration, best first by
    ``objective.mode``.

    Args:
        trials: a :func:`analysis.load_trials` table.
        objective: the reported metric (e.g. ``"val/acc"``) and its direction.
        by: columns that define a configuration (config keys with or without ``config/``, or
            any column of ``trials``). Default: every config key that varies between trials,
            except the seed key.
        scope: ``"last"`` uses each trial's last reported value; ``"best"`` its best value over
            iterations (``best/<metric>``); ``"select"`` the value under the objective's selection
            rule (:func:`analysis.add_selected`).
        seed: config key of the seed axis, reported in ``best_seed``.

    Returns:
        DataFrame, one row per configuration sorted by ``mean`` (best first, empty groups
        last), with the ``by`` columns (``config/`` prefix dropped), then

        - ``n``: trials in the statistics (not errored, not diverged, with a finite value),
        - ``n_failed``: errored or diverged trials (counted here, left out of the statistics),
        - ``mean``, ``std`` (sample standard deviation, ddof=1; NaN for n < 2),
        - ``ci95``: half width of the 95 % Student-t confidence interval of the mean,
          ``t(0.975, n-1) * std / sqrt(n)`` (NaN for n < 2), and ``ci95_low``, ``ci95_high``,
        - ``best``, ``best_seed``, ``best_trial``: value, seed and trial name of the best run,
        - of a ``--seeds auto`` sweep, ``seeds_n`` and ``decision`` (``attrs["seed_rule"]`` states
          the rule; :func:`analysis.statistics.seed_marks.attach_decisions`).

        Values as logged; ``attrs["percent"]``: whether tables show them x100 in %
        (`trainables.experiment.rules.shown_as_percent`, as every other table of the run).

    Raises:
        ExperimentError: no trial reported the metric, or a ``by`` column does not exist.
    """
    metric, mode = objective.metric, objective.mode
    value_column = metric_column(trials, metric, scope)
    keys = (
        varying_config_columns(trials, seed)
        if by is None
        else [column if column in trials.columns else config_column(trials, column) for column in by]
    )
    seed_column = f"config/{seed}" if f"config/{seed}" in trials.columns else None
    work = _per_trial(trials, value_column, keys, seed_column)
    table = cell_stats(work, keys, "_value", "_usable", lambda ok, group: _best_run(ok, group, mode))
    table["ci95_low"], table["ci95_high"] = table["mean"] - table["ci95"], table["mean"] + table["ci95"]
    table = table[[*keys, *_STAT_COLUMNS]]
    if seed_column and pd.api.types.is_integer_dtype(trials[seed_column]):
        table["best_seed"] = table["best_seed"].astype("Int64")
    table = table.sort_values("mean", ascending=(mode == "min"), na_position="last", kind="stable")
    table = table.rename(columns=bare)
    percent = shown_as_percent(metric, work.loc[work["_usable"], "_value"].tolist())
    table.attrs.update(metric=metric, mode=mode, scope=scope, percent=percent)
    return attach_decisions(table.reset_index(drop=True), trials.attrs)


_STAT_COLUMNS = ["n", "n_failed", "mean", "std", "ci95", "ci95_low", "ci95_high", "best", "best_seed", "best_trial"]


def _per_trial(trials: pd.DataFrame, value_column: str, keys: list[str], seed_column: str | None) -> pd.DataFrame:
    """One row per trial: its configuration, value, seed, name, and whether it failed or is usable."""
    work = pd.DataFrame(
        {
            "_value": pd.to_numeric(trials[value_column], errors="coerce"),
            "_failed": failed(trials),
            "_seed": trials[seed_column] if seed_column else np.nan,
            "_trial": trials["trial_name"],
            **{key: trials[key] for key in keys},
        }
    )
    work["_usable"] = ~work["_failed"] & np.isfinite(work["_value"])
    return work


def _best_run(ok: pd.DataFrame, group: pd.DataFrame, mode: str) -> dict:
    """The failed-trial count of a configuration and its best run's value, seed and trial name."""
    best = ok.loc[ok["_value"].idxmax() if mode == "max" else ok["_value"].idxmin()] if len(ok) else None
    return {
        "n_failed": int(group["_failed"].sum()),
        "best": best["_value"] if best is not None else np.nan,
        "best_seed": best["_seed"] if best is not None else np.nan,
        "best_trial": best["_trial"] if best is not None else None,
    }


def format_table(table: pd.DataFrame, style: str = "text", digits: int = 4) -> str:
    """Render a :func:`best_runs` table as text, Markdown or LaTeX.

    Shows the configuration columns, ``n`` (and ``failed`` when any trial failed),
    ``mean ± ci95``, ``std`` and the best seed. Numbers use ``digits`` significant digits; the metric's
    mean, interval and std x100 with two decimals where ``attrs["percent"]`` (its header says ``%``).

    Args:
        table: output of :func:`best_runs`.
        style: ``"text"`` (aligned columns for a terminal), ``"markdown"`` or ``"latex"``
            (a ``booktabs`` tabular). A ``--seeds auto`` table gets a ``seeds, decision`` column
            (:func:`analysis.statistics.seed_marks.decision_mark`); :func:`table_caption` states the rule.

    Raises:
        ValueError: unknown ``style``.
    """
    keys = [c for c in table.columns if c not in _STAT_COLUMNS and c not in ("seeds_n", "decision", "seeds_beats")]
    metric = table.attrs.get("metric", "mean")
    show_failed = "n_failed" in table.columns and table["n_failed"].sum() > 0
    marks = bool(table.attrs.get("seed_rule"))  # --seeds auto: each row's n and decision vs its cell's best
    percent = table.attrs.get("percent", False)
    unit = "%; " if percent else ""
    header = [*keys, "n", *(["failed"] if show_failed else []), f"{metric} ({unit}mean ± 95% CI)", "std", "best seed"]
    header += ["seeds, decision"] if marks else []
    body = []

    def number(value) -> str:
        return format_number(value, digits) if not percent or pd.isna(value) else format_metric(value, True)

    for _, row in table.iterrows():
        mean = number(row["mean"])
        if not pd.isna(row["ci95"]):
            mean += " ± " + number(row["ci95"])
        body.append(
            [
                *(format_number(row[k], digits) for k in keys),
                str(row["n"]),
                *([str(row["n_failed"])] if show_failed else []),
                mean,
                number(row["std"]),
                format_number(row["best_seed"], digits),
                *([decision_mark(row) or "–"] if marks else []),
            ]
        )
    return render_table(header, body, len(keys), style)


def table_caption(table: pd.DataFrame) -> str:
    """The sentence under a :func:`best_runs` table: its statistics and, for a ``--seeds auto`` sweep, the
    stopping rule (``attrs["seed_rule"]``, with the family of its claims)."""
    rule = table.attrs.get("seed_rule")
    text = "Mean over seeds with a 95 % Student-t confidence interval; failed trials are left out."
    return text + (f" seeds, decision: {rule}" if rule else " No significance test.")


def write_table(
    table: pd.DataFrame, path: str | Path, *, caption: str | None = None, formatter=format_table
) -> list[Path]:
    """Write a table as ``<path>.csv`` (all columns), ``.md`` and ``.tex`` (each with its caption
    above the table; a LaTeX comment in ``.tex``).

    Args:
        table: a :func:`best_runs` table, or another table with its own ``formatter``.
        path: the file name without suffix, e.g. ``report/best_runs``.
        caption: default :func:`table_caption` (of a :func:`best_runs` table).
        formatter: ``(table, style) -> str`` for ``"markdown"`` and ``"latex"``; default :func:`format_table`.
    Returns:
        the three paths.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    caption = table_caption(table) if caption is None else caption
    csv, md, tex = (path.with_name(path.name + suffix) for suffix in (".csv", ".md", ".tex"))
    table.to_csv(csv, index=False)
    md.write_text(caption + "\n\n" + formatter(table, "markdown"))
    tex.write_text("% " + latex_escape(caption) + "\n" + formatter(table, "latex"))
    return [csv, md, tex]
