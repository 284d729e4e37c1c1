"""`--seeds auto --resume` when the searcher's saved state and Tune's experiment state come from different saves
(Tune copies them to storage apart; a driver SIGKILLed meanwhile leaves them so: a CI run of round 11 hung
400 s on it, another ran five seeds twice)."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import pytest

from analysis.statistics.seeds import SeedRule
from trainables import ray_private
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


def _write_state(folder, trials: list[tuple[str, dict, str, dict]], folders: dict | None = None) -> None:
    """An experiment state as Tune writes it: each (trial id, config, status, last result) a `Trial`'s JSON;
    `folders`: {trial id: its folder name in `folder`} for those that have one."""
    from ray.tune import PlacementGroupFactory
    from ray.tune.experiment import Trial

    data = []
    for trial_id, config, status, last in trials:
        name = (folders or {}).get(trial_id)
        trial = Trial(
            "f",
            config=config,
            trial_id=trial_id,
            stub=True,
            placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
            storage=ray_private.storage_context_class()(str(folder.parent), folder.name, trial_dir_name=name)
            if name
            else None,
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


def test_a_restarted_trial_that_reports_nothing_new_is_counted_from_its_history_not_as_failed(tmp_path, capsys):
    """`--resume` restarts trial t1, which Tune's restored state has running with an empty last result (saved before
    its first report), though its command had already reported: the restarted command's line is a step reported
    before, so it reports nothing new, and Tune completes it with that empty result. The searcher reads the value
    from t1's folder, as the tables do, instead of counting the seed as failed (its method's seeds then ended there,
    and a clear cell was `undecided`). A diverged end, without the metric, still counts as failed."""
    searcher = _searcher(tmp_path)
    configs = {f"t{i}": searcher.suggest(f"t{i}") for i in range(2)}
    for i, trial_id in enumerate(configs):
        folder = tmp_path / f"trial_{trial_id}"
        folder.mkdir()
        (folder / "params.json").write_text(json.dumps(configs[trial_id]))
        row = {**_result(configs[trial_id], i), "trial_id": trial_id, "training_iteration": 1, "done": False}
        (folder / "result.json").write_text(json.dumps(row) + "\n")
    searcher.on_trial_complete("t1", {"trial_id": "t1", "done": True})  # Tune's duplicate of an empty last result
    cell, method, seed = next(k for k in searcher.values)
    assert (method, seed) == (configs["t1"]["loss"], configs["t1"]["seed"]) and not searcher.failed
    assert searcher.values[(cell, method, seed)] == pytest.approx(_result(configs["t1"], 1)["val/acc"])
    searcher.on_trial_complete("t0", {"trial_id": "t0", "done": True, "diverged": True})
    assert {(m, s) for (_, m, s) in searcher.failed} == {(configs["t0"]["loss"], configs["t0"]["seed"])}
    assert "counted seeds end there" in capsys.readouterr().out


def test_on_resume_a_trial_folder_no_state_lists_is_continued_by_the_first_trial_of_its_config(tmp_path, capsys):
    """The driver was killed after it started `same_B_seed2` and `same_B_seed3` and before Tune saved a state listing
    them (the first in storage, the second only in the driver's staging folder, which a driver resumed in the same
    Ray session shares): on `--resume` the first trial of each config is given that folder as it is (Tune would
    add `_<4 hex>` for the staging copy), where it goes on from the folder's history as a restarted trial does,
    instead of `same_B_seed2_<id>` beside it (a CI run's second folder of one seed). A listed folder and a second
    trial of the same config still get the suffix; so does every trial of a sweep that is not resumed."""
    from types import SimpleNamespace

    from sweeps.engine.run import trial_folders

    lost, listed = {"cell": "same", "method": "B", "seed": 2}, {"cell": "gap", "method": "A", "seed": 0}
    staged = {"cell": "same", "method": "B", "seed": 3}
    staging = tmp_path / "session" / "auto" / "driver_artifacts"  # the killed driver's, same Ray session
    experiment = tmp_path / "auto"
    for folder, config in ((experiment / "same_B_seed2", lost), (experiment / "gap_A_seed0", listed)):
        folder.mkdir(parents=True)
        (folder / "params.json").write_text(json.dumps(config))
    (staging / "same_B_seed3").mkdir(parents=True)
    (staging / "same_B_seed3" / "params.json").write_text(json.dumps(staged))
    (experiment / "report").mkdir()  # not a trial folder
    _write_state(experiment, [("t0", listed, "TERMINATED", {"val_acc": 90.0})], {"t0": "gap_A_seed0"})

    def name(trial):
        return f"{trial.config['cell']}_{trial.config['method']}_seed{trial.config['seed']}"

    def trial(config: dict, trial_id: str) -> SimpleNamespace:
        storage = SimpleNamespace(experiment_driver_staging_path=str(staging), trial_dir_name=None)
        return SimpleNamespace(config=dict(config), trial_id=trial_id, storage=storage, relative_logdir=None)

    dirname = trial_folders.fresh_dirname(str(experiment), name)
    assert dirname(trial(lost, "n0")) == "same_B_seed2_n0"  # not resumed: a fresh folder beside the old one
    assert trial_folders.note_resume(str(experiment)) == {"gap_A_seed0"}
    for config, folder in ((lost, "same_B_seed2"), (staged, "same_B_seed3")):
        continuing = trial(config, "n1")
        assert dirname(continuing) == folder
        assert continuing.relative_logdir == continuing.storage.trial_dir_name == folder  # as it is
        assert f"--resume: {folder} continues in its folder" in capsys.readouterr().out
    assert dirname(trial(lost, "n2")) == "same_B_seed2_n2"  # taken once
    assert dirname(trial(listed, "n3")) == "gap_A_seed0_n3"
