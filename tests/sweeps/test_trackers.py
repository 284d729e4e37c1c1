"""Experiment trackers for real: MLflow with a sqlite store and W&B offline, through `monitoring_callbacks`.

The set-up checks run where the sweep runs them, before Ray starts. One tiny plain `Tuner` (a two-line
trainable, not a sweep) runs with the callbacks `monitoring_callbacks` built for both trackers, and the runs
are read back with the trackers' own APIs. Skipped where the `trackers` extra is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.engine.run import monitoring
from tests.helpers.processes import wait_until
from tests.helpers.tracker_flags import HAS_MLFLOW, HAS_WANDB, flags


def tiny_tuner(callbacks: list, storage: Path, started=None):
    """Two trials of a trainable that reports val/acc = x, then 2x: seconds, no data, no torch. `started`:
    trial folder -> whether the tracker's run of the trial exists; the last report waits for it (up to 60 s):
    with Ray 2.60 the W&B callback lost the run of a trial that ended before its logging actor started it."""
    from ray import tune

    def trainable(config):
        tune.report({"val/acc": config["x"]})
        if started:
            wait_until(lambda: started(Path(tune.get_context().get_trial_dir())), 60)
        tune.report({"val/acc": config["x"] * 2})

    return tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([0.1, 0.2])},
        run_config=tune.RunConfig(name="trackers", storage_path=str(storage), callbacks=callbacks, verbose=0),
    )


@pytest.mark.skipif(not (HAS_MLFLOW or HAS_WANDB), reason="needs the trackers extra (mlflow, wandb)")
@pytest.mark.slow
def test_one_tuner_gives_mlflow_one_run_per_trial_and_wandb_offline_one_run_folder_per_trial(
    ray_gpus, tmp_path, monkeypatch
):
    """Both trackers on one Tuner, each where its package is installed (the `trackers` extra: both, in CI).
    MLflow, a sqlite store: one run per trial with its last val/acc and its config. W&B offline: one run folder
    per trial, holding its run's records."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trackers = {"mlflow_uri": uri if HAS_MLFLOW else None, "wandb_project": "noise" if HAS_WANDB else None}
    callbacks = monitoring.monitoring_callbacks(**flags(**trackers, quiet=True))
    # a W&B run has started once its transaction log exists: its folder appears earlier, while `wandb.init` still
    # runs, and a trial that ends then loses its run (seen twice in two tries: the folder left empty)
    run_started = lambda trial: any(trial.glob("wandb/offline-run-*/run-*.wandb"))  # noqa: E731
    results = tiny_tuner(callbacks, tmp_path / "runs", started=run_started if HAS_WANDB else None).fit()
    assert not results.errors

    if HAS_MLFLOW:
        import mlflow

        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=["trackers"])
        assert len(runs) == 2
        assert sorted(runs["metrics.val/acc"]) == pytest.approx([0.2, 0.4])  # the last report of each trial
        assert sorted(runs["params.x"]) == ["0.1", "0.2"]
    if HAS_WANDB:
        run_dirs = sorted((tmp_path / "runs" / "trackers").glob("*/wandb/offline-run-*"))
        assert len(run_dirs) == 2, sorted(str(p) for p in (tmp_path / "runs").rglob("*offline-run*"))
        assert all(list(d.glob("*.wandb")) for d in run_dirs)  # each holds its run's records
