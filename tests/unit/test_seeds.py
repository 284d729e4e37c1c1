"""Tests of `analysis/statistics/seeds.py`: the `--seeds auto` decision rule on constructed paired samples."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.statistics import sequential
from analysis.statistics.seed_looks import look_weights, pair_evidence, tost_pvalues, union_p
from analysis.statistics.seeds import SeedRule, decide, decide_arrays
from analysis.statistics.stats import holm
from trainables.experiment.objective import Objective


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
            "A": _by_seed(90 + rng.normal(0, 1, 6)),
            "B": _by_seed(70 + rng.normal(0, 1, 6)),
            "C": _by_seed(89.5 + rng.normal(0, 1, 6)),
        }
    }
    rows = _rows(results, SeedRule(max_seeds=10, futility=0))  # the close pair stays open until the cap
    best = next(m for (_, m), r in rows.items() if r["decision"] == "best")
    assert best in ("A", "C") and rows["c", "B"]["decision"] == "worse" and not rows["c", "B"]["needs_more"]
    assert rows["c", best]["needs_more"]


def test_a_method_below_min_seeds_gets_seeds_first():
    results = {"c": {"A": _by_seed([90.0, 91.0]), "B": {}}}
    rows = _rows(results, SeedRule(min_seeds=3))
    assert rows["c", "A"]["needs_more"] and rows["c", "B"]["needs_more"]


def test_holm_matches_the_step_down_formula():
    # Holm (1979): sorted 0.01, 0.02, 0.04 with m=3 -> 0.03, max(0.03, 0.04), max(0.04, 0.04)
    assert holm(np.array([0.04, 0.01, 0.02]))[0] == pytest.approx([0.04, 0.03, 0.04])
    assert holm(np.array([0.5, 0.9]))[0] == pytest.approx([1.0, 1.0])
    # vectorised: one family per row, NaN not counted
    rows = holm(np.array([[0.04, 0.01, 0.02], [0.01, np.nan, 0.04]]))[0]
    assert rows[0] == pytest.approx([0.04, 0.03, 0.04]) and rows[1, [0, 2]] == pytest.approx([0.02, 0.04])


@pytest.mark.parametrize("spending", ["pocock", "obf", "uniform"])
def test_look_weights_spend_exactly_alpha(spending):
    w = look_weights(SeedRule(min_seeds=3, max_seeds=10, spending=spending))
    assert len(w) == 8 and w.sum() == pytest.approx(1.0) and (w > 0).all()


def test_union_p_is_the_smallest_weighted_look():
    w = np.array([0.25, 0.75])
    assert union_p(np.array([0.01, 0.3]), w) == pytest.approx(0.04)
    assert union_p(np.array([np.nan, np.nan]), w) == 1.0


@pytest.mark.parametrize("shape", ["obf", "pocock"])
def test_the_exact_boundary_holds_alpha_on_fresh_null_paths_and_beats_the_union_bound(shape):
    # fresh null paths (another seed than the calibration's), of any variance; the paired test's law
    a, b = np.random.default_rng(7).normal(0, 3.0, (2, 20000, 10))
    exact = SeedRule(min_seeds=3, max_seeds=10, boundary=shape, pair_test="paired")
    union = SeedRule(min_seeds=3, max_seeds=10, boundary="union", spending=shape, pair_test="paired")
    level = (pair_evidence(a, b, exact).p <= 0.05).mean()
    assert abs(level - 0.05) < 4 * np.sqrt(0.05 * 0.95 / 20000)  # exact up to Monte-Carlo error
    assert (pair_evidence(a, b, union).p <= 0.05).mean() < level - 0.005  # the union bound wastes level


def test_a_look_not_taken_only_raises_the_sequential_p():
    a, b = np.random.default_rng(8).normal(0.8, 1.0, (500, 10)), np.zeros((500, 10))
    rule = SeedRule(min_seeds=3, max_seeds=10)
    p_all = pair_evidence(a, b, rule).p
    p_five = pair_evidence(np.where(np.arange(10) < 5, a, np.nan), b, rule).p
    assert (p_five >= p_all).all() and (p_five > p_all).any()
    assert pair_evidence(np.full((1, 10), np.nan), np.zeros((1, 10)), rule).p == [1.0]


def test_the_obrien_fleming_boundary_is_strict_early_and_near_the_fixed_test_late():
    b = sequential.boundary(0.05, "obf", 3, 10)
    assert b["z"][0] > 3.5 and 1.96 < b["z"][-1] < 2.3 and b["mc_se"] < 0.001 and b["paths"] >= 100_000
    assert sequential.boundary(0.05, "pocock", 3, 10)["z"] == pytest.approx(
        [sequential.boundary(0.05, "pocock", 3, 10)["c"]] * 8
    )
    with pytest.raises(ValueError, match="boundary shape"):
        sequential.shape_factors("uniform", 3, 10)


def test_the_family_is_one_cell_or_the_whole_sweep():
    # the same clear-ish pair in 6 cells: Holm over a cell (1 comparison) keeps p*, over the sweep multiplies it
    rng = np.random.default_rng(9)
    values = np.stack([80 + rng.normal(0, 1, (6, 10)), 79 + rng.normal(0, 1, (6, 10))], axis=1)  # [6 cells, 2, 10]
    cell = decide_arrays(values, SeedRule(family="cell"))["p_adjusted"]
    sweep = decide_arrays(values, SeedRule(family="sweep"))["p_adjusted"]
    assert (np.nan_to_num(sweep) >= np.nan_to_num(cell)).all() and (np.nan_to_num(sweep) > np.nan_to_num(cell)).any()
    assert (
        "pair of methods of each cell" in SeedRule().describe()
        and "every pair of methods of every cell of the sweep" in SeedRule(family="sweep").describe()
    )
    with pytest.raises(ValueError, match="family"):
        SeedRule(family="table")


def test_tost_pvalues_gives_the_two_one_sided_tests_of_tost():
    p_low, p_high = tost_pvalues(np.array([0.1, -0.1, 0.05, 0.0]), SeedRule(min_seeds=3, max_seeds=4, min_effect=1))
    assert p_low.shape == p_high.shape == (2,) and (p_low < 0.05).all() and (p_high < 0.05).all()


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
    from benchmarks.seeds_auto import sweep_scenario

    r = sweep_scenario(np.random.default_rng(0), 40, 4.0, SeedRule())
    assert r["sequential_power"] > 0.8 and r["sequential_seeds_per_cell"] < r["fixed_seeds_per_cell"]
    aa = sweep_scenario(np.random.default_rng(1), 40, 0.0, SeedRule())
    assert aa["sequential_power"] is None and aa["sequential_seeds_per_cell"] <= 30


def test_the_seeds_table_has_the_cell_axes_and_the_paper_marks():
    from analysis.statistics.seed_marks import decision_mark
    from analysis.statistics.seeds import seeds_frame

    rng = np.random.default_rng(0)
    cell = '{"noise_rate": 0.5, "noise_type": "sym"}'
    results = {cell: {"ce": _by_seed(90 + rng.normal(0, 1, 4)), "gce": _by_seed(80 + rng.normal(0, 1, 4))}}
    rule = SeedRule(max_seeds=6)
    frame = seeds_frame(decide(results, rule), "loss", rule)
    assert list(frame.columns) == [
        *("noise_rate", "noise_type", "method", "n", "mean", "std", "diff_vs_best", "p_adjusted", "decision"),
        *("beats", "compare", "rule"),
    ]
    marks = [decision_mark(row) for _, row in frame.rename(columns={"n": "seeds_n", "beats": "seeds_beats"}).iterrows()]
    assert marks == ["n=4, best; > gce", "n=4, worse"] and frame.attrs["method_axis"] == "loss"
    assert set(frame["rule"]) == {rule.describe(2)} and set(frame["compare"]) == {"loss"}
    assert "Holm" in SeedRule().describe() and "Haybittle-Peto" in SeedRule().describe()
    assert "O'Brien-Fleming" in SeedRule(boundary="obf").describe()
    assert "Lan & DeMets" in SeedRule(boundary="union", pair_test="paired").describe()


def test_the_searcher_hands_out_seeds_until_decided_then_finishes(tmp_path):
    from ray.tune.search import Searcher

    from sweeps.engine.seeds_auto.seed_search import SeedSearcher

    rule = SeedRule(min_seeds=3, max_seeds=6)
    searcher = SeedSearcher(
        [{"noise_rate": 0.5}],
        "loss",
        ["ce", "gce"],
        rule,
        Objective("val/acc", "max"),
        {},
        experiment_dir=str(tmp_path),
    )
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
    # on FINISHED the decisions are written, before the sweep's summary and report read them
    decisions = pd.read_csv(tmp_path / "report" / "seeds.csv").set_index("method")
    assert decisions.loc["gce", "decision"] == "worse" and decisions.loc["ce", "n"] == count // 2
    searcher.save(str(tmp_path / "s.pkl"))
    again = SeedSearcher([], "loss", [], rule, Objective("val/acc", "max"), {})
    again.restore(str(tmp_path / "s.pkl"))
    assert again.values == searcher.values and again.suggest("next") == Searcher.FINISHED


def test_the_flags_offer_the_rules_families_and_boundaries_and_default_to_the_rule():
    import argparse

    from sweeps.engine.seeds_auto import seed_flags

    parser = argparse.ArgumentParser()
    seed_flags.add_seed_args(parser, compare_default="loss")
    choices = {action.dest: action.choices for action in parser._actions}
    assert choices["family"] == ("cell", "sweep") and choices["boundary"] == ("hp", "obf", "pocock", "union")
    assert choices["pair_test"] == ("combined", "paired", "unpaired") and choices["pairs"] == ("best", "all")
    args = parser.parse_args([])
    args.seeds = "auto"
    settings = seed_flags.seed_rule_settings(args, {"loss": ["ce", "gce"]})
    assert SeedRule(**settings) == SeedRule() and seed_flags.seed_count(args) == SeedRule().max_seeds == 10


def test_an_errored_seed_is_rerun_once_as_the_next_seed():
    from ray.tune.search import Searcher

    from sweeps.engine.seeds_auto.seed_search import SeedSearcher

    rule = SeedRule(min_seeds=3, max_seeds=4)
    searcher = SeedSearcher([{"noise_rate": 0.5}], "loss", ["ce", "gce"], rule, Objective("val/acc", "max"), {})
    first = searcher.suggest("t0")
    searcher.on_trial_complete("t0", error=True)
    again = searcher.suggest("t1")
    assert again == first  # the same (method, seed) handed out next
    searcher.on_trial_complete("t1", error=True)
    seen = []
    while isinstance(config := searcher.suggest(f"t{len(seen) + 2}"), dict):
        seen.append((config["loss"], config["seed"]))
        searcher.on_trial_complete(f"t{len(seen) + 1}", {"val/acc": 0.5 + 0.01 * len(seen)})
    assert (first["loss"], first["seed"]) not in seen  # not a third time
    assert not any(m == first["loss"] for m, _ in seen)  # its counted seeds end at the failed one: no more run
    assert config == Searcher.FINISHED


def test_the_tables_of_an_auto_sweep_show_n_and_the_decision_and_state_the_rule(tmp_path):
    import jsonschema

    import analysis
    from analysis.statistics.seeds import seeds_frame
    from analysis.tables.json_output import schema, summary_document
    from tests.helpers.analysis_fixtures import paper_grid
    from trainables.experiment import records

    experiment = paper_grid(tmp_path, losses=("ce", "gce"), types=("sym",), rates=(0.2, 0.4), seeds=(0, 1, 2, 3))
    cells = {
        '{"noise_rate": 0.2, "noise_type": "sym"}': {"ce": _by_seed([0.5, 0.6, 0.7, 0.8]), "gce": _by_seed([0.6] * 3)},
        '{"noise_rate": 0.4, "noise_type": "sym"}': {"ce": _by_seed([0.5] * 4), "gce": _by_seed([0.5] * 4)},
    }
    rule = SeedRule(min_seeds=3, max_seeds=4)
    frame = seeds_frame(decide(cells, rule), "loss", rule)
    frame["decision"] = ["best", "worse", "best", "undecided"]  # the marks, whatever the toy values decide
    records.write_seeds_table(str(experiment), frame.to_csv(index=False))
    trials, history = analysis.load_experiment(experiment)

    paper = analysis.paper_table(trials, history, analysis.Objective(select="last"))
    assert paper.attrs["seed_rule"] == rule.describe(2) and paper.attrs["baseline"] is None  # no fixed-n † test
    markdown, latex = (analysis.format_paper_table(paper, style) for style in ("markdown", "latex"))
    for text in (markdown, latex):
        assert "(n=3, worse)" in text and "(n=4, undecided)" in text and "(n=4, best)" in text
        assert "Holm-corrected over the 1 pair of methods of each cell" in text and "No significance test" not in text
    summary = analysis.summary_text(trials, history, analysis.Objective(select="last"))
    assert "(n=3, worse)" in summary and rule.describe(2) in summary

    best = analysis.best_runs(trials, analysis.Objective("val/acc", "max"))
    text = analysis.format_table(best)
    assert "seeds, decision" in text and "n=3, worse" in text and "n=4, undecided" in text

    document = summary_document(trials, history, analysis.Objective("val/acc", "max", select="last"))
    jsonschema.Draft202012Validator(schema("raysweep.summary/2")).validate(document)
    assert document["seed_rule"] == rule.describe(2)
    decisions = {(c["key"]["loss"], c["key"]["noise_rate"]): (c["seeds_n"], c["decision"]) for c in document["cells"]}
    assert decisions[("gce", 0.2)] == (3, "worse") and decisions[("gce", 0.4)] == (4, "undecided")


def test_with_shared_seed_draws_a_two_point_gap_is_decided_more_often_than_by_the_union_bound_and_twins_never():
    from benchmarks.seeds_auto import run_sequential

    rng = np.random.default_rng(11)
    shared = rng.normal(0, 3, (200, 2, 1, 10))  # each seed's split, noise and init: the same for every method
    own = rng.normal(0, 1, (200, 2, 2, 10))
    values = 85 + shared + own - np.array([[0.0, 2.0], [0.0, 0.0]])[..., None]  # cell 0: a 2-point gap; 1: twins
    exact = run_sequential(values, SeedRule(pair_test="paired"))  # the same test, the exact boundary
    obf = run_sequential(values, SeedRule(pair_test="paired", boundary="obf"))  # exact, the union's OBF shape
    union = run_sequential(values, SeedRule(boundary="union", pair_test="paired"))
    decided = lambda out: (out["decision"][:, 0] == 2).any(axis=-1).mean()  # noqa: E731  (worse than the best)
    seeds = lambda out: out["n"][:, 0].sum(axis=-1).mean()  # noqa: E731
    assert decided(exact) > decided(union) + 0.03 and decided(exact) > 0.8  # hp keeps its level for the cap
    assert decided(obf) > decided(union) and seeds(obf) < seeds(union)  # the same shape, exact: sooner too
    twins_claimed = run_sequential(values, SeedRule())["beats"][:, 1].any(axis=(-1, -2)).mean()  # the default
    assert twins_claimed <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)  # identical methods: a claim only at the error rate


def test_the_null_law_is_cached_on_disk_and_a_torn_cache_is_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    law = sequential.null_law.__wrapped__  # past the in-memory cache
    first = law(3, 5, "obf", "combined", 2000)
    path = sequential.cache_file(3, 5, "obf", "combined", 2000)
    assert path.startswith(str(tmp_path)) and np.array_equal(law(3, 5, "obf", "combined", 2000)[0], first[0])
    with open(path, "wb") as f:
        f.write(b"torn")
    assert np.array_equal(law(3, 5, "obf", "combined", 2000)[1], first[1])  # recomputed: the same seeded paths


def test_a_torn_or_old_seeds_table_is_skipped_with_a_warning_naming_it(tmp_path):
    from analysis.statistics.seed_marks import load_decisions
    from trainables.experiment import records

    path = Path(records.seeds_table_path(str(tmp_path)))
    assert load_decisions(str(tmp_path)) is None  # no file: not an auto sweep, no warning
    path.parent.mkdir()
    path.write_text('noise_rate,method,n,decision\n0.5,ce,3,best\n"0.5,gce')  # torn inside a quoted field
    with pytest.warns(UserWarning, match="seeds.csv: skipped"):
        assert load_decisions(str(tmp_path)) is None
    path.write_text("noise_rate,method,n,decision\n0.5,ce,3,best\n")  # an I3 file: no compare, rule columns
    with pytest.warns(UserWarning, match=r"no column\(s\) \['compare', 'rule'\]"):
        assert load_decisions(str(tmp_path)) is None


def test_the_simulation_json_has_every_row_and_the_keys_of_each(tmp_path, monkeypatch):
    import json

    from benchmarks import seeds_auto

    # a small grid: every row kind (null and effect, side by side and sweeps) in seconds
    monkeypatch.setattr(seeds_auto, "RHOS", (0.0, 0.9))
    monkeypatch.setattr(seeds_auto, "EFFECTS", (0.0, 1.0))
    monkeypatch.setattr(seeds_auto, "SWEEP_EFFECTS", (1.0,))
    argv = ["--quick", "--null-draws", "30", "--draws", "20", "--sweeps", "3", "--check-draws", "1"]
    assert seeds_auto.main([*argv, "--json", str(tmp_path / "out.json"), "--markdown", str(tmp_path / "out.md")]) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    assert {(r["rho"], r["effect_sd"]) for r in result["rows"]} == {(r, e) for r in (0.0, 0.9) for e in (0.0, 1.0)}
    assert {(r["rho"], r["effect_sd"]) for r in result["sweeps"]} == {(0.0, 1.0), (0.9, 1.0)}
    keys = {"rule_combined", "rule_paired", "rule_unpaired", "fixed_paired", "fixed_welch", "adastop", "goals_missed"}
    assert all(keys <= set(r) for r in result["rows"]) and result["rule"]["alpha"] == 0.05
    matched = str(result["adastop"]["alpha_matched"])
    assert all(matched in r["adastop"] and "0.05" in r["adastop"] for r in result["rows"])
    assert (
        result["package_checked"] == 1
        and "| rho | effect (sd) | raysweep (combined)" in (tmp_path / "out.md").read_text()
    )
