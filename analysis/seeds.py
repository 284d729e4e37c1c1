"""Seeds by significance (`--seeds auto`): the sequential, multiplicity-corrected decision of each (cell, method).

The procedure (pure functions; no Ray, no distribution code of our own: the tests are `scipy.stats`'):

- Within a cell, every pair of methods is compared by the **paired** t-test on their per-seed
  differences over the seeds both have (`scipy.stats.ttest_1samp` of the differences against 0,
  two-sided; the same as `ttest_rel`). Seed s gives every method the same split and noise draw.
- **Repeated looks.** A pair is looked at after each new common seed, at n = min_seeds..max_seeds
  (K = max_seeds - min_seeds + 1 planned looks). This is a group-sequential design with alpha
  spending (Lan & DeMets 1983, "Discrete sequential boundaries for clinical trials", Biometrika
  70:659): look k may spend alpha_k = f(t_k) - f(t_{k-1}) of the level, t_k = n_k / max_seeds, with
  Lan-DeMets' Pocock-type function f(t) = alpha ln(1 + (e - 1) t) (or the O'Brien-Fleming-type one,
  or uniform). The spent alphas are combined by the union bound (Bonferroni over looks) instead of
  Lan-DeMets' recursive integration over the joint law of the statistics: that needs the
  statistics' correlation (known for z-tests, not for t-tests at 2-9 degrees of freedom) and
  distribution code; the union bound is exactly valid for any correlation and any data-dependent
  stopping, at the price of some conservatism. Concretely the pair's sequential p-value is
  p* = min_k p_k / w_k with w_k = alpha_k / alpha: under the null, P(p* <= u) <= sum_k w_k u = u.
  Pocock-type spending is the default because it spends early, where clear cells should stop.
- **Multiplicity.** Holm's step-down correction (Holm 1979, "A simple sequentially rejective
  multiple test procedure", Scand. J. Statist. 6:65) over all comparisons of the sweep: every pair
  of methods in every cell (not only those against the cell's best, which is chosen by the data),
  and, with an equivalence margin, every equivalence test too. Holm is valid under any dependence,
  and monotone: as p* only decreases with more looks, a claim once made is never withdrawn.
- **Equivalence** (`min_effect` D, in the metric's units): TOST, two one-sided tests
  (Schuirmann 1987, J. Pharmacokinet. Biopharm. 15:657): `ttest_1samp(d, -D, alternative="greater")`
  and `ttest_1samp(d, D, alternative="less")`; its p is the larger of the two.
- **Decisions.** A cell's best method (highest mean, lowest with mode "min") is `best`; each other
  method is `better`/`worse` when its pair with the best is rejected (the sign of the paired mean
  difference says which), `equivalent` when its TOST is rejected, else `undecided`. A method needs
  more seeds while it is the best or undecided against the best, and has fewer than max_seeds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy import stats

DECISIONS = ("best", "better", "worse", "equivalent", "undecided")
SPENDING = ("pocock", "obf", "uniform")


@dataclass(frozen=True)
class SeedRule:
    """The stopping rule of `--seeds auto`."""

    alpha: float = 0.05  # family-wise error rate over the whole sweep, all looks included
    min_seeds: int = 3  # first look: every method of a cell gets this many seeds before any decision
    max_seeds: int = 10  # the cap: an undecided comparison stops here
    min_effect: float | None = None  # equivalence margin D in the metric's units (None: no equivalence claims)
    mode: str = "max"  # "max": higher metric is better; "min": lower
    spending: str = "pocock"  # alpha spending function over the looks: pocock, obf or uniform

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha={self.alpha} must be in (0, 1)")
        if not 2 <= self.min_seeds <= self.max_seeds:
            raise ValueError(
                f"min_seeds={self.min_seeds}, max_seeds={self.max_seeds}: need 2 <= min_seeds <= max_seeds"
            )
        if self.min_effect is not None and not self.min_effect > 0:
            raise ValueError(f"min_effect={self.min_effect} must be > 0 (in the metric's units)")
        if self.mode not in ("max", "min") or self.spending not in SPENDING:
            raise ValueError(f"mode={self.mode!r} must be max or min; spending={self.spending!r} one of {SPENDING}")

    def describe(self) -> str:
        """One sentence stating the stopping rule, for under a table."""
        margin = f"; equivalent: TOST within ±{self.min_effect:g}" if self.min_effect else ""
        return (
            f"Seeds by significance: paired t-tests against each cell's best method, looked at after each seed "
            f"from {self.min_seeds} to {self.max_seeds}, {self.spending} alpha spending (Lan & DeMets 1983, "
            f"union bound), Holm-corrected over all comparisons (family-wise alpha {self.alpha:g}){margin}; "
            f"n = seeds run, undecided = no claim at the cap."
        )


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


def look_pvalues(diffs: np.ndarray, rule: SeedRule) -> tuple[np.ndarray, np.ndarray | None]:
    """Paired-test p-values at each look.

    Args:
        diffs: per-seed differences of a pair, shape [..., S] in seed order; NaN where a seed is missing
            (only trailing NaNs: seeds are run in order).
    Returns:
        (p_diff, p_tost), each shape [..., K]: the two-sided t-test of mean 0 on the first n
        differences, and TOST's p within ±min_effect (None without a margin); NaN where fewer than
        n differences exist. Zero-variance differences: p 0 if their mean is not 0 (scipy's), 1 if it is.
    """
    looks = range(rule.min_seeds, rule.max_seeds + 1)
    shape = diffs.shape[:-1] + (len(looks),)
    p_diff, p_tost = np.full(shape, np.nan), np.full(shape, np.nan) if rule.min_effect else None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for k, n in enumerate(looks):
            if diffs.shape[-1] < n:
                break
            d = diffs[..., :n]
            have = ~np.isnan(d).any(axis=-1)
            p = stats.ttest_1samp(d, 0.0, axis=-1).pvalue
            p_diff[..., k] = np.where(have, np.where(np.isnan(p), 1.0, p), np.nan)
            if rule.min_effect:
                lo = stats.ttest_1samp(d, -rule.min_effect, axis=-1, alternative="greater").pvalue
                hi = stats.ttest_1samp(d, rule.min_effect, axis=-1, alternative="less").pvalue
                p_tost[..., k] = np.where(have, np.fmax(np.nan_to_num(lo, nan=1.0), np.nan_to_num(hi, nan=1.0)), np.nan)
    return p_diff, p_tost


def sequential_p(p_looks: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """p* = min over the looks taken of p_k / w_k, at most 1 (shape [...] from [..., K]); 1 with no look yet.

    Valid under any stopping rule: P(p* <= u) <= sum_k P(p_k <= w_k u) <= u (the union bound).
    """
    scaled = np.where(np.isnan(p_looks), np.inf, p_looks / weights)
    return np.minimum(scaled.min(axis=-1), 1.0)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm (1979) adjusted p-values along the last axis (same shape): reject where adjusted <= alpha.

    Step-down: the i-th smallest of m p-values is multiplied by m - i (i from 0), then a running
    maximum keeps the order. (scipy.stats has no Holm; this is the textbook formula, not a distribution.)
    """
    p = np.asarray(p, dtype=float)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(m))
    ranked = np.minimum(np.maximum.accumulate(ranked, axis=-1), 1.0)
    out = np.empty_like(ranked)
    np.put_along_axis(out, order, ranked, axis=-1)
    return out


def _pair_diffs(a: dict, b: dict, rule: SeedRule) -> np.ndarray:
    """b - a over the seeds both have, in seed order (at most max_seeds of them)."""
    common = sorted(set(a) & set(b))[: rule.max_seeds]
    return np.array([b[s] - a[s] for s in common], dtype=float)


def decide(results: dict, rule: SeedRule) -> list[dict]:
    """The decision of every (cell, method) of a sweep.

    Args:
        results: {cell: {method: {seed: metric value}}}; a cell is any hashable (the other axes' values).
        rule: the `SeedRule`.
    Returns:
        one dict per (cell, method), cells and methods in the order given: cell, method, n (seeds),
        mean, std (ddof 1; NaN with one seed), diff_vs_best (paired mean of this method minus the
        cell's best over the seeds both have; 0 for the best), p_adjusted (Holm-adjusted sequential
        p of the pair with the best; NaN for the best), decision (one of `DECISIONS`), needs_more
        (True: give this method its next seed).
    """
    weights = look_weights(rule)
    pairs = [(cell, a, b) for cell, methods in results.items() for a, b in combinations(list(methods), 2)]
    p_diff, p_tost, mean_d = [], [], []
    for cell, a, b in pairs:
        d = _pair_diffs(results[cell][a], results[cell][b], rule)
        pd_, pt = look_pvalues(d, rule)
        p_diff.append(sequential_p(pd_, weights))
        p_tost.append(sequential_p(pt, weights) if pt is not None else np.nan)
        mean_d.append(d.mean() if len(d) else np.nan)
    family = np.array(p_diff + ([p for p in p_tost] if rule.min_effect else []), dtype=float)
    adjusted = holm(family) if len(family) else family
    by_pair = {
        (cell, a, b): (adjusted[i], adjusted[len(pairs) + i] if rule.min_effect else np.nan, mean_d[i])
        for i, (cell, a, b) in enumerate(pairs)
    }
    rows = []
    for cell, methods in results.items():
        rows += _cell_rows(cell, methods, by_pair, rule)
    return rows


def _cell_rows(cell, methods: dict, by_pair: dict, rule: SeedRule) -> list[dict]:
    """`decide`'s rows of one cell, from the adjusted p-values of its pairs."""
    sign = 1 if rule.mode == "max" else -1
    means = {m: float(np.mean(list(v.values()))) if v else np.nan for m, v in methods.items()}
    best = max((m for m in methods if not math.isnan(means[m])), key=lambda m: sign * means[m], default=None)
    rows = []
    for m, values in methods.items():
        row = {"cell": cell, "method": m, "n": len(values), "mean": means[m]}
        row["std"] = float(np.std(list(values.values()), ddof=1)) if len(values) > 1 else np.nan
        if m == best or best is None:
            row |= {"diff_vs_best": 0.0, "p_adjusted": np.nan, "decision": "best", "equiv_p": np.nan}
        else:
            p, p_eq, d = by_pair[(cell, best, m)] if (cell, best, m) in by_pair else by_pair[(cell, m, best)]
            d = d if (cell, best, m) in by_pair else -d  # by_pair holds b - a: make it m - best
            claim = "better" if sign * d > 0 else "worse"
            decision = claim if p <= rule.alpha else "equivalent" if p_eq <= rule.alpha else "undecided"
            row |= {"diff_vs_best": float(d), "p_adjusted": float(p), "decision": decision, "equiv_p": p_eq}
        rows.append(row)
    open_ = any(r["decision"] == "undecided" for r in rows) or any(r["n"] < rule.min_seeds for r in rows)
    for r in rows:
        undecided = r["decision"] == "undecided" or (r["decision"] == "best" and open_)
        r["needs_more"] = r["n"] < rule.max_seeds and (undecided or r["n"] < rule.min_seeds)
        del r["equiv_p"]
    return rows
