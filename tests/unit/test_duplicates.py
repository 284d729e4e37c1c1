"""Nothing counted twice (issue 28): a trial is its config, seed included, whatever its folder or state file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import analysis
from analysis.reading.tune_state import repeats
from analysis.status import format_status, read_status
from tests.helpers.analysis_fixtures import T0, paper_grid, trial_spec, write_experiment


def one_seed_grid(tmp_path: Path) -> Path:
    """ce/gce × sym/asym × 0.2/0.4, seed 0 only: every cell is `(1)`."""
    return paper_grid(tmp_path, seeds=(0,))


def cell_counts(summary: str) -> list[str]:
    """The `(n)` of every cell of the summary table."""
    lines = summary.splitlines()
    table = lines[2 : next(i for i, line in enumerate(lines) if line.startswith("failed trials"))]
    return [count for line in table for count in re.findall(r"\(\d+\)", line)]


def first_trial(experiment: Path) -> Path:
    return sorted(experiment.glob("train_*"))[0]


def rewrite_results(folder: Path, keep: int | None = None, **changes) -> None:
    """Rewrite a trial folder's result.json: its first `keep` rows, with `changes` applied to each."""
    rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()][:keep]
    (folder / "result.json").write_text("".join(json.dumps({**row, **changes}) + "\n" for row in rows))


def test_a_copied_trial_folder_leaves_its_cell_at_one(tmp_path):
    """Runs merged from two machines: the same trial under another folder name, listed in no
    experiment state file, once with its own trial id (the other machine's) and once with the same."""
    experiment = one_seed_grid(tmp_path)
    original = first_trial(experiment)
    shutil.copytree(original, experiment / "from_gpu_box")  # the same trial id
    shutil.copytree(original, experiment / "from_gpu_box_2")
    rewrite_results(experiment / "from_gpu_box_2", trial_id="qwert_00000")  # the other machine's id

    trials, history = analysis.load_experiment(experiment)
    assert len(trials) == 8 and trials["trial_id"].is_unique
    assert set(history["trial_id"]) == set(trials["trial_id"])
    assert str(original) in set(trials["trial_dir"])  # the listed folder is the one counted
    assert trials.attrs["duplicates"] == [str(experiment / "from_gpu_box"), str(experiment / "from_gpu_box_2")]
    summary = analysis.sweep_summary(str(experiment))
    assert cell_counts(summary) == ["(1)"] * 8, summary
    line = next(ln for ln in summary.splitlines() if ln.startswith("duplicates left out: 2 trial(s)"))
    assert line.endswith(f"{experiment / 'from_gpu_box'}, {experiment / 'from_gpu_box_2'}")

    report = read_status(experiment, now=T0 + 60)
    s = report["status"]
    assert (s["finished"], s["running"], s["total"]) == (8, 0, 8)  # not 10 finished
    assert report["duplicates"] == ["from_gpu_box", "from_gpu_box_2"]
    assert any(ln.startswith("duplicates left out: 2 trial(s)") for ln in format_status(report, now=T0))


@pytest.mark.parametrize("fate", ["ERROR", "RUNNING"])
def test_an_unfinished_repeat_of_a_finished_cell_is_not_counted(tmp_path, fate):
    """A rerun of a finished cell that errored, or stopped with no final result (no `done`), later
    than the finished one: neither another seed nor a failed trial."""
    experiment = one_seed_grid(tmp_path)
    original = first_trial(experiment)
    rerun = experiment / "rerun_of_first"
    shutil.copytree(original, rerun)
    rewrite_results(rerun, keep=2, trial_id="zxcvb_00000", done=False)
    rows = [json.loads(line) for line in (rerun / "result.json").read_text().splitlines()]
    rewrite_results(rerun, timestamp=rows[-1]["timestamp"] + 3600)  # newer than the finished trial
    if fate == "ERROR":
        (rerun / "error.txt").write_text("Traceback (most recent call last):\nRuntimeError: CUDA error\n")

    trials = analysis.load_trials(experiment)
    assert len(trials) == 8 and (trials["status"] == "TERMINATED").all()
    assert trials.attrs["duplicates"] == [str(rerun)]
    summary = analysis.sweep_summary(str(experiment))
    assert cell_counts(summary) == ["(1)"] * 8, summary
    assert "failed trials (left out of the cells): 0 errored, 0 diverged" in summary
    s = read_status(experiment, now=T0 + 60)["status"]
    assert (s["finished"], s["running"], s["errored"], s["total"]) == (8, 0, 0, 8)


def test_trials_one_state_file_lists_are_distinct_even_with_equal_configs(tmp_path):
    """Tune ran both (two PBT members clipped to the same bound): two trials, not a repeat. A copy
    of one of them is still a repeat."""
    config = {"lr": 0.1, "seed": 0, "epochs": 2}
    rows = [{"epoch": e, "val/acc": 0.5 + 0.1 * e} for e in range(2)]
    experiment = write_experiment(
        tmp_path, "pbt", [trial_spec("pbt_00000", config, rows), trial_spec("pbt_00001", config, rows, start=5.0)]
    )
    assert analysis.load_trials(experiment).attrs["duplicates"] == []
    shutil.copytree(first_trial(experiment), experiment / "copied")
    trials = analysis.load_trials(experiment)
    assert len(trials) == 2 and trials.attrs["duplicates"] == [str(experiment / "copied")]
    assert read_status(experiment)["status"]["finished"] == 2


def test_repeats_keeps_the_finished_then_newest_then_listed_trial():
    def trial(status, end, state=None, seed=0):
        return {"config": {"seed": seed, "lr": 0.1}, "status": status, "end": end, "state": state}

    assert repeats([trial("ERROR", 9.0), trial("TERMINATED", 1.0), trial("RUNNING", 8.0)]) == [0, 2]
    assert repeats([trial("TERMINATED", 1.0), trial("TERMINATED", 2.0)]) == [0]
    assert repeats([trial("TERMINATED", 1.0), trial("TERMINATED", 1.0, "s1")]) == [0]  # a tie: the listed one
    assert repeats([trial("TERMINATED", 1.0), trial("TERMINATED", 1.0, seed=1)]) == []  # another seed
    assert repeats([trial("TERMINATED", 1.0, "s1"), trial("TERMINATED", 2.0, "s2")]) == [0]  # two drivers


def test_a_cell_run_again_by_another_release_is_that_cells_second_run_not_a_duplicate(tmp_path):
    """Issue 56: a grid of last week's release (no version recorded) whose cell today's release ran again:
    both runs count in the cell; a copy made within one release stays a duplicate."""
    from trainables.experiment import records

    experiment = one_seed_grid(tmp_path)
    records.write_provenance(experiment, "1", {"command": "old", "started": T0 - 10})  # 0.1.0: no `raysweep`
    records.write_provenance(
        experiment, "2", {"command": "new", "started": T0 + 1000, "raysweep": {"version": "0.8.0"}}
    )
    original = first_trial(experiment)
    shutil.copytree(original, experiment / "rerun_today")
    rewrite_results(experiment / "rerun_today", trial_id="today_00000", timestamp=int(T0 + 2000))
    shutil.copytree(original, experiment / "copied_today")  # a copy of the same trial of today's run: a repeat
    rewrite_results(experiment / "copied_today", trial_id="today_00001", timestamp=int(T0 + 2000))

    trials, _ = analysis.load_experiment(experiment)
    today = {str(experiment / "rerun_today"), str(experiment / "copied_today")}
    assert len(trials) == 9 and str(original) in set(trials["trial_dir"])  # last week's run of the cell kept
    assert len(today & set(trials["trial_dir"])) == 1 and len(today & set(trials.attrs["duplicates"])) == 1
    assert sorted(cell_counts(analysis.sweep_summary(str(experiment)))) == ["(1)"] * 7 + ["(2)"]


def test_a_setting_an_earlier_release_left_at_its_default_is_read_from_the_trials_record(tmp_path):
    """Issue 56: a 0.1.0 cell (no `amp` given, amp off by default) and today's `--amp off` cell are one row, and a
    trial of today's default `amp=auto` on a CPU reads as the `off` it trained with (`identity`)."""
    from analysis.reading.trial_table import _recorded_settings
    from trainables.experiment import records

    old, auto = tmp_path / "old", tmp_path / "auto"
    records.write_trial_config(old, {"config_hash": "x", "config": {"amp": "off", "noise_rate": 0.2}})
    records.write_trial_config(
        auto, {"config_hash": "y", "config": {"amp": "auto"}, "on_gpu": False, "identity": {"amp": "off"}}
    )
    configs = [{"noise_rate": 0.2}, {"noise_rate": 0.4, "amp": "off"}, {"noise_rate": 0.6}]
    filled = _recorded_settings(configs, [str(old), None, str(auto)])
    assert [c.get("amp") for c in filled] == ["off", "off", "off"] and configs[0] == {"noise_rate": 0.2}
