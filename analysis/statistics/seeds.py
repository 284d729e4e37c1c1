"""Seeds by significance (`--seeds auto`): the sequential, multiplicity-corrected decision of each (cell, method).

The procedure (pure functions; no Ray, no distribution code of our own: the tests are `scipy.stats`'):

- Within a cell, **every pair of methods** is compared, at each look n = min_seeds..max_seeds (the seeds both
  have), by the pair test of `analysis/statistics/pair_test.py`: by default the larger z of the paired
  t-test's (`ttest_rel`: seed s gives every method the same split, noise draw and initialisation, so
  the pairing removes what they share) and Welch's two-sample t-test's, from 5 seeds on
  (`ttest_ind(equal_var=False)`: stronger when they share nothing); `pair_test="paired"` or `"unpaired"`
  takes one of them.
- **Repeated looks.** Each pair's looks form a group-sequential design with an exact boundary calibrated on
  the test's simulated null law, or the union bound (`analysis/statistics/seed_looks.py`,
  `analysis/statistics/sequential.py`); the pair's sequential p-value p* is valid under any stopping.
- **Multiplicity.** Holm's step-down correction (`analysis.statistics.stats.holm`; Holm 1979) over a family
  of comparisons: every pair of methods in one cell (`family="cell"`, the default: a paper table states its
  claims per cell) or in every cell of the sweep (`family="sweep"`), and, with an equivalence margin, every
  equivalence test too. Every pair is in the family whichever pairs must be decided (`pairs`), as the best
  is chosen by the data. Holm is valid under any dependence and monotone: as p* only decreases with more
  looks, a claim once made is never withdrawn.
- **Decisions.** A cell's best method (highest mean, lowest with mode "min") is `best`; each other method
  is `better`/`worse` when its pair with the best is rejected (the sign of the paired mean difference says
  which), `equivalent` when its TOST is rejected, else `undecided`. Every rejected pair is reported too:
  `beats[i, j]` when method i is significantly better than j.
- **Seeds.** A pair is open while it is neither rejected nor equivalent, below the cap, and not futile (its
  conditional power at the last look below `futility`, from `seed_looks.FUTILITY_FROM` of the cap on: a
  non-binding stop, the boundaries are calibrated as if it never happened, so it only lowers the error).
  With `pairs="best"` a cell is decided when its pairs with the best are closed, with `"all"` when every
  pair is; a method needs more seeds while it is below min_seeds or in an open pair that counts.
"""

from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np

from analysis.statistics.seed_looks import holm_family, pair_evidence
from analysis.statistics.seed_rule import DECISIONS, SeedRule


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
        absent methods), decision (index into `DECISIONS`; -1 absent), needs_more (bool); and beats,
        bool [..., C, M, M]: method i significantly better than method j (Holm over the family).
    """
    values = np.asarray(values, dtype=float)
    n_methods = values.shape[-2]
    have = ~np.isnan(values)
    present = have.any(axis=-1) if present is None else np.asarray(present, dtype=bool)
    n = np.minimum(np.cumprod(have, axis=-1).sum(axis=-1), rule.max_seeds)
    v = np.where(np.arange(values.shape[-1]) < n[..., None], values, np.nan)[..., : rule.max_seeds]
    sign = 1.0 if rule.mode == "max" else -1.0
    pairs = list(combinations(range(n_methods), 2))
    a, b = np.array([p[0] for p in pairs], dtype=int), np.array([p[1] for p in pairs], dtype=int)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = np.nanmean(v, axis=-1), np.nanstd(v, axis=-1, ddof=1)
        both = present[..., a] & present[..., b]  # [..., C, pairs]
        evidence = pair_evidence(v[..., a, :], v[..., b, :], rule)
        tests = [evidence.p] + ([evidence.p_tost] if evidence.p_tost is not None else [])
        adjusted = holm_family(np.stack([np.where(both, p, np.nan) for p in tests], axis=-2), rule.family)
        rejected = adjusted[..., 0, :] <= rule.alpha  # [..., C, pairs]
        equivalent = adjusted[..., 1, :] <= rule.alpha if len(tests) > 1 else np.zeros_like(rejected)
        a_ahead = sign * np.nanmean(v[..., a, :] - v[..., b, :], axis=-1) > 0  # over the seeds both have
        best = np.argmax(np.where(np.isnan(mean), -np.inf, sign * mean), axis=-1)
        v_best = np.take_along_axis(v, best[..., None, None], axis=-2)
        diff = np.nanmean(np.where(np.isnan(v_best), np.nan, v) - v_best, axis=-1)
    beats = np.zeros(values.shape[:-1] + (n_methods,), dtype=bool)
    beats[..., a, b], beats[..., b, a] = rejected & a_ahead, rejected & ~a_ahead
    pair_of = np.zeros((n_methods, n_methods), dtype=int)
    pair_of[a, b] = pair_of[b, a] = np.arange(len(pairs))
    index = pair_of[best[..., None], np.arange(n_methods)]  # [..., C, M]: the pair (best, method)
    p_adj = np.take_along_axis(adjusted[..., 0, :], index, axis=-1)
    p_eq = np.take_along_axis(adjusted[..., 1, :], index, axis=-1) if len(tests) > 1 else np.ones_like(p_adj)
    is_best = np.arange(n_methods) == best[..., None]
    decision = np.select(
        [~present, is_best, p_adj <= rule.alpha, p_eq <= rule.alpha],
        [-1, 0, np.where(sign * diff > 0, 1, 2), 3],
        default=4,
    )
    closed = rejected | equivalent | evidence.futile | (np.minimum(n[..., a], n[..., b]) >= rule.max_seeds)
    counted = both & ~closed
    if rule.pairs == "best":  # only the pairs with the cell's best keep its seeds coming
        counted &= (a == best[..., None]) | (b == best[..., None])
    in_open = np.zeros(present.shape, dtype=bool)
    for i, (x, y) in enumerate(pairs):
        in_open[..., x] |= counted[..., i]
        in_open[..., y] |= counted[..., i]
    needs_more = present & (in_open | (n < rule.min_seeds)) & (n < rule.max_seeds)
    p_adj = np.where(is_best | ~present, np.nan, p_adj)
    diff = np.where(is_best, 0.0, diff)
    out = dict(n=n, mean=mean, std=std, diff_vs_best=diff, p_adjusted=p_adj, decision=decision)
    return out | dict(needs_more=needs_more, beats=beats)


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
        for the best), decision (one of `DECISIONS`), needs_more (True: run this method's next seed),
        beats (the methods of the cell it is significantly better than, in method order).
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
            row = {"cell": c, "method": m} | {k: out[k][i, j].item() for k in out if k not in ("decision", "beats")}
            row["beats"] = [other for k, other in enumerate(methods) if out["beats"][i, j, k]]
            row["decision"] = DECISIONS[out["decision"][i, j]] if out["decision"][i, j] >= 0 else "undecided"
            rows.append(row)
    return rows


def seeds_frame(rows: list[dict], method_axis: str = "method", rule: SeedRule | None = None):
    """`decide`'s rows as the table of `report/seeds.csv`: the cell's axes (from a JSON cell key, or
    a dict), `method`, n, mean, std, diff_vs_best, p_adjusted, decision, beats (the methods it is
    significantly better than, joined by "; "), then `compare` (the compared axis, `method_axis`, also in
    `frame.attrs["method_axis"]`) and `rule` (`rule.describe(methods)`, "" without)."""
    import json

    import pandas as pd

    out = []
    for r in rows:
        cell = r["cell"] if isinstance(r["cell"], dict) else json.loads(r["cell"])
        out.append(cell | {k: r[k] for k in ("method", "n", "mean", "std", "diff_vs_best", "p_adjusted", "decision")})
        out[-1]["beats"] = "; ".join(str(m) for m in r.get("beats", []))
    methods = len({r["method"] for r in rows}) or None
    frame = pd.DataFrame(out).assign(compare=method_axis, rule=rule.describe(methods) if rule else "")
    frame.attrs["method_axis"] = method_axis
    return frame
