"""Tests of `analysis/seeds.py`: the `--seeds auto` decision rule on constructed paired samples."""

import numpy as np
import pytest

from analysis.seeds import SeedRule, decide, holm, look_weights, sequential_p


def _by_seed(values):
    return dict(enumerate(values))


def _rows(results, rule):
    return {(r["cell"], r["method"]): r for r in decide(results, rule)}


def test_a_clear_difference_is_decided_at_four_seeds():
    rng = np.random.default_rng(0)
    results = {"c1": {"A": _by_seed(90 + rng.normal(0, 1, 4)), "B": _by_seed(80 + rng.normal(0, 1, 4))}}
    rows = _rows(results, SeedRule(min_seeds=3, max_seeds=6))
    assert rows["c1", "A"]["decision"] == "best" and rows["c1", "B"]["decision"] == "worse"
    assert rows["c1", "B"]["diff_vs_best"] == pytest.approx(-10, abs=2)
    assert rows["c1", "B"]["p_adjusted"] <= 0.05
    assert not rows["c1", "A"]["needs_more"] and not rows["c1", "B"]["needs_more"]


def test_mode_min_makes_the_lower_method_best():
    results = {"c": {"A": _by_seed([1.0, 1.1, 0.9, 1.0]), "B": _by_seed([2.0, 2.2, 1.9, 2.1])}}
    rows = _rows(results, SeedRule(mode="min", max_seeds=4))
    assert rows["c", "A"]["decision"] == "best" and rows["c", "B"]["decision"] == "worse"


def test_identical_methods_stay_undecided_and_run_to_the_cap():
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0, 3, 6)  # shared by both methods: the same split and noise draw per seed
    a, b = 85 + seed_effect + rng.normal(0, 1, 6), 85 + seed_effect + rng.normal(0, 1, 6)
    rule = SeedRule(min_seeds=3, max_seeds=6)
    early = _rows({"c2": {"A": _by_seed(a[:3]), "B": _by_seed(b[:3])}}, rule)
    assert {r["decision"] for r in early.values()} == {"best", "undecided"}
    assert all(r["needs_more"] for r in early.values())
    at_cap = _rows({"c2": {"A": _by_seed(a), "B": _by_seed(b)}}, rule)
    assert {r["decision"] for r in at_cap.values()} == {"best", "undecided"}
    assert not any(r["needs_more"] for r in at_cap.values())


def test_exactly_equal_values_make_no_claim():
    results = {"c": {"A": _by_seed([80.0] * 5), "B": _by_seed([80.0] * 5)}}
    rows = _rows(results, SeedRule(max_seeds=5))
    assert sorted(r["decision"] for r in rows.values()) == ["best", "undecided"]


def test_within_the_margin_is_equivalent():
    rng = np.random.default_rng(2)
    base = 85 + rng.normal(0, 3, 8)
    results = {"c": {"A": _by_seed(base + rng.normal(0, 0.1, 8)), "B": _by_seed(base + rng.normal(0, 0.1, 8))}}
    rows = _rows(results, SeedRule(min_seeds=3, max_seeds=10, min_effect=1.0))
    assert sorted(r["decision"] for r in rows.values()) == ["best", "equivalent"]
    assert not any(r["needs_more"] for r in rows.values())
    no_margin = _rows(results, SeedRule(min_seeds=3, max_seeds=10))
    assert sorted(r["decision"] for r in no_margin.values()) == ["best", "undecided"]


def test_the_worse_method_stops_while_the_undecided_one_continues():
    rng = np.random.default_rng(3)
    results = {
        "c": {
            "A": _by_seed(90 + rng.normal(0, 1, 4)),
            "B": _by_seed(70 + rng.normal(0, 1, 4)),
            "C": _by_seed(89.5 + rng.normal(0, 1, 4)),
        }
    }
    rows = _rows(results, SeedRule(max_seeds=10))
    best = next(m for (_, m), r in rows.items() if r["decision"] == "best")
    assert best in ("A", "C") and rows["c", "B"]["decision"] == "worse" and not rows["c", "B"]["needs_more"]
    assert rows["c", best]["needs_more"]


def test_a_method_below_min_seeds_gets_seeds_first():
    results = {"c": {"A": _by_seed([90.0, 91.0]), "B": {}}}
    rows = _rows(results, SeedRule(min_seeds=3))
    assert rows["c", "A"]["needs_more"] and rows["c", "B"]["needs_more"]


def test_holm_matches_the_step_down_formula():
    # Holm (1979): sorted 0.01, 0.02, 0.04 with m=3 -> 0.03, max(0.03, 0.04), max(0.04, 0.04)
    assert holm(np.array([0.04, 0.01, 0.02])) == pytest.approx([0.04, 0.03, 0.04])
    assert holm(np.array([0.5, 0.9])) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("spending", ["pocock", "obf", "uniform"])
def test_look_weights_spend_exactly_alpha(spending):
    w = look_weights(SeedRule(min_seeds=3, max_seeds=10, spending=spending))
    assert len(w) == 8 and w.sum() == pytest.approx(1.0) and (w > 0).all()


def test_sequential_p_is_the_smallest_weighted_look():
    w = np.array([0.25, 0.75])
    assert sequential_p(np.array([0.01, 0.3]), w) == pytest.approx(0.04)
    assert sequential_p(np.array([np.nan, np.nan]), w) == 1.0


def test_bad_rules_are_refused():
    with pytest.raises(ValueError, match="min_seeds"):
        SeedRule(min_seeds=5, max_seeds=4)
    with pytest.raises(ValueError, match="alpha"):
        SeedRule(alpha=1.5)


def test_a_seed_after_a_gap_waits_for_the_missing_one():
    results = {"c": {"A": {0: 90.0, 1: 91.0, 2: 90.5, 4: 99.0}, "B": _by_seed([80.0, 81.0, 80.2])}}
    rows = _rows(results, SeedRule(max_seeds=10))
    assert rows["c", "A"]["n"] == 3 and rows["c", "A"]["mean"] == pytest.approx(90.5)


def test_the_simulation_counts_clear_effects_as_power_and_saves_seeds():
    from benchmarks.seeds_auto import scenario

    r = scenario(np.random.default_rng(0), 40, 4.0, SeedRule())
    assert r["sequential_power"] > 0.8 and r["sequential_seeds_per_cell"] < r["fixed_seeds_per_cell"]
    aa = scenario(np.random.default_rng(1), 40, 0.0, SeedRule())
    assert aa["sequential_power"] is None and aa["sequential_seeds_per_cell"] <= 30


def test_the_seeds_table_has_the_cell_axes_and_the_paper_marks():
    from analysis.seeds import decision_marks, seeds_frame

    rng = np.random.default_rng(0)
    cell = '{"noise_rate": 0.5, "noise_type": "sym"}'
    results = {cell: {"ce": _by_seed(90 + rng.normal(0, 1, 4)), "gce": _by_seed(80 + rng.normal(0, 1, 4))}}
    frame = seeds_frame(decide(results, SeedRule(max_seeds=6)), "loss")
    assert list(frame.columns) == [
        *("noise_rate", "noise_type", "method", "n", "mean", "std", "diff_vs_best", "p_adjusted", "decision")
    ]
    assert decision_marks(frame) == ["n=4*", "n=4"] and frame.attrs["method_axis"] == "loss"
    assert "Holm" in SeedRule().describe() and "Lan & DeMets" in SeedRule().describe()


def test_the_searcher_hands_out_seeds_until_decided_then_finishes(tmp_path):
    from ray.tune.search import Searcher

    from sweeps.engine.seed_search import SeedSearcher

    rule = SeedRule(min_seeds=3, max_seeds=6)
    searcher = SeedSearcher([{"noise_rate": 0.5}], "loss", ["ce", "gce"], rule, "val/acc", "max", {})
    rng = np.random.default_rng(0)
    running = {}
    for i in range(4):  # four free slots: seeds are handed out before any result, the least advanced first
        running[f"t{i}"] = searcher.suggest(f"t{i}")
    assert sorted((c["loss"], c["seed"]) for c in running.values()) == [("ce", 0), ("ce", 1), ("gce", 0), ("gce", 1)]
    assert all(c["noise_rate"] == 0.5 for c in running.values())
    # one slot from here on: the four finish, then seeds one by one until the 10-point gap is decided
    for trial_id, config in running.items():
        searcher.on_trial_complete(trial_id, {"val/acc": (90.0 if config["loss"] == "ce" else 80.0) + rng.normal()})
    count = 4
    while isinstance(config := searcher.suggest(f"t{count}"), dict):
        value = (90.0 if config["loss"] == "ce" else 80.0) + rng.normal()
        searcher.on_trial_complete(f"t{count}", {"val/acc": value})
        count += 1
    assert config == Searcher.FINISHED and 6 <= count <= 8  # decided at 3 or 4 seeds per method, not the cap's 12
    searcher.save(str(tmp_path / "s.pkl"))
    again = SeedSearcher([], "loss", [], rule, "val/acc", "max", {})
    again.restore(str(tmp_path / "s.pkl"))
    assert again.values == searcher.values and again.suggest("next") == Searcher.FINISHED
