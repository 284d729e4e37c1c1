"""Exact group-sequential boundaries for the pair tests of `--seeds auto`, calibrated by Monte-Carlo.

A pair of methods is looked at after each common seed, n = min_seeds..max_seeds (N = max_seeds), by the
test of `analysis/statistics/pair_test.py` (paired, two-sample, or the two combined), whose z-value z_n is
its two-sided p-value put on the z scale, z_n = Phi^-1(1 - p_n/2). Under the null, with the methods' values
independent normal with equal variances (rho = 0: the worst case of the combined and two-sample tests
for every rho >= 0, and the paired test's law at every rho; `pair_test`'s docstring), the joint law of
z_min..z_N does not depend on the mean or the variance: it is the law of the same statistics of standard
normal draws. So it is computed once, by simulating `NULL_PATHS` seeded paths of N pairs (numpy and
`scipy.stats`, vectorised), instead of approximating it by the joint normal law of z-statistics as Lan &
DeMets' recursive integration does (Lan & DeMets 1983, "Discrete sequential boundaries for clinical
trials", Biometrika 70:659; Jennison & Turnbull 2000, "Group Sequential Methods with Applications to
Clinical Trials", ch. 2-3 and 7: boundary shapes and repeated t-tests).

The boundary has a shape g_n and crosses at z_n >= c g_n. Shapes: Haybittle-Peto-type ("hp", the default:
g_n = HP_RATIO (N/n)^HP_POWER before the cap and 1 at it, so the looks before the cap are strict and nearly
flat and the last is near the fixed-n test, after Haybittle 1971, Br. J. Radiol. 44:793, and Peto et al.
1976, Br. J. Cancer 34:585; its two constants were chosen by simulation on simulator seed 1001, not the
benchmark's, among ten candidates for the most power at the cap against the fixed 10-seed tests: the looks
before it spend 0.013 of 0.05 and the cap's boundary, c = 2.109 for the combined test, is near the 2.077 of that
test at 10 seeds alone; docs/seeds-auto.md), O'Brien-Fleming's g_n = sqrt(N/n) (1979)
and Pocock's g_n = 1 (1977). The statistic of a path is S = max over the looks taken of z_n / g_n, the
smallest c at which it would have crossed, and its sequential p-value is the simulated null probability
that S over *all* planned looks is at least as large: p* = (1 + #{null paths with S >= s}) / (1 + paths)
(the Monte-Carlo p-value of Davison & Hinkley 1997, "Bootstrap Methods", eq. 4.11). A look not taken only
lowers s, so only raises p*; p* only falls as looks are added; and under the null P(p* <= u) <= u for any
data-dependent stopping (up to the Monte-Carlo error), so Holm's correction applies to the p*'s. The
boundary constant c at level alpha is the null law's (1 - alpha) quantile (`boundary`). TOST's one-sided
paired tests use the one-sided law of the paired test.
"""

from __future__ import annotations

import functools
import math
import os
import warnings

import numpy as np
from scipy import stats

from analysis.statistics.pair_test import look_z

NULL_PATHS = 200_000
"""Simulated null paths per (min_seeds, max_seeds, shape, test): Monte-Carlo s.e. of p* at 0.05 is 0.0005."""

NULL_SEED = 20231983
"""Seed of the simulated null paths: the same boundaries in every process and every run."""

SHAPES = ("hp", "obf", "pocock")
HP_RATIO, HP_POWER = 1.3, 0.3
"""The Haybittle-Peto-type shape: g_n = HP_RATIO (N/n)^HP_POWER before the cap, 1 at it."""

SHAPE_WORDS = {
    "hp": f"c·{HP_RATIO:g}(N/n)^{HP_POWER:g} before the cap and c at it (Haybittle-Peto-type)",
    "obf": "c·sqrt(N/n), O'Brien-Fleming",
    "pocock": "c, Pocock",
}
CACHE_VERSION = 5
"""Bumped when the simulated statistic changes, so an old cache file is never read as the new law."""


def shape_factors(shape: str, min_seeds: int, max_seeds: int) -> np.ndarray:
    """The boundary's shape g_n at the looks n = min_seeds..max_seeds (shape [K]): the boundary is c times it.

    Raises ValueError for a shape not in `SHAPES`.
    """
    if shape not in SHAPES:
        raise ValueError(f"boundary shape {shape!r} must be one of {SHAPES}")
    n = np.arange(min_seeds, max_seeds + 1)
    if shape == "hp":
        return np.where(n < max_seeds, HP_RATIO * (max_seeds / n) ** HP_POWER, 1.0)
    return np.sqrt(max_seeds / n) if shape == "obf" else np.ones(len(n))


def z_scale(p: np.ndarray, two_sided: bool) -> np.ndarray:
    """p-values -> z scale (same shape): Phi^-1(1 - p/2) two-sided, Phi^-1(1 - p) one-sided; NaN stays NaN."""
    return stats.norm.isf(p / 2 if two_sided else p)


@functools.lru_cache(maxsize=32)
def null_law(
    min_seeds: int, max_seeds: int, shape: str, test: str = "paired", paths: int = NULL_PATHS
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted null values of S = max_n z_n / g_n over all planned looks: the test's two-sided law, and the
    one-sided law of the paired test (TOST's).

    Args:
        min_seeds, max_seeds: the looks n = min_seeds..max_seeds (2 <= min_seeds <= max_seeds).
        shape: one of `SHAPES` (`shape_factors`); test: "combined", "paired" or "unpaired" (`pair_test`).
        paths: simulated null paths (seeded by `NULL_SEED`); a few seconds per 2 x 10^5 paths of 8 looks.
    Returns:
        (two_sided, one_sided): float arrays of shape [paths], ascending. Cached per arguments in memory,
        and on disk under the user's cache folder (`cache_file`) when it is writable.
    """
    path = cache_file(min_seeds, max_seeds, shape, test, paths)
    try:
        with np.load(path) as cached:
            return cached["two_sided"], cached["one_sided"]
    except (OSError, KeyError, ValueError):
        pass  # not cached yet, or unreadable: simulate
    rng = np.random.default_rng(NULL_SEED)
    factors = shape_factors(shape, min_seeds, max_seeds)
    two, one = [], []
    for start in range(0, paths, 50_000):  # in chunks: a few hundred MB at most
        x, y = rng.standard_normal((2, min(50_000, paths - start), max_seeds))
        paired = look_z(x, y, "paired", min_seeds, max_seeds)
        tested = paired if test == "paired" else look_z(x, y, test, min_seeds, max_seeds)
        two.append(np.max(tested / factors, axis=-1))
        # TOST's law: the paired test's one-sided z of mean(x - y) > 0, which is the two-sided z signed by t
        sign = np.sign(np.cumsum(x - y, axis=1)[:, min_seeds - 1 :])
        one.append(np.max(sign * paired / factors, axis=-1))
    two, one = np.sort(np.concatenate(two)), np.sort(np.concatenate(one))
    try:  # a temporary file renamed over the cache: a reader never sees half of it
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, two_sided=two, one_sided=one)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the in-memory cache still holds it
    return two, one


def cache_file(min_seeds: int, max_seeds: int, shape: str, test: str = "paired", paths: int = NULL_PATHS) -> str:
    """The disk cache of `null_law`: `$XDG_CACHE_HOME/raysweep` (default `~/.cache/raysweep`), one
    `.npz` per (min_seeds, max_seeds, shape and its constants, test, paths, NULL_SEED, CACHE_VERSION)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    shape = f"hp{HP_RATIO:g}-{HP_POWER:g}" if shape == "hp" else shape  # its constants: a new shape, a new file
    name = f"seq_null_v{CACHE_VERSION}_{min_seeds}_{max_seeds}_{shape}_{test}_{paths}_{NULL_SEED}.npz"
    return os.path.join(root, "raysweep", name)


def sequential_p(
    z_looks: np.ndarray, shape: str, min_seeds: int, max_seeds: int, test: str, two_sided: bool = True
) -> np.ndarray:
    """Exact sequential p-values p* of paths of looks (see the module docstring).

    Args:
        z_looks: per-look z-values, shape [..., K] for n = min_seeds..max_seeds; NaN = look not taken.
            Two-sided: `pair_test.look_z`; one-sided (TOST's paired tests): `z_scale(p, False)`.
        test: the pair test whose law applies (two-sided only; the one-sided law is the paired test's).
    Returns:
        p*, shape [...], in [1/(paths+1), 1]; 1 where no look was taken.
    """
    null = null_law(min_seeds, max_seeds, shape, test)[0 if two_sided else 1]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        scaled = np.asarray(z_looks, dtype=float) / shape_factors(shape, min_seeds, max_seeds)
        s = np.max(np.where(np.isnan(scaled), -np.inf, scaled), axis=-1)
    above = len(null) - np.searchsorted(null, s, side="left")
    return np.where(np.isneginf(s), 1.0, (1 + above) / (1 + len(null)))


def boundary(alpha: float, shape: str, min_seeds: int, max_seeds: int, test: str = "paired") -> dict:
    """The boundary at level `alpha` for one two-sided comparison: z_n >= c * g_n.

    Returns:
        {"c": the null law's (1 - alpha) quantile, "z": the boundary per look (list, n = min..max),
        "paths": simulated paths, "mc_se": Monte-Carlo standard error of the level, sqrt(alpha (1-alpha) / paths)}.
    """
    null = null_law(min_seeds, max_seeds, shape, test)[0]
    c = float(np.quantile(null, 1 - alpha))
    z = (c * shape_factors(shape, min_seeds, max_seeds)).tolist()
    return {"c": c, "z": z, "paths": len(null), "mc_se": math.sqrt(alpha * (1 - alpha) / len(null))}
