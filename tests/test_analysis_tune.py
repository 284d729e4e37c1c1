"""analysis/ on experiments made by real Ray Tune runs: loading, CLI, notebook.

One Ray session (2 CPUs) makes two small experiments for the whole module:
- ``noise_grid``: our conventions (metric names, trial names, raysweep.json), 8 trials;
- ``plain``: a plain Tune script with metric ``score``, a nested config, one trial that
  raises and one that reports NaN.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import analysis

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tune_runs(tmp_path_factory):
    """Run both experiments once; returns (noise_grid path, ResultGrid, plain path)."""
    ray = pytest.importorskip("ray")
    from ray import tune

    root = tmp_path_factory.mktemp("tune")

    # Defined here so that cloudpickle ships them by value: Ray workers cannot import tests/.
    def _noise_trainable(config):
        drop = 0.5 if config["noise_type"] == "sym" else 0.8
        for epoch in range(3):
            acc = 0.9 - drop * config["noise_rate"] - 0.1 / (epoch + 1) + 0.01 * config["seed"]
            tune.report({"epoch": epoch, "train/loss": 1.0 / (epoch + 1), "val/loss": 1.0 - acc,
                         "val/acc": acc, "gpu_ids": os.environ.get("CUDA_VISIBLE_DEVICES", "")})

    def _plain_trainable(config):
        for step in range(4):
            if config["kind"] == "crash" and step == 2:
                raise RuntimeError("simulated failure at step 2")
            score = float("nan") if config["kind"] == "nan" and step == 3 else config["model"]["width"] * (step + 1)
            tune.report({"score": score, "aux": {"loss": 1.0 / (step + 1)}})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        grid = tune.Tuner(
            _noise_trainable,
            param_space={"noise_type": tune.grid_search(["sym", "asym"]),
                         "noise_rate": tune.grid_search([0.2, 0.4]), "seed": tune.grid_search([0, 1])},
            tune_config=tune.TuneConfig(
                metric="val/acc", mode="max", reuse_actors=True,
                trial_name_creator=lambda t: f"{t.config['noise_type']}_{t.config['noise_rate']}_seed{t.config['seed']}"),
            run_config=tune.RunConfig(name="noise_grid", storage_path=str(root / "runs"), verbose=0),
        ).fit()
        (root / "runs" / "noise_grid" / "raysweep.json").write_text(json.dumps({"metric": "val/acc", "mode": "max"}))
        tune.Tuner(
            _plain_trainable,
            param_space={"kind": tune.grid_search(["ok", "crash", "nan"]), "model": {"width": 2}},
            tune_config=tune.TuneConfig(metric="score", mode="max", reuse_actors=True),
            run_config=tune.RunConfig(name="plain", storage_path=str(root / "other"), verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    return root / "runs" / "noise_grid", grid, root / "other" / "plain"


def test_noise_grid_trials(tune_runs):
    path, _, _ = tune_runs
    trials = analysis.load_trials(path)
    assert len(trials) == 8
    assert set(trials["status"]) == {"TERMINATED"}
    assert not trials["diverged"].any()
    assert "asym_0.4_seed1" in set(trials["trial_name"])
    assert (trials["iterations"] == 3).all()
    assert (trials["resources/CPU"] == 1.0).all()
    assert (trials["duration_s"] > 0).all() and (trials["end_time"] > trials["start_time"]).all()
    row = trials.set_index("trial_name").loc["asym_0.4_seed1"]
    assert row["last/val/acc"] == pytest.approx(0.9 - 0.8 * 0.4 - 0.1 / 3 + 0.01)
    assert row["best/val/loss"] == pytest.approx(row["last/val/loss"])  # loss falls every epoch
    assert trials.attrs["metric"] == "val/acc" and trials.attrs["mode"] == "max"
    history = analysis.load_history(path)
    assert len(history) == 24 and {"trial_id", "training_iteration", "epoch", "val/acc"} <= set(history.columns)


def test_result_grid_source_matches_folder(tune_runs):
    path, grid, _ = tune_runs
    from_grid = analysis.load_trials(grid)
    from_folder = analysis.load_trials(path)
    assert list(from_grid["trial_id"]) == list(from_folder["trial_id"])
    assert list(from_grid["last/val/acc"]) == list(from_folder["last/val/acc"])


def test_plain_experiment_error_and_nan(tune_runs):
    _, _, path = tune_runs
    trials = analysis.load_trials(path)
    by_kind = trials.set_index("config/kind")
    assert (trials["config/model/width"] == 2).all()  # nested config, flattened
    assert by_kind.loc["crash", "status"] == "ERROR"
    assert by_kind.loc["crash", "error"] == "RuntimeError: simulated failure at step 2"
    assert by_kind.loc["crash", "iterations"] == 2
    assert by_kind.loc["nan", "diverged"] and by_kind.loc["nan", "status"] == "TERMINATED"
    assert math.isnan(by_kind.loc["nan", "last/score"])
    assert by_kind.loc["nan", "best/score"] == 6.0
    assert not by_kind.loc["ok", "diverged"] and by_kind.loc["ok", "error"] is None
    assert by_kind.loc["ok", "last/aux/loss"] == 0.25
    assert trials.attrs["metric"] == "score" and trials.attrs["mode"] == "max"
    table = analysis.best_runs(trials, "score", "max").set_index("kind")
    assert list(table.index) == ["ok", "crash", "nan"]  # best first, empty groups last
    assert table.loc["ok", "mean"] == 8.0 and table.loc["ok", "n"] == 1
    assert table.loc["crash", "n"] == 0 and table.loc["crash", "n_failed"] == 1
    assert table.loc["nan", "n"] == 0 and table.loc["nan", "n_failed"] == 1


def _cli(*args, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "analysis", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_cli_writes_report_for_noise_grid(tune_runs, tmp_path):
    path, _, _ = tune_runs
    out = tmp_path / "report"
    result = _cli(path, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "val/acc (max)" in result.stdout and "noise_type" in result.stdout
    assert str(out / "report.md") in result.stdout
    for name in ("learning_curves.png", "metric_vs_noise_rate.png", "timeline.png", "heatmap.png",
                 "best_runs.csv", "best_runs.md", "best_runs.tex", "trials.csv"):
        assert (out / name).stat().st_size > 0, name
    report = (out / "report.md").read_text()
    assert "![Trial timeline](timeline.png)" in report and "| noise_type | noise_rate |" in report


def test_cli_plain_experiment_defaults_to_tune_metric(tune_runs):
    _, _, path = tune_runs
    result = _cli(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("score (max)")
    assert (path / "report" / "timeline.png").exists()


def test_cli_unknown_metric_lists_metrics(tune_runs):
    _, _, path = tune_runs
    result = _cli(path, "--metric", "val/acc", "--out", path.parent / "r")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "error: metric 'val/acc' was not reported by any trial; reported metrics: score, aux/loss")


def test_notebook_runs_headless(tune_runs, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path, _, _ = tune_runs
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "noise_grid").symlink_to(path)  # the default: latest under ./runs
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    notebook = nbformat.read(REPO / "notebooks" / "noise_grid_analysis.ipynb", as_version=4)
    assert "parameters" in notebook.cells[0].metadata.get("tags", [])
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on any cell error
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # learning curves, metric vs noise rate, heatmap, timeline
