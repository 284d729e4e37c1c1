"""Simulated per-seed results for `benchmarks/seeds_auto.py`: methods whose values at one seed share part of
their deviation, with normal, heavy-tailed, contaminated or skewed noise.

A method's value at seed s of a cell is mu + sqrt(rho) u_s + sqrt(1 - rho) e_{s,method}: u_s is the seed's
draw shared by every method of the cell (its split, noisy labels and initialisation), e the method's own,
both standardised to mean 0 and variance 1, so the value has sd 1 (effects are in seed standard
deviations) and two methods' values at one seed have correlation rho. Method 0 is `effect` ahead of the others.
"""

from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("normal", "t3", "outliers", "lognormal", "unequal")
"""Noise shapes: normal; Student t with 3 degrees of freedom (heavy tails); normal with 5 % of draws 5 times
wider (outliers: a run that diverged half-way, a bad split); lognormal with sigma 1 (skewed: a metric bounded
on one side); normal with the other methods' values `UNEQUAL_SD` times as spread as method 0's (a loss whose
seeds scatter more, as gce's do against ce's in the built-in grid)."""

UNEQUAL_SD = 3.0

OUTLIER_SHARE, OUTLIER_SCALE = 0.05, 5.0


def noise(rng: np.random.Generator, kind: str, shape: tuple) -> np.ndarray:
    """Standardised noise (mean 0, variance 1) of one of `DISTRIBUTIONS`, shape `shape`. Raises ValueError."""
    if kind in ("normal", "unequal"):
        return rng.standard_normal(shape)
    if kind == "t3":
        return rng.standard_t(3, shape) / np.sqrt(3.0)  # the variance of t3 is 3
    if kind == "outliers":
        wide = rng.random(shape) < OUTLIER_SHARE
        z = rng.standard_normal(shape) * np.where(wide, OUTLIER_SCALE, 1.0)
        return z / np.sqrt(1 - OUTLIER_SHARE + OUTLIER_SHARE * OUTLIER_SCALE**2)
    if kind == "lognormal":
        z = np.exp(rng.standard_normal(shape))
        return (z - np.exp(0.5)) / np.sqrt((np.e - 1) * np.e)
    raise ValueError(f"noise {kind!r} must be one of {DISTRIBUTIONS}")


def simulate_values(
    rng: np.random.Generator,
    draws: int,
    effect: float,
    max_seeds: int,
    rho: float = 0.0,
    kind: str = "normal",
    cells: int = 1,
    methods: int = 2,
) -> np.ndarray:
    """Metric values [draws, cells, methods, max_seeds] (module docstring): method 0 `effect` ahead (in method
    0's seed standard deviations)."""
    mu = np.array([effect] + [0.0] * (methods - 1))
    spread = np.array([1.0] + [UNEQUAL_SD if kind == "unequal" else 1.0] * (methods - 1))
    shared = noise(rng, kind, (draws, cells, 1, max_seeds))
    own = noise(rng, kind, (draws, cells, methods, max_seeds))
    return (np.sqrt(rho) * shared + np.sqrt(1 - rho) * own) * spread[:, None] + mu[:, None]
