"""Seeds by significance (`--seeds auto`): the sequential, multiplicity-corrected decision of each (cell, method).

The procedure (pure functions; no Ray, no distribution code of our own: the tests are `scipy.stats`'):

- Within a cell, every pair of methods is compared by the **paired** t-test on their per-seed
  differences over the seeds both have (`scipy.stats.ttest_1samp` of the differences against 0,
  two-sided; the same as `ttest_rel`). Seed s gives every method the same split and noise draw.
- **Repeated looks.** A pair is looked at after each new common seed, at n = min_seeds..max_seeds
  (K = max_seeds - min_seeds + 1 planned looks): a group-sequential design (Jennison & Turnbull 2000,
  "Group Sequential Methods with Applications to Clinical Trials"). By default (`boundary="obf"`) the
  boundary is exact: calibrated on the joint null law of the paired t-statistics over the looks, which is
  free of the variance and is simulated once (`analysis/statistics/sequential.py`: 200,000 seeded paths, cached), with
  O'Brien-Fleming's shape z_n >= c sqrt(N/n); `"pocock"` gives Pocock's z_n >= c. The pair's sequential
  p-value p* is that null law's tail at the path's statistic. `boundary="union"` keeps the distribution-free
  union bound over looks with Lan & DeMets (1983, Biometrika 70:659) alpha spending: look k spends
  alpha_k = f(t_k) - f(t_{k-1}), t_k = n_k / max_seeds, with the O'Brien-Fleming-type
  f(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (or Pocock-type, or uniform; `spending`), and
  p* = min_k p_k / w_k with w_k = alpha_k / alpha: under the null P(p* <= u) <= sum_k w_k u = u for any
  correlation of the looks, at the price of power (docs/seeds-auto.md). Both are valid under any
  stopping, and p* only decreases as looks are added.
- **Multiplicity.** Holm's step-down correction (`analysis.statistics.stats.holm`; Holm 1979) over a family of
  comparisons: every pair of methods in one cell (`family="cell"`, the default: a paper table states its
  claims per cell) or in every cell of the sweep (`family="sweep"`); not only those against the cell's
  best, which is chosen by the data, and, with an equivalence margin, every equivalence test too. Holm is
  valid under any dependence and monotone: as p* only decreases with more looks, a claim once made is
  never withdrawn.
- **Equivalence** (`min_effect` D, in the metric's units): TOST, two one-sided tests
  (Schuirmann 1987, J. Pharmacokinet. Biopharm. 15:657): `ttest_1samp(d, -D, alternative="greater")`
  and `ttest_1samp(d, D, alternative="less")`, each made sequential like the pair's test (one-sided);
  its p is the larger of the two.
- **Decisions.** A cell's best method (highest mean, lowest with mode "min") is `best`; each other
  method is `better`/`worse` when its pair with the best is rejected (the sign of the paired mean
  difference says which), `equivalent` when its TOST is rejected, else `undecided`. A method needs
  more seeds while it is the best or undecided against the best, and has fewer than max_seeds.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations

import numpy as np
from scipy import stats

from analysis.statistics import sequential
from analysis.statistics.seed_rule import DECISIONS, SeedRule
from analysis.statistics.stats import holm


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


def look_pvalues(diffs: np.ndarray, rule: SeedRule) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Paired-test p-values at each look.

    Args:
        diffs: per-seed differences of a pair, shape [..., S] in seed order; NaN where a seed is missing
            (only trailing NaNs: seeds are run in order).
    Returns:
        (p_diff, p_low, p_high), each shape [..., K]: the two-sided t-test of mean 0 on the first n
        differences, and TOST's two one-sided tests of mean > -min_effect and < min_effect (None without a
        margin); NaN where fewer than n differences exist. Zero-variance differences: p 0 if their mean is
        not 0 (scipy's), 1 if it is.
    """
    looks = range(rule.min_seeds, rule.max_seeds + 1)
    shape = diffs.shape[:-1] + (len(looks),)
    p_diff = np.full(shape, np.nan)
    p_low, p_high = (np.full(shape, np.nan), np.full(shape, np.nan)) if rule.min_effect else (None, None)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for k, n in enumerate(looks):
            if diffs.shape[-1] < n:
                break
            have = ~np.isnan(diffs[..., :n]).any(axis=-1)
            d = np.nan_to_num(diffs[..., :n])  # masked by `have` below; scipy's NaN path is 8x slower
            p = stats.ttest_1samp(d, 0.0, axis=-1).pvalue
            p_diff[..., k] = np.where(have, np.where(np.isnan(p), 1.0, p), np.nan)
            if rule.min_effect:
                lo = stats.ttest_1samp(d, -rule.min_effect, axis=-1, alternative="greater").pvalue
                hi = stats.ttest_1samp(d, rule.min_effect, axis=-1, alternative="less").pvalue
                p_low[..., k] = np.where(have, np.nan_to_num(lo, nan=1.0), np.nan)
                p_high[..., k] = np.where(have, np.nan_to_num(hi, nan=1.0), np.nan)
    return p_diff, p_low, p_high


def union_p(p_looks: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """p* = min over the looks taken of p_k / w_k, at most 1 (shape [...] from [..., K]); 1 with no look yet.

    Valid under any stopping rule: P(p* <= u) <= sum_k P(p_k <= w_k u) <= u (the union bound).
    """
    scaled = np.where(np.isnan(p_looks), np.inf, p_looks / weights)
    return np.minimum(scaled.min(axis=-1), 1.0)


def pair_pvalues(diffs: np.ndarray, rule: SeedRule) -> tuple[np.ndarray, np.ndarray | None]:
    """Sequential p-values of pairs over the looks taken: the difference test's and TOST's (None without margin).

    Args:
        diffs: as `look_pvalues`, shape [..., S].
    Returns:
        two arrays of shape [...]: with `rule.boundary` "obf" or "pocock", the exact p* of
        `analysis.statistics.sequential.sequential_p` (TOST: the larger of its two one-sided p*'s); with "union",
        `union_p` of the looks' p-values under `look_weights`.
    """
    p_diff, p_low, p_high = look_pvalues(diffs, rule)
    if rule.boundary == "union":
        weights = look_weights(rule)
        tost = union_p(np.fmax(p_low, p_high), weights) if p_low is not None else None
        return union_p(p_diff, weights), tost
    looks = (rule.boundary, rule.min_seeds, rule.max_seeds)
    tost = None
    if p_low is not None:
        tost = np.fmax(sequential.sequential_p(p_low, *looks, False), sequential.sequential_p(p_high, *looks, False))
    return sequential.sequential_p(p_diff, *looks, True), tost


def holm_family(p: np.ndarray, family: str) -> np.ndarray:
    """Holm-adjusted p-values (same shape as p, [..., C cells, tests, pairs]) over each cell's tests
    (`family="cell"`) or over every cell's (`"sweep"`): `analysis.statistics.stats.holm` on the family's axes."""
    keep = p.ndim - 2 if family == "cell" else p.ndim - 3
    return holm(p.reshape(p.shape[:keep] + (-1,)))[0].reshape(p.shape)


def decide_arrays(values: np.ndarray, rule: SeedRule, present: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The decision rule on arrays, vectorised over any leading axes (simulated sweeps).

    Args:
        values: metric values, shape [..., C cells, M methods, S seeds], index = seed; NaN where a
            seed has no result (yet) or a cell lacks a method. Only each method's prefix of seeds
            0, 1, ... without a gap counts (a seed that finished before a lower one waits for it), so
            the look at n seeds always sees the same data however trials finish.
        present: bool [..., C, M], which methods each cell has (default: those with any value).
    Returns:
        arrays of shape [..., C, M]: n, mean, std, diff_vs_best, p_adjusted (NaN for the best and
        absent methods), decision (index into `DECISIONS`; -1 absent), needs_more (bool).
    """
    values = np.asarray(values, dtype=float)
    n_methods = values.shape[-2]
    have = ~np.isnan(values)
    present = have.any(axis=-1) if present is None else np.asarray(present, dtype=bool)
    n = np.minimum(np.cumprod(have, axis=-1).sum(axis=-1), rule.max_seeds)
    v = np.where(np.arange(values.shape[-1]) < n[..., None], values, np.nan)[..., : rule.max_seeds]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = np.nanmean(v, axis=-1), np.nanstd(v, axis=-1, ddof=1)
        pairs = list(combinations(range(n_methods), 2))
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        both = present[..., a] & present[..., b]
        family = [np.where(both, p, np.nan) for p in pair_pvalues(v[..., b, :] - v[..., a, :], rule) if p is not None]
        adjusted = holm_family(np.stack(family, axis=-2), rule.family)  # [..., C, tests, pairs]
        sign = 1.0 if rule.mode == "max" else -1.0
        best = np.argmax(np.where(np.isnan(mean), -np.inf, sign * mean), axis=-1)
        v_best = np.take_along_axis(v, best[..., None, None], axis=-2)
        diff = np.nanmean(np.where(np.isnan(v_best), np.nan, v) - v_best, axis=-1)
    pair_of = np.zeros((n_methods, n_methods), dtype=int)
    for i, (x, y) in enumerate(pairs):
        pair_of[x, y] = pair_of[y, x] = i
    index = pair_of[best[..., None], np.arange(n_methods)]  # [..., C, M]: the pair (best, method)
    p_adj = np.take_along_axis(adjusted[..., 0, :], index, axis=-1)
    p_eq = np.take_along_axis(adjusted[..., 1, :], index, axis=-1) if len(family) > 1 else np.full_like(p_adj, 1)
    is_best = np.arange(n_methods) == best[..., None]
    decision = np.select(
        [~present, is_best, p_adj <= rule.alpha, p_eq <= rule.alpha],
        [-1, 0, np.where(sign * diff > 0, 1, 2), 3],
        default=4,
    )
    p_adj = np.where(is_best | ~present, np.nan, p_adj)
    diff = np.where(is_best, 0.0, diff)
    opened = ((decision == 4) | (present & (n < rule.min_seeds))).any(axis=-1, keepdims=True)
    wants = (decision == 4) | (is_best & opened) | (n < rule.min_seeds)
    needs_more = present & wants & (n < rule.max_seeds)
    return dict(n=n, mean=mean, std=std, diff_vs_best=diff, p_adjusted=p_adj, decision=decision, needs_more=needs_more)


def decide(results: dict, rule: SeedRule) -> list[dict]:
    """The decision of every (cell, method) of a sweep (`decide_arrays` on one sweep).

    Args:
        results: {cell: {method: {seed (int >= 0): metric value}}}; a cell is any hashable (the
            other axes' values). A method with no result yet may be given with an empty dict.
        rule: the `SeedRule`.
    Returns:
        one dict per (cell, method), cells and methods in the order given: cell, method, n (seeds
        counted: the gap-free prefix 0, 1, ..., at most max_seeds), mean, std (ddof 1; NaN with one
        seed), diff_vs_best (paired mean of this method minus the cell's best over the seeds both
        have; 0 for the best), p_adjusted (Holm-adjusted sequential p of the pair with the best; NaN
        for the best), decision (one of `DECISIONS`), needs_more (True: run this method's next seed).
    """
    cells = list(results)
    methods = list(dict.fromkeys(m for c in cells for m in results[c]))
    width = max([rule.max_seeds] + [s + 1 for c in cells for by_seed in results[c].values() for s in by_seed])
    values = np.full((len(cells), len(methods), width), np.nan)
    for i, c in enumerate(cells):
        for j, m in enumerate(methods):
            for s, x in results[c].get(m, {}).items():
                values[i, j, s] = x
    present = np.array([[m in results[c] for m in methods] for c in cells])
    out = decide_arrays(values, rule, present)
    rows = []
    for i, c in enumerate(cells):
        for j, m in enumerate(methods):
            if not present[i, j]:
                continue
            row = {"cell": c, "method": m} | {k: out[k][i, j].item() for k in out if k != "decision"}
            row["decision"] = DECISIONS[out["decision"][i, j]] if out["decision"][i, j] >= 0 else "undecided"
            rows.append(row)
    return rows


def seeds_frame(rows: list[dict], method_axis: str = "method", rule: SeedRule | None = None):
    """`decide`'s rows as the table of `report/seeds.csv`: the cell's axes (from a JSON cell key, or
    a dict), `method`, n, mean, std, diff_vs_best, p_adjusted, decision, then `compare` (the compared
    axis, `method_axis`, also in `frame.attrs["method_axis"]`) and `rule` (`rule.describe()`, "" without)."""
    import json

    import pandas as pd

    out = []
    for r in rows:
        cell = r["cell"] if isinstance(r["cell"], dict) else json.loads(r["cell"])
        out.append(cell | {k: r[k] for k in ("method", "n", "mean", "std", "diff_vs_best", "p_adjusted", "decision")})
    frame = pd.DataFrame(out).assign(compare=method_axis, rule=rule.describe() if rule else "")
    frame.attrs["method_axis"] = method_axis
    return frame
