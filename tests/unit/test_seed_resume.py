"""`--seeds auto --resume` when the searcher's saved state and Tune's experiment state come from different saves
(Tune copies them to storage apart; a driver SIGKILLed meanwhile leaves them so: a CI run of round 11 hung
400 s on it, another ran five seeds twice)."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import pytest

from analysis.statistics.seeds import SeedRule
from trainables.experiment.objective import Objective

CELL = {"noise_rate": 0.5}
VALUES = {"ce": 0.9, "gce": 0.8}  # a clear gap: decided at the rule's minimum seeds


def _searcher(tmp_path):
    from sweeps.engine.seeds_auto.seed_search import SeedSearcher

    rule = SeedRule(min_seeds=3, max_seeds=6)
    searcher = SeedSearcher([CELL], "loss", ["ce", "gce"], rule, Objective("val/acc", "max"), {}, str(tmp_path))
    assert searcher.set_max_concurrency(2)  # True: Tune's ConcurrencyLimiter keeps no list of its own
    return searcher


def _result(config: dict, i: int) -> dict:
    return {"val/acc": VALUES[config["loss"]] + 0.001 * (i % 3)}


def _write_state(folder, trials: list[tuple[str, dict, str, dict]]) -> None:
    """An experiment state as Tune writes it: each (trial id, config, status, last result) a `Trial`'s JSON."""
    from ray.tune import PlacementGroupFactory
    from ray.tune.experiment import Trial

    data = []
    for trial_id, config, status, last in trials:
        trial = Trial(
            "f",
            config=config,
            trial_id=trial_id,
            stub=True,
            placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
        )
        trial.create_placement_group_factory()
        trial.set_status(status)
        trial.run_metadata.last_result = last
        data.append(trial.get_json_state())
    (folder / "experiment_state-2026-11-28_00-00-00.json").write_text(
        json.dumps({"trial_data": data, "runner_data": {}})
    )


@pytest.mark.parametrize("saved", ["older", "torn"])
def test_a_resumed_searcher_takes_tunes_trials_as_the_truth_and_runs_no_seed_twice(tmp_path, saved):
    """The saved searcher (an older save, or a file cut short) has trial t1 running and never saw t2 or t3; the
    experiment state has t1 and t2 finished and t3 running. Restored, it waits only for t3, counts t1 and t2,
    hands out no seed a trial already has, and finishes (the old searcher waited for t1 forever)."""
    first = _searcher(tmp_path)
    configs = {f"t{i}": first.suggest(f"t{i}") for i in range(2)}
    first.on_trial_complete("t0", _result(configs["t0"], 0))
    configs["t2"] = first.suggest("t2")
    first.save(str(tmp_path / "searcher-state-x.pkl"))  # running: t1 and t2
    if saved == "torn":
        (tmp_path / "searcher-state-x.pkl").write_bytes((tmp_path / "searcher-state-x.pkl").read_bytes()[:40])
    first.on_trial_complete("t1", _result(configs["t1"], 1))
    first.on_trial_complete("t2", _result(configs["t2"], 2))
    configs["t3"] = first.suggest("t3")
    _write_state(
        tmp_path,
        [(t, configs[t], "TERMINATED", _result(configs[t], i)) for i, t in enumerate(("t0", "t1", "t2"))]
        + [("t3", configs["t3"], "RUNNING", {})],
    )

    again = _searcher(tmp_path)  # as Tuner.restore unpickles it from tuner.pkl: its state at the start
    again.restore(str(tmp_path / "searcher-state-x.pkl"))
    assert list(again.running) == ["t3"] and len(again.values) == 3
    from ray.tune.search import Searcher

    count, seen = 4, Counter((c["loss"], c["seed"]) for c in configs.values())
    again.on_trial_complete("t3", _result(configs["t3"], 3))
    while isinstance(config := again.suggest(f"t{count}"), dict):
        seen[config["loss"], config["seed"]] += 1
        again.on_trial_complete(f"t{count}", _result(config, count))
        count += 1
    assert config == Searcher.FINISHED and max(seen.values()) == 1, seen
    assert len(again.values) == count and count <= 2 * 6


def test_a_searcher_holds_no_more_trials_than_tunes_max_concurrent_trials(tmp_path):
    searcher = _searcher(tmp_path)
    assert searcher.suggest("t0") and searcher.suggest("t1")
    assert searcher.suggest("t2") is None  # two running: Tune asks again later
    searcher.on_trial_complete("t0", {"val/acc": 0.9})
    assert isinstance(searcher.suggest("t2"), dict)


def test_no_readable_experiment_state_leaves_the_saved_searcher_as_it_was(tmp_path, capsys):
    from sweeps.engine.run.restored_trials import restored_trials

    assert restored_trials(str(tmp_path)) is None  # no state: nothing said
    (tmp_path / "experiment_state-2026.json").write_text('{"trial_data": [["{\\"status\\": ')
    assert restored_trials(str(tmp_path)) is None
    assert "experiment_state-2026.json not read" in capsys.readouterr().err
    searcher = _searcher(tmp_path)
    searcher.suggest("t0")
    searcher.save(str(tmp_path / "s.pkl"))
    again = _searcher(tmp_path)
    again.restore(str(tmp_path / "s.pkl"))
    assert again.running == searcher.running


@pytest.mark.parametrize("saved", [True, False])
def test_a_resumed_searcher_counts_the_trials_that_ended_after_the_save_that_reached_storage(tmp_path, saved):
    """Tune's last save that reached storage has t0 finished and t1 running; t1 and t2 ended after it, then the
    driver was SIGKILLed (a CI run of 44b3d4b ran 8 seeds twice). The searcher's journal, written at each end,
    counts them: restored (from its tuner.pkl copy, as Tune does), it waits only for t1, which Tune runs again,
    and hands out no seed of t0, t1 or t2. Without a saved searcher state at all it does the same."""
    first = _searcher(tmp_path)
    at_start = pickle.dumps(first)  # the searcher as tuner.pkl holds it
    configs = {f"t{i}": first.suggest(f"t{i}") for i in range(2)}
    first.on_trial_complete("t0", _result(configs["t0"], 0))
    first.save(str(tmp_path / "searcher-state-x.pkl"))  # t0 counted, t1 running
    if not saved:
        (tmp_path / "searcher-state-x.pkl").unlink()
    _write_state(
        tmp_path,
        [("t0", configs["t0"], "TERMINATED", _result(configs["t0"], 0)), ("t1", configs["t1"], "RUNNING", {})],
    )
    first.on_trial_complete("t1", _result(configs["t1"], 1))
    configs["t2"] = first.suggest("t2")
    first.on_trial_complete("t2", _result(configs["t2"], 2))
    ended = {(c["loss"], c["seed"]) for c in configs.values()}

    again = pickle.loads(at_start)
    again.restore_from_dir(str(tmp_path))
    assert {(m, s) for (_, m, s) in again.values} == ended and list(again.running) == ["t1"]
    handed = again.suggest("n0")
    assert (handed["loss"], handed["seed"]) not in ended, handed
    assert again.suggest("n1") is None  # t1 (run again by Tune) and n0 hold the two slots
