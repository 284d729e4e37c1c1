"""`--seeds auto` round 3: the combined pair test, every pair of a cell, futility, and AdaStop beside the rule."""

import argparse

import numpy as np
import pytest
from scipy import stats

from analysis.statistics.pair_test import conditional_power, look_z
from analysis.statistics.seed_looks import pair_evidence
from analysis.statistics.seed_rule import SeedRule
from analysis.statistics.seeds import decide, decide_arrays


def _pairs(rng, draws, effect, rho, seeds=10):
    """Two methods' values [draws, seeds] with correlation rho at a seed; the first `effect` sd ahead."""
    shared = rng.standard_normal((draws, seeds))
    a, b = np.sqrt(rho) * shared + np.sqrt(1 - rho) * rng.standard_normal((2, draws, seeds))
    return a + effect, b


def test_the_looks_are_scipys_paired_and_welch_t_tests_on_the_z_scale_and_combined_is_the_larger():
    a, b = np.random.default_rng(0).normal(size=(2, 5, 6))
    paired, unpaired, combined = (look_z(a, b, t, 3, 6) for t in ("paired", "unpaired", "combined"))
    for k, n in enumerate(range(3, 7)):
        p_rel = stats.ttest_rel(a[:, :n], b[:, :n], axis=1).pvalue
        p_ind = stats.ttest_ind(a[:, :n], b[:, :n], axis=1, equal_var=False).pvalue
        assert paired[:, k] == pytest.approx(stats.norm.isf(p_rel / 2))
        assert unpaired[:, k] == pytest.approx(stats.norm.isf(p_ind / 2))
    # Welch's test from WELCH_FROM = 5 seeds on; the two z-values unweighted (round 4, issue 57)
    assert combined[:, :2] == pytest.approx(paired[:, :2])
    assert combined[:, 2:] == pytest.approx(np.maximum(paired[:, 2:], unpaired[:, 2:]))
    assert look_z(a, b, "combined", 3, 4)[:, 1] == pytest.approx(np.maximum(paired[:, 1], unpaired[:, 1]))
    short = np.where(np.arange(6) < 4, a, np.nan)  # 4 seeds: the looks at 5 and 6 not taken
    assert np.isnan(look_z(short, b, "combined", 3, 6)[:, 2:]).all()


@pytest.mark.parametrize("rho, spread", [(0.0, 1.0), (0.5, 1.0), (0.9, 1.0), (0.0, 10.0)])
def test_the_combined_test_holds_alpha_at_every_rho_and_spread_and_spends_it_all_at_rho_0(rho, spread):
    a, b = _pairs(np.random.default_rng(int(rho * 10) + 1), 20000, 0.0, rho)
    level = (pair_evidence(a, b * spread, SeedRule()).p <= 0.05).mean()
    mc = 4 * np.sqrt(0.05 * 0.95 / 20000)
    # exact at rho 0, conservative above; one method 10 times as spread: held (Welch's test from 5 seeds on)
    assert level <= 0.05 + mc and (rho > 0 or spread > 1 or level >= 0.05 - mc)


def test_combined_beats_paired_where_seeds_share_nothing_and_unpaired_where_they_share_much():
    rng = np.random.default_rng(3)
    power = {}
    for rho, effect in ((0.0, 1.0), (0.9, 0.5)):
        a, b = _pairs(rng, 4000, effect, rho)
        for test in ("combined", "paired", "unpaired"):
            power[rho, test] = (pair_evidence(a, b, SeedRule(pair_test=test)).p <= 0.05).mean()
    assert power[0.0, "combined"] > power[0.0, "paired"] + 0.02
    assert power[0.9, "combined"] > power[0.9, "unpaired"] + 0.5 and power[0.9, "combined"] > 0.7
    assert power[0.0, "combined"] > power[0.0, "unpaired"] - 0.03  # close to Welch's where it is the stronger


def _cell(rng, means, seeds):
    return {'{"noise_rate": 0.2}': {m: dict(enumerate(mu + rng.normal(0, 1, seeds))) for m, mu in means.items()}}


def test_every_significant_pair_is_reported_and_marked():
    from analysis.statistics.seed_marks import decision_mark

    rows = decide(_cell(np.random.default_rng(4), {"ce": 90, "gce": 80, "sce": 70, "ls": 89.9}, 6), SeedRule())
    by = {r["method"]: r for r in rows}
    best = next(m for m, r in by.items() if r["decision"] == "best")
    assert best in ("ce", "ls") and by["gce"]["beats"] == ["sce"] and by["sce"]["beats"] == []
    assert set(by[best]["beats"]) == {"gce", "sce"}
    mark = decision_mark({"decision": "worse", "seeds_n": 6, "seeds_beats": "sce"})
    assert mark == "n=6, worse; > sce" and decision_mark({"decision": "best", "seeds_n": 6, "seeds_beats": ""}) == (
        "n=6, best"
    )


def test_pairs_all_keeps_seeds_coming_for_an_open_pair_away_from_the_best():
    # ce far ahead of two close methods: with "best" the cell stops once both are worse, with "all" the
    # gce-sce pair keeps their seeds coming
    means = {"ce": 95.0, "gce": 80.0, "sce": 79.8}
    results = _cell(np.random.default_rng(5), means, 5)
    best = {r["method"]: r["needs_more"] for r in decide(results, SeedRule(futility=0))}
    every = {r["method"]: r["needs_more"] for r in decide(results, SeedRule(futility=0, pairs="all"))}
    assert best == {"ce": False, "gce": False, "sce": False}
    assert every == {"ce": False, "gce": True, "sce": True}
    assert "seeds run until every pair of a cell is decided" in SeedRule(pairs="all").describe()


def test_twins_stop_for_futility_before_the_cap_unless_it_is_off_or_a_margin_is_set():
    values = np.stack(_pairs(np.random.default_rng(6), 400, 0.0, 0.5), axis=1)[None]  # [1 sweep, 400 cells, 2, 10]
    from benchmarks.seeds_auto import run_sequential

    on, off = run_sequential(values, SeedRule()), run_sequential(values, SeedRule(futility=0))
    assert on["n"].mean() < 8.5 and (off["n"] == 10).mean() > 0.9
    claimed = on["beats"].any(axis=(-1, -2))[..., None]  # a false claim (at the error rate) also ends a pair
    assert ((on["n"] >= 7) | claimed).all()  # futility only from 7 seeds of 10 (FUTILITY_FROM)
    margin = run_sequential(values, SeedRule(min_effect=5.0))  # equivalence may still come: no futility
    assert (margin["decision"] == 3).any(axis=-1).mean() > 0.9  # every cell: the other method equivalent


def test_conditional_power_under_the_current_trend():
    # Phi((z / sqrt(t) - c) / sqrt(1 - t)): z 2 at half the cap, c 2 -> Phi((2.83 - 2) / 0.71) = 0.88
    assert conditional_power(np.array([2.0]), np.array([5]), 10, 2.0)[0] == pytest.approx(0.879, abs=1e-3)
    assert np.isnan(conditional_power(np.array([np.nan]), np.array([5]), 10, 2.0)[0])


def test_bad_rules_and_flags_are_refused():
    from sweeps.engine.flags import UsageError
    from sweeps.engine.seeds_auto import seed_flags

    with pytest.raises(ValueError, match="union bound"):
        SeedRule(boundary="union")
    with pytest.raises(ValueError, match="futility"):
        SeedRule(futility=1.0)
    parser = argparse.ArgumentParser()
    seed_flags.add_seed_args(parser, compare_default="loss")
    for argv, message in ((["--futility", "1.5"], "--futility=1.5"), (["--boundary", "union"], "--pair-test paired")):
        args = parser.parse_args(argv)
        args.seeds = "auto"
        with pytest.raises(UsageError, match=message):
            seed_flags.seed_rule_settings(args, {"loss": ["ce", "gce"]})
    args = parser.parse_args(["--pair-test", "paired", "--pairs", "all", "--futility", "0"])
    args.seeds = "auto"
    settings = seed_flags.seed_rule_settings(args, {"loss": ["ce", "gce"]})
    assert SeedRule(**settings) == SeedRule(pair_test="paired", pairs="all", futility=0.0)


def test_the_decisions_of_a_four_method_cell_come_from_holm_over_its_six_pairs():
    rng = np.random.default_rng(7)
    values = np.stack([m + rng.normal(0, 1, (3, 10)) for m in (90, 89, 80, 70)], axis=1)  # [3 cells, 4, 10]
    out = decide_arrays(values, SeedRule())
    assert out["beats"].shape == (3, 4, 4) and not (out["beats"] & out["beats"].transpose(0, 2, 1)).any()
    assert out["beats"][:, 2, 3].all() and out["beats"][:, 0, 3].all()  # 80 > 70 and 90 > 70 in every cell


def test_the_numpy_adastop_decides_as_the_package_does():
    pytest.importorskip("adastop", reason="the dev extra: pip install -e '.[dev]'")
    from benchmarks.seeds_adastop import adastop_arrays, alpha_for_error, check_against_package

    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(2, 2, 10))
    x[0] += 2.0  # one clear gap, one null pair
    assert check_against_package(x, y, 2, 5, 0.05) == 2
    assert adastop_arrays(x, y, 2, 5, 0.05)["decision"][0] == 1
    with pytest.raises(ValueError, match="permutation paths"):
        adastop_arrays(x, y, 5, 2, 0.05)  # 252^2 paths: the package samples them, not repeated here
    assert alpha_for_error({0.05: 0.1, 0.02: 0.048, 0.01: 0.03}, 0.05) == 0.02


def test_the_decisions_are_written_when_the_last_planned_trial_ends_without_another_suggest(tmp_path):
    # every method runs to the cap: Tune stops at num_samples and never asks `suggest` again
    from sweeps.engine.seeds_auto.seed_search import SeedSearcher
    from trainables.experiment.objective import Objective

    rule = SeedRule(min_seeds=3, max_seeds=3)
    searcher = SeedSearcher(
        [{"noise_rate": 0.5}], "loss", ["ce", "gce"], rule, Objective("val/acc", "max"), {}, str(tmp_path)
    )
    configs = {f"t{i}": searcher.suggest(f"t{i}") for i in range(6)}
    for trial_id, config in configs.items():
        assert not (tmp_path / "report" / "seeds.csv").exists()  # written once, when nothing is left
        searcher.on_trial_complete(trial_id, {"val/acc": 0.9 if config["loss"] == "ce" else 0.5 + config["seed"] / 100})
    assert (tmp_path / "report" / "seeds.csv").read_text().count("\n") == 3  # header and the two methods


def test_the_quick_benchmark_fails_a_sweep_row_below_its_power_ratio_or_a_null_row_above_alpha():
    from benchmarks.seeds_auto import quick_failures, sweep_goals

    def sweep(effect, ratio, fixed=0.7, fwer=0.03):
        row = {"rho": 0.5, "effect_sd": effect, "sequential_fwer": fwer, "best_fixed_power": fixed}
        return row | {"power_ratio": ratio, "sequential_seeds_per_cell": 24.0, "fixed_seeds_per_cell": 30.0}

    null = {"noise": "normal", "rho": 0.0, "effect_sd": 0.0, "draws": 400, "rule_combined": {"rate": 0.05}}
    ok = {"sweeps": [sweep(0.0, None), sweep(1.0, 0.86), sweep(0.5, 0.5, fixed=0.3)], "rows": [null]}
    assert quick_failures(ok, 0.05, 0.008) == []  # 0.5x at a fixed power of 0.3: outside the goal
    low = {"sweeps": [sweep(1.0, 0.84)], "rows": [null | {"rule_combined": {"rate": 0.09}}]}
    failed = quick_failures(low, 0.05, 0.008)
    assert len(failed) == 2 and "0.840x" in failed[0] and "false claims 0.0900" in failed[1]
    assert quick_failures({"sweeps": [sweep(0.0, None, fwer=0.08)], "rows": []}, 0.05, 0.008)
    # the full form's goals: 0.9x where the better grid has power >= 0.5, seeds <= 0.75x where >= 0.95
    assert sweep_goals(sweep(1.0, 0.89), 0.05, 0.008).startswith("power 0.890x")
    assert sweep_goals(sweep(2.0, 1.0, fixed=0.99), 0.05, 0.008) == "seeds 0.80x the fixed grid's > 0.75x"
    assert sweep_goals(sweep(1.0, 0.95), 0.05, 0.008) == ""
