"""The test of one pair of methods at each look of `--seeds auto`: paired, two-sample, or the two combined.

Seed s of a cell gives every method the same split, noise draw and initialisation, so the methods' values
at seed s share part of their deviation: with correlation rho between two methods at one seed, the paired
t-test (`scipy.stats.ttest_rel`; Student 1908) removes the shared part and is the test to use when rho is
large, while when rho is 0 the seed pairing brings nothing and the two-sample t-test (`scipy.stats.ttest_ind`,
Student's pooled form; Welch's statistic is the same with equal seeds) is stronger: its variance estimate has
2(n-1) degrees of freedom instead of n-1 (at 10 seeds and a 1-sd gap, fixed-n power 0.56 against 0.51).

The combined test (`"combined"`, the default) takes, at each look, the larger of the two tests' z-values
(each two-sided p-value put on the z scale, z = Phi^-1(1 - p/2)). Its null law is simulated at rho = 0 with
equal variances (`analysis/statistics/sequential.py`), and that is the worst case for every rho >= 0:
write the pair as A = (x + y)/2 and D = x - y; under the null, with equal variances, A and D are
independent normals, the paired t depends on D alone, and the two-sample t equals
mean(D) / sqrt((s_D^2 + 4 s_A^2) / (2n)), which only shrinks as A's spread grows; a larger rho scales A's
spread up against D's (var A / var D = (1 + rho) / (4 (1 - rho))), so with D and the standardised A held
fixed every path's statistic is at most its value at rho = 0, and a boundary calibrated there keeps its
level at any rho >= 0 (conservatively above 0). The price: at rho = 0 the combined test is weaker than
the two-sample test alone, and at large rho weaker than the paired test alone (the null law's upper
quantile is that of a maximum of two); `benchmarks/seeds_auto.py` measures both. A negative rho (a seed
that helps one method hurting the other) is outside this guarantee; the paired test (`"paired"`) holds
for any rho.

This is the "max-t" combination of two tests calibrated on their joint null law (Westfall & Young 1993,
"Resampling-Based Multiple Testing", ch. 2), here with the law simulated rather than resampled.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats


def look_z(a: np.ndarray, b: np.ndarray, test: str, min_seeds: int, max_seeds: int) -> np.ndarray:
    """Two-sided z-values of the pair's test at the looks n = min_seeds..max_seeds.

    Args:
        a, b: the two methods' values, shape [..., S] in seed order, position s from seed s; NaN where a
            seed has no result (only trailing NaNs count: a look at n needs the first n of both).
        test: "combined", "paired" or "unpaired" (module docstring).
    Returns:
        z, shape [..., K], K = max_seeds - min_seeds + 1: Phi^-1(1 - p/2) of the look's two-sided p-value
        (the larger of the two tests' with "combined"); NaN where fewer than n seeds of both exist.
        Values with no spread (every difference equal): p 0 if their mean difference is not 0, else 1.
    """
    looks = range(min_seeds, max_seeds + 1)
    z = np.full(a.shape[:-1] + (len(looks),), np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for k, n in enumerate(looks):
            if a.shape[-1] < n:
                break
            have = ~(np.isnan(a[..., :n]).any(axis=-1) | np.isnan(b[..., :n]).any(axis=-1))
            x, y = np.nan_to_num(a[..., :n]), np.nan_to_num(b[..., :n])  # masked by `have`; scipy's NaN path is slow
            p = np.ones(have.shape)
            if test in ("combined", "paired"):
                p = np.fmin(p, _p(stats.ttest_rel(x, y, axis=-1).pvalue))
            if test in ("combined", "unpaired"):
                p = np.fmin(p, _p(stats.ttest_ind(x, y, axis=-1).pvalue))
            z[..., k] = np.where(have, stats.norm.isf(p / 2), np.nan)
    return z


def _p(p: np.ndarray) -> np.ndarray:
    """scipy's p-values with NaN (no spread and no difference) as 1."""
    return np.where(np.isnan(p), 1.0, p)


def conditional_power(z: np.ndarray, n: np.ndarray, max_seeds: int, c: float) -> np.ndarray:
    """The chance that a comparison now at z (two-sided z-value at n seeds) ends above the boundary c at the
    cap if the difference seen so far were the true one (stochastic curtailment under the current trend:
    Lan, Simon & Halperin 1982, "Stochastically curtailed tests in long-term clinical trials", Sequential
    Analysis 1:207; Jennison & Turnbull 2000, ch. 10): Phi((z / sqrt(t) - c) / sqrt(1 - t)), t = n / max_seeds.

    Args:
        z, n: same shapes; NaN z (no look yet) gives NaN. c: the last look's boundary on the z scale.
    Returns:
        conditional power, the shape of z; 1 at the cap (t = 1) where z >= c, else 0 there.
    """
    t = np.asarray(n, dtype=float) / max_seeds
    with np.errstate(all="ignore"):
        drift = (np.asarray(z) / np.sqrt(t) - c) / np.sqrt(np.maximum(1 - t, 0.0))
    return np.where(np.isnan(z), np.nan, stats.norm.cdf(drift))
