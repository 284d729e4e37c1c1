"""The sequential p-values of one pair of methods over the looks of `--seeds auto`, and the Holm family.

A pair is looked at after each common seed, n = min_seeds..max_seeds (K = max_seeds - min_seeds + 1 planned
looks): a group-sequential design (Jennison & Turnbull 2000, "Group Sequential Methods with Applications to
Clinical Trials"). With an exact boundary ("hp", "obf", "pocock") the pair's sequential p-value p* is the
tail of the simulated null law of its test (`analysis/statistics/sequential.py`; the test:
`analysis/statistics/pair_test.py`). `boundary="union"` keeps the distribution-free union bound over looks
of the paired test with Lan & DeMets (1983, Biometrika 70:659) alpha spending: look k spends
alpha_k = f(t_k) - f(t_{k-1}), t_k = n_k / max_seeds, with the O'Brien-Fleming-type
f(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (or Pocock-type, or uniform; `spending`), and p* = min_k p_k / w_k
with w_k = alpha_k / alpha: under the null P(p* <= u) <= sum_k w_k u = u for any correlation of the looks.
Both are valid under any stopping, and p* only decreases as looks are added.

Equivalence (`min_effect` D): TOST, two one-sided paired tests (Schuirmann 1987, J. Pharmacokinet.
Biopharm. 15:657), `ttest_1samp(d, -D, alternative="greater")` and `ttest_1samp(d, D, alternative="less")`
on the paired differences, each made sequential on the paired test's one-sided law; its p is the larger.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.statistics import sequential
from analysis.statistics.pair_test import conditional_power, look_z
from analysis.statistics.seed_rule import SeedRule
from analysis.statistics.stats import holm

FUTILITY_FROM = 0.7
"""Futility is looked at from this fraction of the cap on (7 seeds of 10): earlier, a small z says little."""


def look_weights(rule: SeedRule) -> np.ndarray:
    """w_k = alpha_k / alpha for the looks n = min_seeds..max_seeds (shape [K], sums to 1).

    Lan & DeMets (1983) spending functions at information fraction t = n / max_seeds: Pocock-type
    f(t) = alpha ln(1 + (e-1) t), O'Brien-Fleming-type f(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)),
    uniform: the same share per look. The first look spends f(t_1).
    """
    n = np.arange(rule.min_seeds, rule.max_seeds + 1)
    if rule.spending == "uniform":
        return np.full(len(n), 1 / len(n))
    t = n / rule.max_seeds
    if rule.spending == "pocock":
        f = np.log1p((math.e - 1) * t)
    else:
        z = stats.norm.isf(rule.alpha / 2)
        f = 2 * stats.norm.sf(z / np.sqrt(t)) / rule.alpha
    return np.diff(np.concatenate([[0.0], f]))


def tost_pvalues(diffs: np.ndarray, rule: SeedRule) -> tuple[np.ndarray, np.ndarray]:
    """TOST's two one-sided paired tests at each look: mean > -min_effect and mean < min_effect.

    Args:
        diffs: per-seed differences of a pair, shape [..., S] in seed order; NaN where a seed is missing.
    Returns:
        (p_low, p_high), each shape [..., K]; NaN where fewer than n differences exist; no spread: 1.
    """
    looks = range(rule.min_seeds, rule.max_seeds + 1)
    p_low, p_high = np.full(diffs.shape[:-1] + (len(looks),), np.nan), np.full(diffs.shape[:-1] + (len(looks),), np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for k, n in enumerate(looks):
            if diffs.shape[-1] < n:
                break
            have = ~np.isnan(diffs[..., :n]).any(axis=-1)
            d = np.nan_to_num(diffs[..., :n])  # masked by `have`; scipy's NaN path is 8x slower
            lo = stats.ttest_1samp(d, -rule.min_effect, axis=-1, alternative="greater").pvalue
            hi = stats.ttest_1samp(d, rule.min_effect, axis=-1, alternative="less").pvalue
            p_low[..., k] = np.where(have, np.nan_to_num(lo, nan=1.0), np.nan)
            p_high[..., k] = np.where(have, np.nan_to_num(hi, nan=1.0), np.nan)
    return p_low, p_high


def union_p(p_looks: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """p* = min over the looks taken of p_k / w_k, at most 1 (shape [...] from [..., K]); 1 with no look yet.

    Valid under any stopping rule: P(p* <= u) <= sum_k P(p_k <= w_k u) <= u (the union bound).
    """
    scaled = np.where(np.isnan(p_looks), np.inf, p_looks / weights)
    return np.minimum(scaled.min(axis=-1), 1.0)


@dataclass(frozen=True)
class PairEvidence:
    """What the looks so far say about pairs of methods (arrays of one shape, [...])."""

    p: np.ndarray  # sequential p* of "no difference" (1 before the first look)
    p_tost: np.ndarray | None  # sequential p* of "a difference of at least min_effect" (None without a margin)
    power: np.ndarray  # conditional power at the last look taken (`pair_test.conditional_power`; NaN: none)
    futile: np.ndarray  # bool: from FUTILITY_FROM of the cap on, power below the rule's futility threshold


def pair_evidence(a: np.ndarray, b: np.ndarray, rule: SeedRule) -> PairEvidence:
    """The evidence of pairs over the looks taken.

    Args:
        a, b: the two methods' values, shape [..., S] in seed order (NaN where a seed has no result).
    Returns:
        `PairEvidence`: with `rule.boundary` "hp", "obf" or "pocock" the exact p* of
        `sequential.sequential_p` on `rule.pair_test`'s law (TOST: the larger of its two one-sided p*'s, on
        the paired test's one-sided law); with "union", `union_p` of the paired looks' p-values under
        `look_weights`. Futility is not looked at with an equivalence margin (equivalence may still come).
    """
    shape, lo, hi = rule.boundary, rule.min_seeds, rule.max_seeds
    z = look_z(a, b, rule.pair_test, lo, hi)
    p_low = p_high = None
    if rule.min_effect:
        p_low, p_high = tost_pvalues(b - a, rule)
    if shape == "union":
        weights = look_weights(rule)
        p = union_p(2 * stats.norm.sf(z), weights)
        tost = union_p(np.fmax(p_low, p_high), weights) if p_low is not None else None
        c = stats.norm.isf(rule.alpha * weights[-1] / 2)
    else:
        p = sequential.sequential_p(z, shape, lo, hi, rule.pair_test)
        tost = None
        if p_low is not None:
            low, high = (sequential.z_scale(q, False) for q in (p_low, p_high))
            tost = np.fmax(*(sequential.sequential_p(z1, shape, lo, hi, "paired", False) for z1 in (low, high)))
        c = sequential.boundary(rule.alpha, shape, lo, hi, rule.pair_test)["z"][-1]
    taken = (~np.isnan(z)).sum(axis=-1)
    last = np.take_along_axis(z, np.maximum(taken - 1, 0)[..., None], axis=-1)[..., 0]
    n = lo + taken - 1
    power = np.where(taken > 0, conditional_power(np.where(taken > 0, last, np.nan), n, hi, c), np.nan)
    futile = (taken > 0) & (n >= FUTILITY_FROM * hi) & (n < hi) & (power < rule.futility) & (not rule.min_effect)
    return PairEvidence(p=p, p_tost=tost, power=power, futile=futile)


def holm_family(p: np.ndarray, family: str) -> np.ndarray:
    """Holm-adjusted p-values (same shape as p, [..., C cells, tests, pairs]) over each cell's tests
    (`family="cell"`) or over every cell's (`"sweep"`): `analysis.statistics.stats.holm` on the family's axes."""
    keep = p.ndim - 2 if family == "cell" else p.ndim - 3
    return holm(p.reshape(p.shape[:keep] + (-1,)))[0].reshape(p.shape)
