"""Monte-Carlo check of `--seeds auto` (`analysis/statistics/seeds.py`): false claims, power and seeds, beside
AdaStop and the fixed 10-seed tests, on the same simulated per-seed results.

Run:
    python benchmarks/seeds_auto.py --quick                                  # seconds to a minute (CI)
    python benchmarks/seeds_auto.py --json out.json --markdown out.md        # 20,000 draws per null row

Side by side (two methods per cell, up to 10 seeds, `benchmarks/seeds_draws.py`): shared seed effect rho in {0, 0.5,
0.9}, method 0 ahead by 0, 0.5, 1 or 2 seed standard deviations, normal, t3, outlier or lognormal noise, or normal
noise 3 times as spread for method 1 (unequal). On each draw run: the rule with each pair test (combined, the
default; paired; unpaired); AdaStop (`benchmarks/seeds_adastop.py`: 2 seeds per interim, 5 interims) at its nominal
alpha and at the alpha whose false-claim rate matches the rule's (the largest of `ADASTOP_ALPHAS` whose worst rate
over the rho-0 null rows is at most the rule's worst over every null row: AdaStop's permutation test is exact, so
its rate is highest there); the fixed 10-seed paired t-test and Welch t-test. False claims: any claim between two
equal methods; power: method 0 claimed better; seeds: per method, when the rule or AdaStop stopped. The goals
(`goals`, issue 57): error <= alpha + 0.005 in every null row; power >= POWER_RATIO = 0.9x the better fixed test's
wherever that has power >= 0.5; power >= AdaStop's at the matched alpha on no more seeds.

Sweeps (`sweep_scenario`, the earlier table; the JSON's `sweeps`): 12 cells x 3 methods, one method ahead of two by
0-4 sd, the rule against the fixed 10-seed grids (paired t-tests, and Welch's, of every pair, Holm over each cell's
pairs). Goals (`sweep_goals`): false claims per family <= alpha + 3 Monte-Carlo s.e. with every method equal; power
>= 0.9x the better grid's where that has power >= 0.5; seeds per cell <= 0.75x the grid's where it has power >= 0.95.
`--quick` (CI) exits 1 when a sweep row's power is below QUICK_POWER_RATIO = 0.85x the better grid's (where that has
power >= 0.5) or a null row's false claims exceed alpha + 3 Monte-Carlo s.e. (`quick_failures`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.statistics.seed_looks import holm_family  # noqa: E402
from analysis.statistics.seed_rule import BOUNDARIES, FAMILIES, PAIR_TESTS, SeedRule  # noqa: E402
from analysis.statistics.seeds import decide_arrays  # noqa: E402
from benchmarks.seeds_adastop import adastop_arrays, alpha_for_error, check_against_package  # noqa: E402
from benchmarks.seeds_draws import DISTRIBUTIONS, simulate_values  # noqa: E402
from benchmarks.seeds_table import markdown, row_line  # noqa: E402

RHOS, EFFECTS = (0.0, 0.5, 0.9), (0.0, 0.5, 1.0, 2.0)
SWEEP_EFFECTS, CELLS, METHODS = (0.0, 0.5, 1.0, 2.0, 4.0), 12, 3
ADASTOP = {"n": 2, "K": 5}  # seeds per interim, interims: a cap of 10 seeds per method, like the rule's
ADASTOP_ALPHAS = (0.05, 0.04, 0.03, 0.025, 0.02, 0.015, 0.01)
POWER_RATIO, FIXED_POWER_FROM = 0.9, 0.5  # goal: power >= 0.9x the better fixed test's where it has >= 0.5
SEEDS_RATIO, SEEDS_FROM = 0.75, 0.95  # goal: seeds per cell <= 0.75x the fixed grid's where it has power >= 0.95
QUICK_POWER_RATIO = 0.85  # what --quick (CI) asserts of the sweep rows, at its few hundred draws


def run_sequential(values: np.ndarray, rule: SeedRule) -> dict:
    """Apply the rule as a sweep does: start at min_seeds, give each `needs_more` method a seed, repeat.

    Returns: the final `decide_arrays` output (n [..., cells, methods], beats [..., cells, methods, methods]).
    """
    n = np.full(values.shape[:-1], rule.min_seeds)
    while True:
        seen = np.where(np.arange(values.shape[-1]) < n[..., None], values, np.nan)
        out = decide_arrays(seen, rule)
        if not out["needs_more"].any():
            return out
        n = n + out["needs_more"]


def fixed_tests(values: np.ndarray, alpha: float) -> dict:
    """Method 0 against 1 on every seed, once: the paired t-test and Welch's t-test (`ttest_rel`,
    `ttest_ind(equal_var=False)`). Returns {"paired"|"welch": signed claims [draws], +1 method 0 better}."""
    x, y = values[:, 0, 0, :], values[:, 0, 1, :]
    sign = np.sign(x.mean(axis=1) - y.mean(axis=1))
    p_rel = stats.ttest_rel(x, y, axis=1).pvalue
    p_welch = stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue
    return {"paired": np.where(p_rel <= alpha, sign, 0), "welch": np.where(p_welch <= alpha, sign, 0)}


def rate(claims: np.ndarray, effect: float) -> float:
    """False-claim rate (effect 0: any claim) or power (a claim that method 0 is better)."""
    return float((claims != 0).mean() if effect == 0 else (claims == 1).mean())


def pair_row(values: np.ndarray, rule: SeedRule, effect: float, adastop_alphas) -> dict:
    """One side-by-side row: the rule with each pair test, AdaStop at `adastop_alphas`, the fixed tests."""
    row = {"effect_sd": effect, "draws": len(values)}
    for test in PAIR_TESTS:
        out = run_sequential(values, dataclasses.replace(rule, pair_test=test))
        claims = out["beats"][:, 0, 0, 1].astype(int) - out["beats"][:, 0, 1, 0].astype(int)
        row[f"rule_{test}"] = {"rate": rate(claims, effect), "seeds": float(out["n"][:, 0, :].mean())}
    for who, claims in fixed_tests(values, rule.alpha).items():
        row[f"fixed_{who}"] = {"rate": rate(claims, effect), "seeds": float(rule.max_seeds)}
    row["adastop"] = {}
    for a in adastop_alphas:
        got = adastop_arrays(values[:, 0, 0, :], values[:, 0, 1, :], ADASTOP["n"], ADASTOP["K"], a)
        row["adastop"][str(a)] = {"rate": rate(got["decision"], effect), "seeds": float(got["seeds"].mean())}
    return row


def goals(row: dict, alpha: float, matched: float) -> str:
    """The row against the goals (module docstring): "" when met, else the goals missed, in words."""
    rule, ada = row["rule_combined"], row["adastop"].get(str(matched))
    if row["effect_sd"] == 0:
        return f"error {rule['rate']:.4f} > {alpha + 0.005:g}" if rule["rate"] > alpha + 0.005 else ""
    missed = []
    fixed = max(row["fixed_paired"]["rate"], row["fixed_welch"]["rate"])
    if fixed >= FIXED_POWER_FROM and rule["rate"] < POWER_RATIO * fixed:
        missed.append(f"power {rule['rate'] / fixed:.3f}x the better fixed test's < {POWER_RATIO:g}x")
    if ada and rule["rate"] < ada["rate"]:
        missed.append(f"power {rule['rate']:.3f} < AdaStop's {ada['rate']:.3f}")
    if ada and rule["seeds"] > ada["seeds"]:
        missed.append(f"seeds {rule['seeds']:.2f} > AdaStop's {ada['seeds']:.2f}")
    return "; ".join(missed)


def sweep_goals(r: dict, alpha: float, se: float) -> str:
    """A sweep row against the goals (module docstring): "" when met, else the goals missed, in words."""
    if r["effect_sd"] == 0:
        error = r["sequential_fwer"]
        return f"error {error:.4f} > alpha + 3 s.e. {alpha + 3 * se:.4f}" if error > alpha + 3 * se else ""
    missed, fixed = [], r["best_fixed_power"]
    if fixed >= FIXED_POWER_FROM and r["power_ratio"] < POWER_RATIO:
        missed.append(f"power {r['power_ratio']:.3f}x the better fixed grid's < {POWER_RATIO:g}x")
    seeds = r["sequential_seeds_per_cell"] / r["fixed_seeds_per_cell"]
    if fixed >= SEEDS_FROM and seeds > SEEDS_RATIO:
        missed.append(f"seeds {seeds:.2f}x the fixed grid's > {SEEDS_RATIO:g}x")
    return "; ".join(missed)


def side_by_side(rng, rule: SeedRule, null_draws: int, draws: int, noises, rhos, log) -> dict:
    """Every (noise, rho, effect) row, the null rows first (they set AdaStop's matched alpha)."""
    nominal = ADASTOP_ALPHAS[0]
    rows, values = [], {}
    for noise in noises:
        for rho in rhos:
            for effect in EFFECTS:
                n = null_draws if effect == 0 else draws
                values[noise, rho, effect] = simulate_values(rng, n, effect, rule.max_seeds, rho, noise)
    worst_rule = 0.0
    for noise in noises:  # null rows: AdaStop's whole ladder where its error is highest (rho 0)
        for rho in rhos:
            alphas = ADASTOP_ALPHAS if rho == 0 else (nominal,)
            rows.append({"noise": noise, "rho": rho} | pair_row(values[noise, rho, 0.0], rule, 0.0, alphas))
            log(rows[-1])
            worst_rule = max(worst_rule, rows[-1]["rule_combined"]["rate"])
    worst_ada = {a: max(r["adastop"][str(a)]["rate"] for r in rows if r["rho"] == 0) for a in ADASTOP_ALPHAS}
    matched = alpha_for_error(worst_ada, worst_rule)
    for row in rows:
        if str(matched) not in row["adastop"]:
            a = values[row["noise"], row["rho"], 0.0][:, 0]
            got = adastop_arrays(a[:, 0, :], a[:, 1, :], ADASTOP["n"], ADASTOP["K"], matched)
            row["adastop"][str(matched)] = {"rate": rate(got["decision"], 0.0), "seeds": float(got["seeds"].mean())}
    for noise in noises:
        for rho in rhos:
            for effect in EFFECTS[1:]:
                alphas = sorted({nominal, matched}, reverse=True)
                rows.append({"noise": noise, "rho": rho} | pair_row(values[noise, rho, effect], rule, effect, alphas))
                log(rows[-1])
    for row in rows:
        row["goals_missed"] = goals(row, rule.alpha, matched)
    adastop = ADASTOP | {"alpha_nominal": nominal, "alpha_matched": matched, "worst_null_error": worst_ada}
    return {"rows": rows, "adastop": adastop, "rule_worst_null_error": worst_rule}


def fixed_grid(values: np.ndarray, test: str, family: str, alpha: float) -> np.ndarray:
    """The fixed grid's claims on all seeds: the paired t-test (`ttest_rel`) or Welch's (`ttest_ind(equal_var=
    False)`) of every pair of methods, Holm over the family. values [..., cells, methods, seeds] -> signed claims
    [..., cells, pairs] in `combinations(range(methods), 2)` order: +1 the pair's first method better, -1 worse."""
    pairs = list(combinations(range(values.shape[-2]), 2))
    x, y = values[..., [a for a, _ in pairs], :], values[..., [b for _, b in pairs], :]
    if test == "paired":
        p = stats.ttest_rel(x, y, axis=-1).pvalue
    else:
        p = stats.ttest_ind(x, y, axis=-1, equal_var=False).pvalue
    rejected = holm_family(p[..., None, :], family)[..., 0, :] <= alpha
    return np.where(rejected, np.sign((x - y).mean(axis=-1)), 0)


def sweep_scenario(rng, sweeps: int, effect: float, rule: SeedRule, rho: float = 0.0) -> dict:
    """12 cells x 3 methods per simulated sweep: false claims per family, power and seeds per cell of the rule
    and of the fixed grids (paired t-tests, and Welch's, of every pair on all max_seeds seeds, Holm over the same
    family). `fixed_*` is the paired grid's (the field names of earlier rounds), `fixed_welch_*` Welch's;
    `power_ratio` is the rule's power over the better grid's (`best_fixed_power`)."""
    values = simulate_values(rng, sweeps, effect, rule.max_seeds, rho, cells=CELLS, methods=METHODS)
    out = run_sequential(values, rule)
    mu = effect * (np.arange(METHODS) == 0)
    truth = np.sign(mu[:, None] - mu[None, :])  # [i, j]: +1 where i is truly better than j
    wrong = out["beats"] & (truth <= 0)  # a claim "i better than j" that is false
    right = out["beats"] & (truth > 0)
    pairs = list(combinations(range(METHODS), 2))
    fixed_truth = np.sign([mu[a] - mu[b] for a, b in pairs])
    rule_wrong = wrong.any(axis=(-1, -2))  # [sweeps, cells]
    true_pairs = sweeps * CELLS * int((truth > 0).sum())
    grids = {}
    for test in ("paired", "welch"):
        fixed = fixed_grid(values, test, rule.family, rule.alpha)
        fixed_wrong = ((fixed != 0) & (fixed != fixed_truth)).any(axis=-1)  # [sweeps, cells]
        fixed_right = (fixed != 0) & (fixed == fixed_truth) & (fixed_truth != 0)
        if rule.family == "sweep":  # a family is a whole sweep
            fixed_wrong = fixed_wrong.any(axis=-1)
        grids[test] = (float(fixed_wrong.mean()), float(fixed_right.sum() / true_pairs) if effect else None)
    if rule.family == "sweep":
        rule_wrong = rule_wrong.any(axis=-1)
    power = float(right.sum() / true_pairs) if effect else None
    best = max(grids["paired"][1], grids["welch"][1]) if effect else None
    return {
        "rho": rho,
        "effect_sd": effect,
        "sweeps": sweeps,
        "sequential_fwer": float(rule_wrong.mean()),
        "fixed_fwer": grids["paired"][0],
        "fixed_welch_fwer": grids["welch"][0],
        "sequential_power": power,
        "fixed_power": grids["paired"][1],
        "fixed_welch_power": grids["welch"][1],
        "best_fixed_power": best,
        "power_ratio": power / best if effect and best else None,
        "sequential_seeds_per_cell": float(out["n"].sum(axis=-1).mean()),
        "fixed_seeds_per_cell": float(rule.max_seeds * METHODS),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred draws, normal noise only (CI)")
    parser.add_argument("--null-draws", type=int, default=None, help="draws per null row (default 20,000)")
    parser.add_argument("--draws", type=int, default=None, help="draws per row with an effect (default 10,000)")
    parser.add_argument("--sweeps", type=int, default=None, help="simulated sweeps per sweep row (default 2,000)")
    parser.add_argument("--alpha", type=float, default=0.05)
    exact = [b for b in BOUNDARIES if b != "union"]  # the union bound is the paired test's alone
    parser.add_argument("--boundary", default=SeedRule.boundary, choices=exact)
    parser.add_argument("--family", default=SeedRule.family, choices=FAMILIES, help="of the sweep rows")
    parser.add_argument("--futility", type=float, default=SeedRule.futility)
    parser.add_argument("--check-draws", type=int, default=None, help="draws decided by the adastop package too")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, metavar="OUT")
    parser.add_argument("--markdown", default=None, metavar="OUT", help="the side-by-side table, for docs/")
    args = parser.parse_args(argv)
    quick = args.quick
    null_draws, draws = args.null_draws or (400 if quick else 20_000), args.draws or (200 if quick else 10_000)
    sweeps, check = args.sweeps or (60 if quick else 2_000), args.check_draws or (4 if quick else 40)
    rule = SeedRule(alpha=args.alpha, boundary=args.boundary, family=args.family, futility=args.futility)
    rng, started = np.random.default_rng(args.seed), time.perf_counter()
    noises = ("normal",) if quick else DISTRIBUTIONS

    x = simulate_values(rng, check, 1.0, rule.max_seeds)[:, 0]
    checked = check_against_package(x[:, 0, :], x[:, 1, :], ADASTOP["n"], ADASTOP["K"], ADASTOP_ALPHAS[0])
    print(f"adastop package and its numpy repetition: the same decisions and seeds on {checked} draws", flush=True)

    def log(row):
        print(row_line(row), flush=True)

    pairs = side_by_side(rng, rule, null_draws, draws, noises, RHOS, log)
    print(f"AdaStop's matched alpha: {pairs['adastop']['alpha_matched']}", flush=True)
    for row in pairs["rows"]:
        if row["goals_missed"]:
            print(f"MISSED: {row['noise']}, rho {row['rho']:g}, effect {row['effect_sd']:g}: {row['goals_missed']}")
    result = {"rule": vars(args) | {"null_draws": null_draws, "draws": draws}, "package_checked": checked} | pairs
    result["sweeps"] = []  # named "scenarios" before round 3 (docs/seeds-auto.md)
    families = sweeps * (CELLS if rule.family == "cell" else 1)
    se = float(np.sqrt(rule.alpha * (1 - rule.alpha) / families))
    for rho in RHOS:
        for effect in SWEEP_EFFECTS:
            result["sweeps"].append(sweep_scenario(rng, sweeps, effect, rule, rho))
            r = result["sweeps"][-1]
            r["goals_missed"] = sweep_goals(r, rule.alpha, se)
            print(
                f"sweeps, rho {rho:g}, effect {effect:g}: false claims per cell {r['sequential_fwer']:.4f} (fixed "
                f"{r['fixed_fwer']:.4f}), power {r['sequential_power'] or 0:.3f} (fixed paired "
                f"{r['fixed_power'] or 0:.3f}, Welch {r['fixed_welch_power'] or 0:.3f}; ratio "
                f"{r['power_ratio'] or 0:.3f}), seeds per cell {r['sequential_seeds_per_cell']:.1f} of "
                f"{r['fixed_seeds_per_cell']:.0f}" + (f"; MISSED: {r['goals_missed']}" if r["goals_missed"] else ""),
                flush=True,
            )
    result["seconds"] = time.perf_counter() - started
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(result))
    missed = [r for r in pairs["rows"] + result["sweeps"] if r["goals_missed"]]
    print(f"{len(missed)} of {len(pairs['rows']) + len(result['sweeps'])} rows miss a goal; {result['seconds']:.0f} s")
    failed = quick_failures(result, rule.alpha, se) if quick else []
    for line in failed:
        print(f"FAILED: {line}", flush=True)
    return 1 if failed else 0


def quick_failures(result: dict, alpha: float, se: float) -> list[str]:
    """What --quick (CI) asserts, in words ([] when it holds): every sweep row's power at least
    `QUICK_POWER_RATIO` times the better fixed grid's where that has power >= `FIXED_POWER_FROM`, and every null
    row's false claims (sweep rows per family, side-by-side rows per draw) within alpha + 3 Monte-Carlo s.e."""
    failed = []
    for r in result["sweeps"]:
        where = f"sweeps, rho {r['rho']:g}, effect {r['effect_sd']:g}"
        if r["effect_sd"] == 0 and r["sequential_fwer"] > alpha + 3 * se:
            failed.append(f"{where}: false claims {r['sequential_fwer']:.4f} > {alpha + 3 * se:.4f}")
        ratio, fixed = r["power_ratio"], r["best_fixed_power"]
        if r["effect_sd"] and fixed >= FIXED_POWER_FROM and ratio < QUICK_POWER_RATIO:
            failed.append(f"{where}: power {ratio:.3f}x the better fixed grid's < {QUICK_POWER_RATIO:g}x")
    for r in result["rows"]:
        limit = alpha + 3 * np.sqrt(alpha * (1 - alpha) / r["draws"])
        if r["effect_sd"] == 0 and r["rule_combined"]["rate"] > limit:
            where = f"{r['noise']}, rho {r['rho']:g}"
            failed.append(f"{where}: false claims {r['rule_combined']['rate']:.4f} > {limit:.4f}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
