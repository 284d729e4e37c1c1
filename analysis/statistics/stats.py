"""Statistics over seeds: n, mean, std and confidence intervals, paired tests, Holm's correction."""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from trainables.experiment.confidence import CI_LEVEL, t_half_width  # the one t-quantile (scipy.stats.t)

BOOTSTRAP_METHOD = "BCa"
"""``scipy.stats.bootstrap`` method of :func:`bootstrap_ci`: bias-corrected and accelerated
(Efron 1987, "Better bootstrap confidence intervals", JASA 82(397))."""

BOOTSTRAP_RESAMPLES = 9999
"""Resamples of :func:`bootstrap_ci` (scipy's default)."""


def seed_stats(values: Sequence[float], level: float = CI_LEVEL) -> dict:
    """n, mean, std and the CI half width of one configuration's values over seeds.

    Args:
        values: one value per seed (finite; leave failed runs out before).
        level: confidence level of ``ci95`` (0.95 gives the 95 % interval the name says).

    Returns:
        ``{"n", "mean", "std", "ci95"}``: ``mean`` NaN when n = 0; ``std`` the sample standard
        deviation (ddof = 1), NaN for n < 2; ``ci95`` the half width of the Student-t interval
        of the mean (:func:`t_half_width`), NaN for n < 2.
    """
    v = np.asarray(values, dtype=float)
    n = len(v)
    std = float(v.std(ddof=1)) if n > 1 else math.nan
    return {"n": n, "mean": float(v.mean()) if n else math.nan, "std": std, "ci95": t_half_width(std, n, level)}


def cell_stats(
    work: pd.DataFrame,
    keys: list[str],
    value: str,
    usable: str,
    extra: Callable[[pd.DataFrame, pd.DataFrame], dict] | None = None,
) -> pd.DataFrame:
    """:func:`seed_stats` per cell: one row per group of ``work`` by ``keys``.

    Args:
        work: one row per trial, with the ``keys`` columns, the ``value`` column (float) and a
            boolean ``usable`` column (the value enters the statistics).
        keys: columns that make a cell (groups sorted, NaN kept as a group); [] = one cell.
        extra: ``extra(usable_rows, all_rows)`` -> more columns of the cell (counts of failed
            trials, the best seed, ...).

    Returns:
        DataFrame with ``keys``, ``n``, ``mean``, ``std``, ``ci95`` and the ``extra`` columns.
    """
    rows = []
    groups = work.groupby(keys, sort=True, dropna=False) if keys else [((), work)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        ok = group[group[usable].astype(bool)]
        stats = seed_stats(ok[value].to_numpy(dtype=float))
        rows.append({**dict(zip(keys, key)), **stats, **(extra(ok, group) if extra else {})})
    return pd.DataFrame(rows)


def paired_test(values: Sequence[float], baseline: Sequence[float], level: float = CI_LEVEL) -> dict:
    """Paired comparison of a method with a baseline over the same seeds.

    Args:
        values, baseline: the two methods' values, position i from the same seed (same noise
            draw), equal lengths.
        level: confidence level of the interval of the mean difference.

    Returns:
        dict with ``n_pairs``; ``diff_mean`` (mean of values − baseline); ``diff_ci95_low`` and
        ``diff_ci95_high``: ``diff_mean ±`` :func:`t_half_width` of the paired differences;
        ``p_ttest`` (two-sided paired t-test, ``scipy.stats.ttest_rel``); ``p_wilcoxon``
        (two-sided Wilcoxon signed-rank, Wilcoxon 1945, ``scipy.stats.wilcoxon``; NaN when
        every difference is 0); ``test`` in words. With fewer than 3 pairs no test is made:
        the p-values and interval are NaN and ``test`` says so. The p-values are uncorrected;
        :func:`holm` corrects a table's worth of them.
    """
    a, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    d = a - b
    n = len(d)
    out = {"n_pairs": n, "diff_mean": d.mean() if n else np.nan}
    out.update(diff_ci95_low=np.nan, diff_ci95_high=np.nan, p_ttest=np.nan, p_wilcoxon=np.nan)
    if n < 3:
        return {**out, "test": f"no test possible: {n} paired seed(s), fewer than 3"}
    from scipy import stats  # slow to import: only when a test is made

    half = t_half_width(d.std(ddof=1), n, level)
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


def holm(pvalues: Sequence[float] | np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down correction of a family of p-values (Holm 1979, "A simple sequentially
    rejective multiple test procedure", Scand. J. Statist. 6(2)); controls the family-wise error
    rate at ``alpha`` under any dependence. scipy has no Holm (``false_discovery_control`` is
    Benjamini-Hochberg/Yekutieli), hence these few lines; the one Holm of the project.

    With the m finite p-values sorted, p(1) ≤ … ≤ p(m): reject H(1), …, H(j) while
    p(j) ≤ alpha / (m − j + 1), stop at the first that is not. Equivalently, the adjusted value
    p̃(j) = max over i ≤ j of min(1, (m − i + 1) · p(i)) is ≤ alpha.

    Args:
        pvalues: p-values, shape [..., m]: one family per last-axis row (vectorised over leading
            axes); NaN for comparisons not made (they are not counted in m).
        alpha: family-wise error rate.

    Returns:
        ``(adjusted, reject)``: arrays of the input's shape; adjusted p-values (NaN where the
        input is NaN) and booleans (False where NaN).
    """
    p = np.asarray(pvalues, dtype=float)
    missing = ~np.isfinite(p)
    m = (~missing).sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(missing, np.inf, p), axis=-1, kind="stable")  # missing sort last
    ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(p.shape[-1]))
    ranked = np.minimum(np.fmax.accumulate(ranked, axis=-1), 1.0) if p.size else ranked
    adjusted = np.empty_like(ranked)
    np.put_along_axis(adjusted, order, ranked, axis=-1)
    adjusted = np.where(missing, np.nan, adjusted)
    return adjusted, np.where(missing, False, adjusted <= alpha)


def bootstrap_ci(
    values: Sequence[float],
    level: float = CI_LEVEL,
    *,
    method: str = BOOTSTRAP_METHOD,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Bootstrap confidence interval of the mean over seeds (``scipy.stats.bootstrap``).

    Args:
        values: one value per seed.
        level: confidence level.
        method: ``"BCa"`` (bias-corrected and accelerated, Efron 1987) or ``"percentile"``
            (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13).
        n_resamples: bootstrap resamples.
        seed: seed of the resampling, so a table is reproducible.

    Returns:
        ``(low, high)``; NaN, NaN for fewer than 2 values or when every value is equal (no
        spread to resample). With few seeds (3-5) a bootstrap interval is too narrow: it cannot
        see beyond the values observed; read it beside the Student-t interval.
    """
    v = np.asarray(values, dtype=float)
    if len(v) < 2 or np.all(v == v[0]):
        return math.nan, math.nan
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa on a few values warns of a degenerate distribution
        result = stats.bootstrap(
            (v,),
            np.mean,
            confidence_level=level,
            method=method,
            n_resamples=n_resamples,
            rng=np.random.default_rng(seed),
        )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
