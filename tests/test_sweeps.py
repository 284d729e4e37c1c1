"""Sweeps end to end: the smoke grid as a subprocess, GPU packing on logical GPUs, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError

ROOT = Path(__file__).resolve().parents[1]


def trial_dirs(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if (p / "params.json").exists())


def last_result(trial_dir: Path) -> dict:
    return json.loads((trial_dir / "result.json").read_text().strip().splitlines()[-1])


@pytest.mark.slow
def test_smoke_grid_subprocess_completes_12_trials(smoke_grid):
    """The README's smoke grid (conftest's `smoke_grid`, shared with tests/test_docs_commands.py)."""
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
    """8 trials x 0.5 GPU on 4 logical GPUs: Ray may pack two per GPU id, never three."""
    code = noise_grid.main(
        [
            "--noise-rates",
            "0.1,0.2,0.3,0.4",
            "--epochs",
            "10",
            "--gpus-per-trial",
            "0.5",
            "--cpus-per-trial",
            "0.25",
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
    assert len(intervals) == 8
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


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--noise-rates", "0.2,1.0"], r"--noise-rate: noise_rate=1.0 is outside the allowed range \[0.0, 1.0\)"),
        (["--noise-rates", "0.2,abc"], "--noise-rate='abc' is not a number"),
        (["--noise-types", "sym,pair"], "--noise-type: noise_type='pair' is not one of sym, asym"),
        (["--dataset", "mnist"], "dataset='mnist' is not one of digits, cifar10, npz"),
        (["--model", "vit"], "model='vit' is not one of mlp, cnn, resnet18"),
        (["--loss", "mae"], "loss='mae' is not one of"),
        (["--gpus-per-trial", "-1"], "--gpus-per-trial=-1 is not allowed"),
        (["--gpus-per-trial", "1.5"], "--gpus-per-trial=1.5 is not allowed"),
        (["--seeds", "0"], "--seeds=0 must be a whole number >= 1"),
        (["--epochs", "0"], "--epochs: epochs=0 must be a whole number >= 1"),
        (["--dataset", "cifar10"], "needs data_root"),
        (["--dataset", "cifar10", "--data-root", "/nonexistent"], "lacks the CIFAR-10 python batches"),
        (["--dataset", "npz", "--data-root", "/nonexistent.npz"], "is not a file"),
    ],
)
def test_bad_input_is_refused_before_ray_starts(argv, match, tmp_path):
    import ray

    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        noise_grid.main([*argv, "--storage-path", str(storage)])
    assert not storage.exists()  # nothing written
    if not os.environ.get("RAY_ADDRESS"):
        assert not ray.is_initialized() or ray.cluster_resources().get("GPU") == 4  # only the test's own Ray


def test_corrupt_npz_and_unwritable_storage(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="not a readable .npz"):
        noise_grid.main(["--dataset", "npz", "--data-root", str(bad), "--storage-path", str(tmp_path / "r")])
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UsageError, match="storage-path"):
        noise_grid.main(["--storage-path", str(a_file / "runs")])


def test_user_mistake_prints_one_line_and_exit_code_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "sweeps/noise_grid.py", "--noise-rates", "0.5,1.5", "--storage-path", str(tmp_path / "r")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --noise-rate: noise_rate=1.5 is outside the allowed range [0.0, 1.0)"
    ]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()
