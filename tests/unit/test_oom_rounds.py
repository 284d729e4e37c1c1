"""Out-of-memory re-run rounds read with their sweep (`analysis/reading/oom_rounds.py`): the table, the
report's summary, `--json` and `--status` count a re-run in place of its failure, from the folders alone."""

from __future__ import annotations

import json
import os

from analysis.reading.load import load_experiment
from analysis.reading.oom_rounds import reruns
from analysis.reading.tune_state import latest_experiment
from analysis.status import format_status, read_status
from analysis.tables.json_output import status_document, summary_document
from analysis.tables.summary import summary_text
from tests.helpers.analysis_fixtures import trial_spec, write_experiment
from trainables.experiment import records
from trainables.experiment.objective import Objective

OOM = "trainables.gpu_oom.GpuOutOfMemory: ran out of GPU memory at 0.25 GPU: CUDA out of memory"


def config(seed: int) -> dict:
    return {"noise_type": "sym", "noise_rate": 0.2, "seed": seed}


def rows(epochs: int, acc: float) -> list[dict]:
    return [{"epoch": e, "val/acc": acc, "test/acc": acc - 0.05} for e in range(1, epochs + 1)]


def sweep_with_a_round(tmp_path, rerun_status: str = "TERMINATED"):
    """`sweep`: seeds 0 and 1 done at 0.25 GPU, 2 and 3 out of memory; `sweep_oom_gpu0.5`: 2 and 3 re-run
    (3 still `rerun_status`), and seed 7, which replaces no failure (a folder another run left)."""
    write_experiment(
        tmp_path,
        "sweep",
        [trial_spec(f"sym_0.2_seed{s}", config(s), rows(2, 0.8), gpu_ids="0") for s in (0, 1)]
        + [trial_spec(f"sym_0.2_seed{s}", config(s), [], status="ERROR", error=OOM) for s in (2, 3)],
        record={"test_metric": "test/acc"},
    )
    rerun = [trial_spec("sym_0.2_seed2", config(2), rows(2, 0.9), gpu_ids="1", start=10.0)]
    running = rerun_status == "RUNNING"  # its rows hold no GPU yet: its placement.json does
    rerun += [
        trial_spec(
            "sym_0.2_seed3", config(3), rows(1, 0.7), status=rerun_status, gpu_ids=None if running else "2", start=10.0
        )
    ]
    rerun += [trial_spec("sym_0.2_seed7", config(7), rows(2, 0.1), gpu_ids="3", start=10.0)]
    write_experiment(tmp_path, "sweep_oom_gpu0.5", rerun)  # Tune's ids again: abcde_00000 ...
    return tmp_path / "sweep"


def test_the_tables_json_and_status_count_each_re_run_in_place_of_its_failure(tmp_path):
    experiment = sweep_with_a_round(tmp_path)
    trials, history = load_experiment(experiment)
    assert list(trials["trial_name"]) == [f"sym_0.2_seed{s}" for s in (0, 1, 2, 3)]  # in place, seed 7 not read
    assert list(trials["outcome"]) == ["finished"] * 4 and list(trials["last/gpu_ids"]) == ["0", "0", "1", "2"]
    assert [str(d).split("/")[-2] for d in trials["trial_dir"]] == ["sweep"] * 2 + ["sweep_oom_gpu0.5"] * 2
    assert trials["trial_id"].is_unique and set(history["trial_id"]) == set(trials["trial_id"])
    assert history.groupby("trial_id").size().tolist() == [2, 2, 2, 1]  # each trial's own rows, re-runs' for 2, 3
    assert len(trials.attrs["oom_reruns"]) == 2 and trials.attrs["metric"] == "val/acc"

    text = summary_text(trials, history, Objective())
    assert "failed trials (left out of the cells): 0 errored, 0 diverged" in text
    assert "re-run after running out of GPU memory: 2 trial(s), counted in place of their failures" in text
    assert str(tmp_path / "sweep_oom_gpu0.5") in text
    document = json.loads(json.dumps(summary_document(trials, history, Objective())))
    assert (
        document["trials"]["total"] == 4 and document["trials"]["finished"] == 4 and document["trials"]["errored"] == 0
    )
    assert document["cells"][0]["n"] == 4

    state = read_status(experiment, now=2e9)
    counts = status_document(state)["counts"]
    assert (counts["total"], counts["finished"], counts["errored"]) == (4, 4, 0)
    assert "4 trials: 0 running, 0 pending, 4 finished, 0 errored" in format_status(state, now=2e9)[0]


def test_status_shows_a_re_run_still_running_in_place_of_its_failure(tmp_path):
    experiment = sweep_with_a_round(tmp_path, rerun_status="RUNNING")
    seed3 = next((tmp_path / "sweep_oom_gpu0.5").glob("train_abcde_00001_*"))
    records.write_placement(seed3, {"gpu_ids": "2", "gpus": 0.5, "host": "node0", "pid": 101})
    state = read_status(experiment, now=2e9)
    assert (state["status"]["running"], state["status"]["finished"], state["status"]["errored"]) == (1, 3, 0)
    assert [(name, result["gpu_ids"]) for name, result, _ in state["status"]["running_trials"]] == [
        ("sym_0.2_seed3", "2")
    ]


def test_the_latest_experiment_is_the_sweep_not_its_newer_re_run_round(tmp_path):
    experiment = sweep_with_a_round(tmp_path)
    state = next((tmp_path / "sweep_oom_gpu0.5").glob("experiment_state-*"))
    os.utime(state, (state.stat().st_mtime + 100,) * 2)
    write_experiment(tmp_path, "other", [trial_spec("a", {}, [{"acc": 1}])])  # older than the round, not the sweep
    os.utime(next((tmp_path / "other").glob("experiment_state-*")), (state.stat().st_mtime - 50,) * 2)
    assert latest_experiment(tmp_path) == experiment


def test_a_round_trial_replaces_only_an_errored_trial_of_its_config_once():
    earlier = [("a", True), ("b", False), ("c", True), ("c", True)]
    assert reruns(earlier, ["b", "c", "a", "x"]) == {0: 2, 2: 1}  # b finished: kept; one re-run of c for one failure
    assert reruns(earlier, []) == {}
