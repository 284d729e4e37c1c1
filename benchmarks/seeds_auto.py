"""Monte-Carlo check of the `--seeds auto` decision rule (`analysis/statistics/seeds.py`): error, power, seeds used.

Run:
    python benchmarks/seeds_auto.py --quick                          # 200 sweeps per scenario: seconds to a minute
    python benchmarks/seeds_auto.py --json out.json --plot out.png   # 10,000 sweeps per scenario

Each simulated sweep has 12 cells x 3 methods; a method's metric at a seed is N(mu, 1): effects are
in seed standard deviations. Seed s of a cell draws the split, the noise and the initialisation of every
method, so part of its deviation is shared: value = mu + sqrt(rho) u_s + sqrt(1 - rho) e_{s,method},
with correlation rho in {0, 0.5, 0.9} between methods at one seed (pairing cancels u_s).
Scenarios: A/A (every method the same: any better/worse claim is false) and one method ahead of
the other two by 0.5, 1, 2 or 4, at each rho. The sequential rule runs seeds as a sweep would: every
method that `needs_more` gets its next seed, the rule is applied again, until none does. Against it,
the fixed grid: max_seeds seeds for every method, paired t-tests of every pair, Holm over the same
family (`--family`: each cell's pairs, or the sweep's).
Reported per scenario: family-wise false-claim rate (a family, i.e. a cell with `--family cell` or a
sweep with `--family sweep`, with at least one wrong better/worse
claim), power (fraction of true differences claimed in the right direction), seeds per cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.statistics.seed_rule import BOUNDARIES, FAMILIES, SeedRule  # noqa: E402
from analysis.statistics.seeds import decide_arrays, holm_family, look_pvalues  # noqa: E402

CELLS, METHODS = 12, 3
EFFECTS = (0.0, 0.5, 1.0, 2.0, 4.0)
RHOS = (0.0, 0.5, 0.9)


def simulate_values(rng, sweeps: int, effect: float, max_seeds: int, rho: float = 0.0) -> np.ndarray:
    """Metric values [sweeps, CELLS, METHODS, max_seeds], each N(mu, 1): method 0 is `effect` ahead of the
    others, and a seed's draw is shared by the methods of its cell with correlation `rho`."""
    mu = np.array([effect] + [0.0] * (METHODS - 1))
    shared = rng.normal(0.0, 1.0, (sweeps, CELLS, 1, max_seeds))
    own = rng.normal(0.0, 1.0, (sweeps, CELLS, METHODS, max_seeds))
    return np.sqrt(rho) * shared + np.sqrt(1 - rho) * own + mu[:, None]


def run_sequential(values: np.ndarray, rule: SeedRule) -> dict:
    """Apply the rule as a sweep does: start at min_seeds, give each `needs_more` method a seed, repeat.

    Returns: the final `decide_arrays` output and the seeds used, n [sweeps, CELLS, METHODS].
    """
    n = np.full(values.shape[:-1], rule.min_seeds)
    while True:
        seen = np.where(np.arange(values.shape[-1]) < n[..., None], values, np.nan)
        out = decide_arrays(seen, rule)
        if not out["needs_more"].any():
            return out
        n = n + out["needs_more"]


def fixed_grid(values: np.ndarray, rule: SeedRule) -> np.ndarray:
    """Claims of the fixed grid, [sweeps, CELLS, pairs (0,1), (0,2), (1,2)]: the sign of b - a where
    Holm over the rule's family (a cell's pairs, or the sweep's) rejects (paired t-test on all max_seeds
    seeds, one look), else 0."""
    one_look = SeedRule(alpha=rule.alpha, min_seeds=rule.max_seeds, max_seeds=rule.max_seeds)
    pairs = list(combinations(range(METHODS), 2))
    diffs = values[..., [b for _, b in pairs], :] - values[..., [a for a, _ in pairs], :]
    p = look_pvalues(diffs, one_look)[0][..., 0]  # [sweeps, CELLS, pairs]
    rejected = holm_family(p[..., None, :], rule.family)[..., 0, :] <= rule.alpha
    return np.where(rejected, np.sign(diffs.mean(axis=-1)), 0)


def scenario(rng, sweeps: int, effect: float, rule: SeedRule, rho: float = 0.0) -> dict:
    """False-claim rate, power and seeds per cell of the sequential rule and the fixed grid at one effect and rho."""
    values = simulate_values(rng, sweeps, effect, rule.max_seeds, rho)
    out = run_sequential(values, rule)
    decision, mu = out["decision"], effect * (np.arange(METHODS) == 0)
    best = (decision == 0).argmax(axis=-1)[..., None]
    claimed = np.select([decision == 1, decision == 2], [1, -1], 0)  # better / worse than the cell's best
    truth = np.sign(mu - mu[best])  # a claim is false unless it has the true difference's sign
    wrong = (claimed != 0) & (claimed != truth)
    right = (effect > 0) & (claimed != 0) & (claimed == truth)
    fixed = fixed_grid(values, rule)  # signed claims of pairs (0,1), (0,2), (1,2): b - a
    fixed_truth = np.sign([mu[1] - mu[0], mu[2] - mu[0], mu[2] - mu[1]])
    fixed_wrong = (fixed != 0) & (fixed != fixed_truth)
    family = -1 if rule.family == "cell" else (-1, -2)  # the claims whose error the rule controls together
    return {
        "rho": rho,
        "effect_sd": effect,
        "sweeps": sweeps,
        "sequential_fwer": float(wrong.any(axis=family).mean()),
        "fixed_fwer": float(fixed_wrong.any(axis=family).mean()),
        "sequential_power": float(right.sum() / (sweeps * CELLS * (METHODS - 1))) if effect else None,
        "fixed_power": float((fixed[..., :2] == -1).mean()) if effect else None,
        "sequential_seeds_per_cell": float(out["n"].sum(axis=-1).mean()),
        "fixed_seeds_per_cell": float(rule.max_seeds * METHODS),
        "sequential_undecided_at_cap": float(((decision == 4) & (out["n"] == rule.max_seeds)).mean()),
    }


def plot(rows: list[dict], path: str) -> None:
    """Power and seeds per cell against the effect, sequential vs fixed grid, one colour per rho, saved to `path`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8))
    power, seeds = fig.subplots(1, 2)
    for i, rho in enumerate(sorted({r["rho"] for r in rows})):
        at = [r for r in rows if r["rho"] == rho]
        with_effect = [r for r in at if r["effect_sd"]]
        for who, style in (("sequential", "o-"), ("fixed", "s--")):
            kw = dict(color=f"C{i}", label=f"{who}, rho {rho:g}")
            power.plot([r["effect_sd"] for r in with_effect], [r[f"{who}_power"] for r in with_effect], style, **kw)
            seeds.plot([r["effect_sd"] for r in at], [r[f"{who}_seeds_per_cell"] for r in at], style, **kw)
    power.set(xlabel="effect (seed standard deviations)", ylabel="power (claims / true differences)", ylim=(0, 1.02))
    seeds.set(xlabel="effect (seed standard deviations)", ylabel=f"seeds per cell ({METHODS} methods)", ylim=(0, None))
    fwer = max(r["sequential_fwer"] for r in rows if r["effect_sd"] == 0)
    fig.suptitle(
        f"--seeds auto vs fixed grid, {CELLS} cells x {METHODS} methods; largest A/A family-wise error {fwer:.3f}"
    )
    power.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def goals(row: dict, alpha: float) -> str:
    """The scenario against the goals: A/A error <= alpha; >= 0.9x the fixed power where it is >= 0.5;
    <= 0.75x the fixed seeds where its power is >= 0.95. Returns "" or the goals missed, in words."""
    missed = []
    if row["effect_sd"] == 0 and row["sequential_fwer"] > alpha:
        missed.append(f"A/A error {row['sequential_fwer']:.4f} > {alpha:g}")
    fixed = row["fixed_power"] or 0.0
    if fixed >= 0.5 and row["sequential_power"] < 0.9 * fixed:
        missed.append(f"power {row['sequential_power'] / fixed:.2f}x < 0.9x")
    if fixed >= 0.95 and row["sequential_seeds_per_cell"] > 0.75 * row["fixed_seeds_per_cell"]:
        missed.append(f"seeds {row['sequential_seeds_per_cell'] / row['fixed_seeds_per_cell']:.2f}x > 0.75x")
    return "; ".join(missed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 sweeps per scenario (CI)")
    parser.add_argument("--sweeps", type=int, default=None, help="sweeps per scenario (default 10,000; --quick 200)")
    parser.add_argument("--max-seeds", type=int, default=10)
    parser.add_argument("--min-seeds", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--boundary", default="obf", choices=BOUNDARIES)
    parser.add_argument("--family", default="cell", choices=FAMILIES)
    parser.add_argument("--spending", default="obf", choices=("pocock", "obf", "uniform"), help="with --boundary union")
    parser.add_argument("--rho", type=float, nargs="+", default=list(RHOS), help="seed correlations between methods")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, metavar="OUT")
    parser.add_argument("--plot", default=None, metavar="PNG")
    args = parser.parse_args(argv)
    sweeps = args.sweeps or (200 if args.quick else 10000)
    rule = SeedRule(
        alpha=args.alpha,
        min_seeds=args.min_seeds,
        max_seeds=args.max_seeds,
        boundary=args.boundary,
        family=args.family,
        spending=args.spending,
    )
    rng = np.random.default_rng(args.seed)
    started, rows = time.perf_counter(), []
    for rho in args.rho:
        for effect in EFFECTS:
            rows.append(scenario(rng, sweeps, effect, rule, rho))
            r = rows[-1]
            power = "" if not effect else f"power {r['sequential_power']:.3f} (fixed {r['fixed_power']:.3f}); "
            missed = goals(r, rule.alpha)
            print(
                f"rho {rho:g}, effect {effect:g} sd: family-wise false claims {r['sequential_fwer']:.4f} "
                f"(fixed {r['fixed_fwer']:.4f}); {power}seeds per cell {r['sequential_seeds_per_cell']:.1f} "
                f"(fixed {r['fixed_seeds_per_cell']:.0f}){'; MISSED: ' + missed if missed else ''}",
                flush=True,
            )
            if args.json:  # written after every scenario, so a run cut short keeps what it measured
                result = {"rule": vars(args) | {"sweeps": sweeps}, "scenarios": rows}
                Path(args.json).write_text(json.dumps(result | {"seconds": time.perf_counter() - started}, indent=1))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
