"""Sweeps end to end: the smoke grid as a subprocess, GPU packing on logical GPUs, bad input."""

import json
from pathlib import Path

import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError


def trial_dirs(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if (p / "params.json").exists())


def last_result(trial_dir: Path) -> dict:
    return json.loads((trial_dir / "result.json").read_text().strip().splitlines()[-1])


@pytest.mark.slow
def test_smoke_grid_subprocess_completes_12_trials(smoke_grid):
    """The README's smoke grid (conftest's `smoke_grid`, shared with tests/sweeps/test_docs_commands.py)."""
    proc, experiment = smoke_grid.proc, smoke_grid.experiment
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = trial_dirs(experiment)
    assert sorted(t.name for t in trials) == sorted(
        f"{t}_{r:g}_seed0" for t in ("sym", "asym") for r in (0.125, 0.25, 0.375, 0.5, 0.625, 0.75)
    )
    for trial in trials:
        assert last_result(trial)["epoch"] == 2
        assert list(trial.glob("checkpoint_*/checkpoint.pt")), f"no checkpoint in {trial.name}"
        noise = json.loads((trial / "noise.json").read_text())
        assert len(noise["transition_matrix"]) == 10
        assert list(trial.glob("events.out.tfevents.*")), f"no TensorBoard events in {trial.name}"
        assert f"{trial.name}:INFO | [CPU | pid" in (trial / "stdout").read_text() and (trial / "stderr").exists()
    assert json.loads((experiment / "raysweep.json").read_text())["metric"] == "val/acc"
    assert "results:" in proc.stdout and "val/acc" in proc.stdout


@pytest.mark.slow
def test_half_gpu_trials_share_a_gpu_at_most_two_at_a_time(ray_gpus, tmp_path):
    """6 trials x 0.5 GPU on 4 logical GPUs (3 GPUs' worth; each trial's first epoch, with its imports and data,
    is most of its time, so they overlap): Ray may pack two per GPU id, never three."""
    code = noise_grid.main(
        [
            "--noise-rates",
            "0.1,0.2,0.3",
            "--epochs",
            "2",
            "--gpus-per-trial",
            "0.5",
            "--cpus-per-trial",
            "0.25",
            "--no-report",
            "--storage-path",
            str(tmp_path),
            "--name",
            "packing",
        ]
    )
    assert code == 0
    intervals = []  # (gpu id, start, end) per trial, from the trials' own clocks
    for trial in trial_dirs(tmp_path / "packing"):
        results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        gpu_ids = results[-1]["gpu_ids"]
        assert gpu_ids != "" and "," not in gpu_ids  # one GPU id, set by Ray
        start = results[0]["wall_time"] - results[0]["time_this_iter_s"]
        intervals.append((gpu_ids, start, results[-1]["wall_time"]))
    assert len(intervals) == 6
    most_sharing = 0
    for gpu, start, _ in intervals:
        sharing = sum(1 for g, s, e in intervals if g == gpu and s <= start <= e)
        most_sharing = max(most_sharing, sharing)
    assert most_sharing <= 2
    assert len({g for g, _, _ in intervals}) >= 2  # trials were spread over GPUs


@pytest.mark.slow
def test_more_gpus_per_trial_than_any_node_fails_fast(ray_gpus, tmp_path):
    with pytest.raises(UsageError, match=r"8 GPU\(s\).*largest node has 4 GPU"):
        noise_grid.main(["--gpus-per-trial", "8", "--storage-path", str(tmp_path)])
    assert not (tmp_path / "noise_grid").exists()  # refused before Tune made the experiment folder
