"""Best-run tables: one row per configuration, statistics over seeds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.special import stdtrit  # Student t quantile; much lighter to import than scipy.stats

from analysis.load import SEED_KEY, config_column, metric_column, varying_config_columns

CI_LEVEL = 0.95
"""Level of the confidence intervals (two-sided, Student t over seeds)."""


def failed(trials: pd.DataFrame) -> pd.Series:
    """Boolean Series: the trial errored or diverged (its values are left out of statistics)."""
    return (trials["status"] == "ERROR") | trials["diverged"].astype(bool)


def best_runs(
    trials: pd.DataFrame,
    metric: str,
    mode: str,
    by: Sequence[str] | None = None,
    *,
    scope: str = "last",
    seed: str = SEED_KEY,
) -> pd.DataFrame:
    """Statistics of ``metric`` over seeds, one row per configuration, best first.

    Args:
        trials: a :func:`analysis.load_trials` table.
        metric: reported metric name, e.g. ``"val/acc"``.
        mode: ``"max"`` or ``"min"``: which direction is better.
        by: columns that define a configuration (config keys with or without ``config/``, or
            any column of ``trials``). Default: every config key that varies between trials,
            except the seed key.
        scope: ``"last"`` uses each trial's last reported value; ``"best"`` its best value over
            iterations (``best/<metric>``).
        seed: config key of the seed axis, reported in ``best_seed``.

    Returns:
        DataFrame, one row per configuration sorted by ``mean`` (best first, empty groups
        last), with the ``by`` columns (``config/`` prefix dropped), then

        - ``n``: trials in the statistics (not errored, not diverged, with a finite value),
        - ``n_failed``: errored or diverged trials (counted here, left out of the statistics),
        - ``mean``, ``std`` (sample standard deviation, ddof=1; NaN for n < 2),
        - ``ci95``: half width of the 95 % Student-t confidence interval of the mean,
          ``t(0.975, n-1) * std / sqrt(n)`` (NaN for n < 2), and ``ci95_low``, ``ci95_high``,
        - ``best``, ``best_seed``, ``best_trial``: value, seed and trial name of the best run.

    Raises:
        ExperimentError: no trial reported ``metric``, or a ``by`` column does not exist.
        ValueError: ``mode`` is not ``"max"`` / ``"min"``.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', not {mode!r}")
    value_column = metric_column(trials, metric, scope)
    keys = (
        varying_config_columns(trials, seed)
        if by is None
        else [column if column in trials.columns else config_column(trials, column) for column in by]
    )
    seed_column = f"config/{seed}" if f"config/{seed}" in trials.columns else None

    work = pd.DataFrame(
        {
            "value": pd.to_numeric(trials[value_column], errors="coerce"),
            "failed": failed(trials),
            "seed": trials[seed_column] if seed_column else np.nan,
            "trial": trials["trial_name"],
        }
    )
    for i, key in enumerate(keys):
        work[f"key{i}"] = trials[key]
    key_names = [f"key{i}" for i in range(len(keys))]
    usable = ~work["failed"] & np.isfinite(work["value"])

    rows = []
    groups = work.groupby(key_names, sort=True, dropna=False) if keys else [((), work)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        ok = group[usable.loc[group.index]]
        values = ok["value"].to_numpy(dtype=float)
        n = len(values)
        mean = values.mean() if n else np.nan
        std = values.std(ddof=1) if n > 1 else np.nan
        half = stdtrit(n - 1, 0.5 + CI_LEVEL / 2) * std / math.sqrt(n) if n > 1 else np.nan
        best = ok.loc[ok["value"].idxmax() if mode == "max" else ok["value"].idxmin()] if n else None
        rows.append(
            {
                **dict(zip(keys, key)),
                "n": n,
                "n_failed": int(group["failed"].sum()),
                "mean": mean,
                "std": std,
                "ci95": half,
                "ci95_low": mean - half,
                "ci95_high": mean + half,
                "best": best["value"] if best is not None else np.nan,
                "best_seed": best["seed"] if best is not None else np.nan,
                "best_trial": best["trial"] if best is not None else None,
            }
        )
    table = pd.DataFrame(rows)
    if seed_column and pd.api.types.is_integer_dtype(trials[seed_column]):
        table["best_seed"] = table["best_seed"].astype("Int64")
    table = table.sort_values("mean", ascending=(mode == "min"), na_position="last", kind="stable")
    table = table.rename(columns=lambda c: c[len("config/") :] if c.startswith("config/") else c)
    table.attrs.update(metric=metric, mode=mode, scope=scope)
    return table.reset_index(drop=True)


def format_table(table: pd.DataFrame, style: str = "text", digits: int = 4) -> str:
    """Render a :func:`best_runs` table as text, Markdown or LaTeX.

    Shows the configuration columns, ``n`` (and ``failed`` when any trial failed),
    ``mean ± ci95``, ``std`` and the best seed. Numbers use ``digits`` significant digits.

    Args:
        table: output of :func:`best_runs`.
        style: ``"text"`` (aligned columns for a terminal), ``"markdown"`` or ``"latex"``
            (a ``booktabs`` tabular).

    Raises:
        ValueError: unknown ``style``.
    """
    if style not in ("text", "markdown", "latex"):
        raise ValueError(f"style must be 'text', 'markdown' or 'latex', not {style!r}")
    stat_columns = {"n", "n_failed", "mean", "std", "ci95", "ci95_low", "ci95_high", "best", "best_seed", "best_trial"}
    keys = [c for c in table.columns if c not in stat_columns]
    metric = table.attrs.get("metric", "mean")
    show_failed = "n_failed" in table.columns and table["n_failed"].sum() > 0

    header = [*keys, "n", *(["failed"] if show_failed else []), f"{metric} (mean ± 95% CI)", "std", "best seed"]
    body = []
    for _, row in table.iterrows():
        mean = _number(row["mean"], digits)
        if not pd.isna(row["ci95"]):
            mean += " ± " + _number(row["ci95"], digits)
        body.append(
            [
                *(_cell(row[k], digits) for k in keys),
                str(row["n"]),
                *([str(row["n_failed"])] if show_failed else []),
                mean,
                _number(row["std"], digits),
                _cell(row["best_seed"], digits),
            ]
        )

    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n"
    if style == "latex":

        def esc(text: str) -> str:
            return _latex_escape(text).replace("±", r"$\pm$")

        lines = [
            r"\begin{tabular}{" + "l" * len(keys) + "r" * (len(header) - len(keys)) + "}",
            r"\toprule",
            " & ".join(esc(h) for h in header) + r" \\",
            r"\midrule",
        ]
        lines += [" & ".join(esc(c) for c in cells) + r" \\" for cells in body]
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += [
        "  ".join(c.rjust(w) if i >= len(keys) else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        for cells in body
    ]
    return "\n".join(lines) + "\n"


def write_table(table: pd.DataFrame, path: str | Path) -> list[Path]:
    """Write a :func:`best_runs` table as ``<path>.csv`` (all columns), ``.md`` and ``.tex``.

    ``path`` is the file name without suffix, e.g. ``report/best_runs``. Returns the three paths.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    csv, md, tex = (path.with_name(path.name + suffix) for suffix in (".csv", ".md", ".tex"))
    table.to_csv(csv, index=False)
    md.write_text(format_table(table, "markdown"))
    tex.write_text(format_table(table, "latex"))
    return [csv, md, tex]


def _number(value, digits: int) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}g}"


def _cell(value, digits: int) -> str:
    if isinstance(value, (float, np.floating)):
        return "–" if np.isnan(value) else f"{value:.{digits}g}"
    if isinstance(value, (np.integer,)):
        return str(int(value))
    return "–" if value is None or value is pd.NA else str(value)


_LATEX = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "_": r"\_",
        "#": r"\#",
        "{": r"\{",
        "}": r"\}",
        "$": r"\$",
        "–": "--",
    }
)


def _latex_escape(text: str) -> str:
    return text.translate(_LATEX)
