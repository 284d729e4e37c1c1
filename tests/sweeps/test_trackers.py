"""Experiment trackers for real: MLflow with a sqlite store and W&B offline, through `monitoring_callbacks`.

The set-up checks run where the sweep runs them, before Ray starts. The logging tests run a tiny
plain `Tuner` (a two-line trainable, not a sweep) with the callbacks `monitoring_callbacks` built,
and read the runs back with the trackers' own APIs. Skipped where the `trackers` extra is missing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweeps.engine.run import monitoring
from tests.helpers.tracker_flags import flags, needs_mlflow, needs_wandb


def tiny_tuner(callbacks: list, storage: Path, started=None):
    """Two trials of a trainable that reports val/acc = x, then 2x: seconds, no data, no torch. `started`:
    trial folder -> whether the tracker's run of the trial exists; the last report waits for it (up to 60 s):
    with Ray 2.60 the W&B callback lost the run of a trial that ended before its logging actor started it."""
    from ray import tune

    def trainable(config):
        tune.report({"val/acc": config["x"]})
        deadline = time.monotonic() + 60
        while started and not started(Path(tune.get_context().get_trial_dir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        tune.report({"val/acc": config["x"] * 2})

    return tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([0.1, 0.2])},
        run_config=tune.RunConfig(name="trackers", storage_path=str(storage), callbacks=callbacks, verbose=0),
    )


@needs_mlflow
@pytest.mark.slow
def test_mlflow_gets_one_run_per_trial_with_val_acc(ray_gpus, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    callbacks = monitoring.monitoring_callbacks(**flags(mlflow_uri=uri, quiet=True))
    results = tiny_tuner(callbacks, tmp_path / "runs").fit()
    assert not results.errors
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["trackers"])
    assert len(runs) == 2
    assert sorted(runs["metrics.val/acc"]) == pytest.approx([0.2, 0.4])  # the last report of each trial
    assert sorted(runs["params.x"]) == ["0.1", "0.2"]


@needs_wandb
@pytest.mark.slow
def test_wandb_offline_writes_one_run_folder_per_trial(ray_gpus, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    callbacks = monitoring.monitoring_callbacks(**flags(wandb_project="noise", quiet=True))
    # the run has started once its transaction log exists: its folder appears earlier, while `wandb.init` still
    # runs, and a trial that ends then loses its run (seen twice in two tries: the folder left empty)
    run_started = lambda trial: any(trial.glob("wandb/offline-run-*/run-*.wandb"))  # noqa: E731
    results = tiny_tuner(callbacks, tmp_path / "runs", started=run_started).fit()
    assert not results.errors
    run_dirs = sorted((tmp_path / "runs" / "trackers").glob("*/wandb/offline-run-*"))
    assert len(run_dirs) == 2, sorted(str(p) for p in (tmp_path / "runs").rglob("*offline-run*"))
    assert all(list(d.glob("*.wandb")) for d in run_dirs)  # each holds its run's records
