"""AdaStop (Mathieu et al. 2024, "AdaStop: adaptive statistical testing for sound comparisons of Deep RL
agents", TMLR; the `adastop` package on PyPI, a dev dependency) on many simulated comparisons at once.

`adastop.MultipleAgentsComparator` decides one comparison in about a second (a Python loop over its
permutations), too slow for 20,000 simulated draws per scenario, so `adastop_arrays` repeats what its
`partial_compare` does (adastop 0.1.3) in numpy over a leading axis of draws, and `check_against_package`
runs the package itself on some of the same draws and requires the same decisions and seeds from both.
What it does, for two methods with `n` seeds per interim and `K` interims (beta 0: no early acceptance):

- interim k (k = 0..K-1) sees the first (k+1) n seeds of each method; its statistic is
  T_k = (k+1) |mean(x) - mean(y)| over them;
- its permutation law: every split of each block of 2n values (n seeds of each method) into two groups
  of n, the path value being the sum over blocks of the splits' mean differences (signed), enumerated
  when there are fewer than B = 10,000 such paths (`math.comb(2n, n) ** K < B`: 7,776 for n 2, K 5; the
  only case this module supports, where the package is deterministic);
- paths that crossed an earlier boundary (|value| > that boundary) are dropped; the boundary b_k is the
  smallest sorted path value whose upper tail, counted over all comb(2n, n)^(k+1) paths, keeps the level
  spent within alpha (k+1) / K; T_k > b_k rejects ("larger" or "smaller" by the sign), otherwise the
  level taken by b_k is spent and the next interim follows; at the last one an open comparison is "equal".

The boundary is the upper quantile of the *signed* path values while T_k is an absolute value, so each
interim's two-sided level is about twice what it spends: the false-claim rates the benchmark measures
for AdaStop at alpha 0.05 are about 0.1. They are reported as measured, beside AdaStop at the smaller
alpha whose error matches the rule's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

B = 10_000
"""The permutation budget of `MultipleAgentsComparator` (its default)."""

CHUNK = 256
"""Draws per vectorised pass of `adastop_arrays`."""


def adastop_arrays(x: np.ndarray, y: np.ndarray, n: int, K: int, alpha: float) -> dict[str, np.ndarray]:
    """AdaStop's decisions on many two-method comparisons (`partial_compare` of adastop 0.1.3, vectorised).

    Args:
        x, y: the two methods' values, shape [draws, >= n K] in seed order.
        n: seeds per method per interim; K: interims (the cap is n K seeds per method).
        alpha: AdaStop's level.
    Returns:
        {"decision": int [draws], +1 "larger" (x above y), -1 "smaller", 0 "equal"; "seeds": int [draws],
        seeds per method when it stopped}.
    Raises:
        ValueError: comb(2n, n)^K >= B (the package then samples permutations at random; not repeated here).
    """
    splits = list(itertools.combinations(range(2 * n), n))
    if len(splits) ** K >= B:
        raise ValueError(f"n={n}, K={K}: {len(splits)}^{K} permutation paths >= {B}; only enumerated laws are repeated")
    if len(x) > CHUNK:  # a few thousand paths per draw: chunks keep the arrays in memory and cache
        parts = [adastop_arrays(x[i : i + CHUNK], y[i : i + CHUNK], n, K, alpha) for i in range(0, len(x), CHUNK)]
        return {key: np.concatenate([part[key] for part in parts]) for key in ("decision", "seeds")}
    chosen = np.array(splits)
    rest = np.array([[i for i in range(2 * n) if i not in s] for s in splits])
    decision, seeds = np.zeros(len(x), dtype=int), np.full(len(x), n * K)
    live = np.arange(len(x))  # the draws still open; their permutation paths follow
    paths, alive = np.zeros((len(x), 1)), np.ones((len(x), 1), dtype=bool)
    spent, bound = np.zeros(len(x)), np.full(len(x), np.inf)
    for k in range(K):
        if not len(live):  # every comparison decided
            break
        block = np.concatenate([x[live, k * n : (k + 1) * n], y[live, k * n : (k + 1) * n]], axis=1)
        chosen_mean, rest_mean = block[:, chosen].mean(axis=-1), block[:, rest].mean(axis=-1)  # [live, splits]
        alive = alive & (np.abs(paths) <= bound[:, None])  # paths that crossed an earlier boundary drop out
        # (path + mean of the chosen) - mean of the rest: the package's order of operations, to the last bit (a
        # path can equal the statistic, and then rounding decides whether it crosses)
        paths = (paths[:, None, :] + chosen_mean[:, :, None] - rest_mean[:, :, None]).reshape(len(live), -1)
        alive = np.repeat(alive[:, None, :], len(splits), axis=1).reshape(len(live), -1)
        total, level = len(splits) ** (k + 1), alpha * (k + 1) / K
        count = alive.sum(axis=1)
        # the boundary is the r-th largest alive path value for the largest r with spent + r / total <= level
        # (the package's first admissible sorted value); r / total is the package's tail value to the float
        guess = np.floor((level - spent) * total).astype(int) + 1
        tries = np.minimum(guess, count - 1)[:, None] - np.arange(3)
        ok = (tries >= 0) & (tries <= count[:, None] - 1) & (spent[:, None] + tries / total <= level)
        rank = np.where(ok.any(axis=1), np.max(np.where(ok, tries, -1), axis=1), -1)
        top = -np.partition(-np.where(alive, paths, -np.inf), max(rank.max(), 0), axis=1)[:, : max(rank.max(), 0) + 1]
        top = -np.sort(-top, axis=1)  # the largest alive values, descending
        bound = np.where(rank >= 0, top[np.arange(len(live)), np.maximum(rank, 0)], np.inf)
        m = (k + 1) * n
        stat = (k + 1) * (x[live, :m].mean(axis=1) - y[live, :m].mean(axis=1))
        reject = np.abs(stat) > bound
        decision[live[reject]] = np.where(stat[reject] > 0, 1, -1)
        seeds[live[reject]] = m
        spent = spent + np.where(rank >= 0, np.maximum(rank, 0) / total, 0.0)
        keep = ~reject
        live, paths, alive, spent, bound = live[keep], paths[keep], alive[keep], spent[keep], bound[keep]
    return {"decision": decision, "seeds": seeds}


def adastop_package(x: np.ndarray, y: np.ndarray, n: int, K: int, alpha: float) -> tuple[int, int]:
    """One comparison by the `adastop` package itself: (decision +1/-1/0, seeds per method when it stopped).

    x, y: shape [>= n K]. Raises ImportError naming the dev extra when the package is missing.
    """
    try:
        from adastop import MultipleAgentsComparator
    except ImportError as error:
        raise ImportError("AdaStop's column needs the adastop package: pip install -e '.[dev]'") from error
    comparator = MultipleAgentsComparator(n=n, K=K, B=B, alpha=alpha, seed=0)
    for k in range(K):
        comparator.partial_compare({"x": x[: (k + 1) * n], "y": y[: (k + 1) * n]}, verbose=False)
        if comparator.is_finished:
            break
    decision = next(iter(comparator.decisions.values()))
    return {"larger": 1, "smaller": -1, "equal": 0}[decision], comparator.n_iters["x"]


def check_against_package(x: np.ndarray, y: np.ndarray, n: int, K: int, alpha: float) -> int:
    """Run the package on every draw of x, y ([draws, n K]) and compare with `adastop_arrays`.

    Returns the number of draws checked. Raises AssertionError naming the first draw that differs.
    """
    fast = adastop_arrays(x, y, n, K, alpha)
    for i in range(len(x)):
        got = adastop_package(x[i], y[i], n, K, alpha)
        want = (int(fast["decision"][i]), int(fast["seeds"][i]))
        if got != want:
            raise AssertionError(f"draw {i}: adastop gives (decision, seeds) {got}, the numpy repetition {want}")
    return len(x)


def alpha_for_error(errors: dict[float, float], target: float) -> float:
    """The largest AdaStop alpha of `errors` ({alpha: measured false-claim rate}) whose rate is at most
    `target` (the rule's, measured on the same draws); the smallest alpha tried when none is."""
    within = [a for a, e in errors.items() if e <= target]
    return max(within) if within else min(errors)


def cap_seeds(n: int, K: int) -> int:
    """Seeds per method at AdaStop's last interim."""
    return math.prod((n, K))
