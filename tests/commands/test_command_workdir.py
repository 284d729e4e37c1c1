"""Command trials in their own working folders (`trainables/command/workdir.py`,
`sweeps/engine/command_sweep/code_snapshot.py`)
and the `{gpu}` placeholder: run from a repo-like folder under tmp_path, never the project root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import wait_until
from tests.helpers.repos import make_repo, tree

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"


@pytest.mark.slow
def test_four_whole_gpu_trials_get_four_distinct_gpus_through_the_placeholder(ray_gpus, tmp_path):
    from ray import tune
    from ray.tune import RunConfig, SyncConfig, Tuner

    from trainables.command.runner import train_command

    template = [sys.executable, str(SCRIPTS / "pick_gpu.py"), "--gpu", "{gpu}", "--meeting", str(tmp_path / "m")]
    template += ["--trials", "4", "--seed", "{seed}"]
    trainable = tune.with_parameters(train_command, template=template, cwd=str(tmp_path), grace_period_s=2.0)
    grid = Tuner(
        tune.with_resources(trainable, {"cpu": 0.25, "gpu": 1}),
        param_space={"seed": tune.grid_search([0, 1, 2, 3])},
        run_config=RunConfig(
            storage_path=str(tmp_path / "out"),
            name="gpus",
            verbose=0,
            log_to_file=True,
            sync_config=SyncConfig(sync_artifacts=True),  # the trial's stdout file onto storage
        ),
    ).fit()
    assert not grid.errors
    ids = sorted(r.metrics["gpu_id"] for r in grid)
    assert ids == [0, 1, 2, 3]
    for result in grid:  # the script's own CUDA_VISIBLE_DEVICES is the id Ray assigned
        assert f"CUDA_VISIBLE_DEVICES={result.metrics['gpu_id']}" in (Path(result.path) / "stdout").read_text()


# --- a sweep from the repo folder ------------------------------------------------------------------


@pytest.mark.slow
def test_imagenet_style_trials_keep_their_own_checkpoints_resume_them_and_run_the_code_at_launch(tmp_path, sweep_env):
    """3 trials, one at a time, each SIGKILLing itself once after epoch 2 (retried: `--resume
    checkpoint.pth.tar` relative); the package named `data` that sibling.py imports is edited once the
    first trial has reported, so the other two start after the edit."""
    import torch

    repo = make_repo(tmp_path / "repo")
    before = tree(repo)
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "sweeps" / "run_command.py"), "--axis", "lr=0.1,0.2,0.3", "--seeds", "1"]
    argv += ["--storage-path", str(out), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--max-concurrent", "1"]
    argv += [
        "--max-failures",
        "1",
        "--quiet",
        "--no-report",
        "--",
        sys.executable,
        "main.py",
        "--lr",
        "{lr}",
        "--seed",
        "{seed}",
    ]
    argv += ["--epochs", "3", "--resume", "checkpoint.pth.tar", "--kill-self-at-epoch", "2"]
    log = (tmp_path / "sweep.log").open("w")
    sweep = subprocess.Popen(argv, cwd=repo, env=sweep_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: list(out.glob("command/*/result.json")) or sweep.poll() is not None, 300, every_s=0.2)
        (repo / "data" / "__init__.py").write_text("VERSION = 2\n")
        edited = (repo / "data" / "__init__.py").stat().st_mtime  # the file system's clock, as the checkpoints'
        assert sweep.wait(timeout=400) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert [p.name for p in repo.rglob("*.pth.tar")] == ["checkpoint.pth.tar"]  # the earlier run's, untouched
    assert tree(repo) == {
        **before,
        "data/__init__.py": b"VERSION = 2\n",
    }
    trials = [p for p in (out / "command").iterdir() if (p / "result.json").exists()]
    assert len(trials) == 3
    seen, started_after_edit = set(), 0
    for trial in trials:
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
        assert [r["epoch"] for r in rows] == [1, 2, 3] and {r["version"] for r in rows} == {1}
        work = trial / "work"
        checkpoint = torch.load(work / "checkpoint.pth.tar")  # intact: one writer
        config = json.loads((trial / "params.json").read_text())
        assert (checkpoint["lr"], checkpoint["seed"], checkpoint["epoch"]) == (config["lr"], config["seed"], 3)
        assert torch.load(work / "model_best.pth.tar")["lr"] == config["lr"]
        assert "=> resumed from epoch 2 of checkpoint.pth.tar" in (trial / "stderr").read_text()
        log_lines = (work / "experiment" / "log.txt").read_text().splitlines()
        assert log_lines[0] == "earlier run" and {line.split(" epoch")[0] for line in log_lines[1:]} == {
            f"lr={config['lr']} seed={config['seed']}"
        }
        seen.add((config["lr"], config["seed"]))
        started_after_edit += min(p.stat().st_mtime for p in work.glob("*.pth.tar")) > edited
    assert seen == {(0.1, 0), (0.2, 0), (0.3, 0)}
    assert started_after_edit >= 2  # trials that started after the edit still ran the code at launch
    info = json.loads((out / "command" / "raysweep.json").read_text())
    assert info["settings"]["code_snapshot"]["source"] == str(repo.resolve())
