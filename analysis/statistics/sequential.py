"""Exact group-sequential boundaries for paired t-tests over seeds, calibrated by Monte-Carlo.

A pair of methods is looked at after each common seed, n = min_seeds..max_seeds (N = max_seeds). Under
the null (the paired differences d_1, d_2, ... are i.i.d. N(0, sigma^2)), the joint law of the paired
t-statistics T_n = sqrt(n) mean_n / sd_n over the looks does not depend on sigma: it is the law of the
same statistics of standard normal draws. So it is computed once, by simulating `NULL_PATHS` seeded paths
of N standard normal differences (numpy, vectorised), instead of approximating it by the joint normal law
of z-statistics as Lan & DeMets' recursive integration does (Lan & DeMets 1983, "Discrete sequential
boundaries for clinical trials", Biometrika 70:659; Jennison & Turnbull 2000, "Group Sequential Methods
with Applications to Clinical Trials", ch. 2-3 and 7: boundary shapes and repeated t-tests).

Each look's t-test p-value (`scipy.stats.ttest_1samp`, the data's and the simulated paths' alike) is put
on the z scale, z_n = Phi^-1(1 - p_n/2) two-sided (Phi^-1(1 - p_n) one-sided), and the boundary has a
shape: O'Brien-Fleming's z_n >= c sqrt(N/n) (strict early, lenient late; the default) or Pocock's
z_n >= c. The statistic of a path is S = max over the looks taken of z_n / shape_n, the smallest c at
which it would have crossed, and its sequential p-value is the simulated null probability that S over
*all* planned looks is at least as large: p* = (1 + #{null paths with S >= s}) / (1 + paths) (the
Monte-Carlo p-value of Davison & Hinkley 1997, "Bootstrap Methods", eq. 4.11). A look not taken only
lowers s, so only raises p*; p* only falls as looks are added; and under the null P(p* <= u) <= u for
any data-dependent stopping (up to the Monte-Carlo error), so Holm's correction applies to the p*'s.
The boundary constant c at level alpha is the null law's (1 - alpha) quantile (`boundary`).
"""

from __future__ import annotations

import functools
import math
import os
import warnings

import numpy as np
from scipy import stats

NULL_PATHS = 200_000
"""Simulated null paths per (min_seeds, max_seeds, shape): Monte-Carlo s.e. of p* at 0.05 is 0.0005."""

NULL_SEED = 20231983
"""Seed of the simulated null paths: the same boundaries in every process and every run."""

SHAPES = ("obf", "pocock")


def shape_factors(shape: str, min_seeds: int, max_seeds: int) -> np.ndarray:
    """The boundary's shape at the looks n = min_seeds..max_seeds (shape [K]): the boundary is c times it.

    O'Brien-Fleming (1979): sqrt(N/n); Pocock (1977): 1. Raises ValueError for another shape.
    """
    if shape not in SHAPES:
        raise ValueError(f"boundary shape {shape!r} must be one of {SHAPES}")
    n = np.arange(min_seeds, max_seeds + 1)
    return np.sqrt(max_seeds / n) if shape == "obf" else np.ones(len(n))


def z_scale(p: np.ndarray, two_sided: bool) -> np.ndarray:
    """p-values -> z scale (same shape): Phi^-1(1 - p/2) two-sided, Phi^-1(1 - p) one-sided; NaN stays NaN."""
    return stats.norm.isf(p / 2 if two_sided else p)


@functools.lru_cache(maxsize=32)
def null_law(min_seeds: int, max_seeds: int, shape: str, paths: int = NULL_PATHS) -> tuple[np.ndarray, np.ndarray]:
    """Sorted null values of S = max_n z_n / shape_n over all planned looks, two-sided and one-sided.

    Args:
        min_seeds, max_seeds: the looks n = min_seeds..max_seeds (2 <= min_seeds <= max_seeds).
        shape: "obf" or "pocock" (`shape_factors`).
        paths: simulated null paths (seeded by `NULL_SEED`); about 1.3 s per 2 x 10^5 paths of 8 looks.
    Returns:
        (two_sided, one_sided): float arrays of shape [paths], ascending. Cached per arguments in memory,
        and on disk under the user's cache folder (`cache_file`) when it is writable.
    """
    path = cache_file(min_seeds, max_seeds, shape, paths)
    try:
        with np.load(path) as cached:
            return cached["two_sided"], cached["one_sided"]
    except (OSError, KeyError, ValueError):
        pass  # not cached yet, or unreadable: simulate
    rng = np.random.default_rng(NULL_SEED)
    d = rng.standard_normal((paths, max_seeds))
    factors = shape_factors(shape, min_seeds, max_seeds)
    two, one = np.full(paths, -np.inf), np.full(paths, -np.inf)
    for k, n in enumerate(range(min_seeds, max_seeds + 1)):
        p_two = stats.ttest_1samp(d[:, :n], 0.0, axis=1).pvalue
        p_one = stats.ttest_1samp(d[:, :n], 0.0, axis=1, alternative="greater").pvalue
        two = np.fmax(two, z_scale(p_two, True) / factors[k])
        one = np.fmax(one, z_scale(p_one, False) / factors[k])
    two, one = np.sort(two), np.sort(one)
    try:  # a temporary file renamed over the cache: a reader never sees half of it
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, two_sided=two, one_sided=one)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the in-memory cache still holds it
    return two, one


def cache_file(min_seeds: int, max_seeds: int, shape: str, paths: int = NULL_PATHS) -> str:
    """The disk cache of `null_law`: `$XDG_CACHE_HOME/raysweep` (default `~/.cache/raysweep`), one
    `.npz` per (min_seeds, max_seeds, shape, paths, NULL_SEED)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "raysweep", f"seq_null_{min_seeds}_{max_seeds}_{shape}_{paths}_{NULL_SEED}.npz")


def sequential_p(p_looks: np.ndarray, shape: str, min_seeds: int, max_seeds: int, two_sided: bool) -> np.ndarray:
    """Exact sequential p-values p* of paths of looks (see the module docstring).

    Args:
        p_looks: per-look t-test p-values, shape [..., K] for n = min_seeds..max_seeds; NaN = look not taken.
        two_sided: the p-values are two-sided (else one-sided, `alternative="greater"` or `"less"`).
    Returns:
        p*, shape [...], in [1/(paths+1), 1]; 1 where no look was taken.
    """
    null = null_law(min_seeds, max_seeds, shape)[0 if two_sided else 1]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        scaled = z_scale(np.asarray(p_looks, dtype=float), two_sided) / shape_factors(shape, min_seeds, max_seeds)
        s = np.max(np.where(np.isnan(scaled), -np.inf, scaled), axis=-1)
    above = len(null) - np.searchsorted(null, s, side="left")
    return np.where(np.isneginf(s), 1.0, (1 + above) / (1 + len(null)))


def boundary(alpha: float, shape: str, min_seeds: int, max_seeds: int) -> dict:
    """The boundary at level `alpha` for one two-sided comparison: z_n >= c * shape_n.

    Returns:
        {"c": the null law's (1 - alpha) quantile, "z": the boundary per look (list, n = min..max),
        "paths": simulated paths, "mc_se": Monte-Carlo standard error of the level, sqrt(alpha (1-alpha) / paths)}.
    """
    null = null_law(min_seeds, max_seeds, shape)[0]
    c = float(np.quantile(null, 1 - alpha))
    z = (c * shape_factors(shape, min_seeds, max_seeds)).tolist()
    return {"c": c, "z": z, "paths": len(null), "mc_se": math.sqrt(alpha * (1 - alpha) / len(null))}
