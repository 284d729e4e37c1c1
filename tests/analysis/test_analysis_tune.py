"""analysis/ on an experiment made by a plain Ray Tune script (not by raysweep).

One small Tune run (2 CPUs, three 4-step trials) for the whole module: metric ``score``
(not ``val/acc``), a nested config and a nested metric, no raysweep.json, one trial that
raises and one that reports NaN.
"""

from __future__ import annotations

import math

import pytest

import analysis
from analysis.__main__ import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plain(tmp_path_factory, ray_gpus):
    """Run the experiment once on the session's Ray; returns (experiment folder, ResultGrid)."""
    from ray import tune

    root = tmp_path_factory.mktemp("tune")

    # Defined here so that cloudpickle ships it by value: Ray workers cannot import tests/.
    def trainable(config):
        for step in range(4):
            if config["kind"] == "crash" and step == 2:
                raise RuntimeError("simulated failure at step 2")
            score = float("nan") if config["kind"] == "nan" and step == 3 else config["model"]["width"] * (step + 1)
            tune.report({"score": score, "aux": {"loss": 1.0 / (step + 1)}})

    grid = tune.Tuner(
        trainable,
        param_space={"kind": tune.grid_search(["ok", "crash", "nan"]), "model": {"width": 2}},
        tune_config=tune.TuneConfig(metric="score", mode="max", reuse_actors=True),
        run_config=tune.RunConfig(name="plain", storage_path=str(root), verbose=0),
    ).fit()
    return root / "plain", grid


def test_trials_of_a_plain_tune_experiment(plain):
    path, _ = plain
    trials = analysis.load_trials(path)
    by_kind = trials.set_index("config/kind")
    assert (trials["config/model/width"] == 2).all()  # nested config, flattened
    assert (trials["resources/CPU"] == 1.0).all()
    assert (trials["end_time"] > trials["start_time"]).all() and (trials["duration_s"] > 0).all()
    assert trials["trial_name"].str.startswith("trainable_").all()
    assert by_kind.loc["crash", "status"] == "ERROR"
    assert by_kind.loc["crash", "error"] == "RuntimeError: simulated failure at step 2"
    assert by_kind.loc["crash", "iterations"] == 2
    assert by_kind.loc["nan", "diverged"] and by_kind.loc["nan", "status"] == "TERMINATED"
    assert math.isnan(by_kind.loc["nan", "last/score"])
    assert by_kind.loc["nan", "best/score"] == 6.0
    assert not by_kind.loc["ok", "diverged"] and by_kind.loc["ok", "error"] is None
    assert by_kind.loc["ok", "last/aux/loss"] == 0.25 and by_kind.loc["ok", "best/aux/loss"] == 0.25
    assert trials.attrs["metric"] == "score" and trials.attrs["mode"] == "max"  # from TuneConfig
    history = analysis.load_history(path)
    assert len(history) == 4 + 2 + 4
    assert {"trial_id", "training_iteration", "score", "aux/loss"} <= set(history.columns)


def test_best_runs_count_failed_trials_but_leave_them_out(plain):
    path, _ = plain
    table = analysis.best_runs(analysis.load_trials(path), analysis.Objective("score", "max")).set_index("kind")
    assert list(table.index) == ["ok", "crash", "nan"]  # best first, empty groups last
    assert table.loc["ok", "mean"] == 8.0 and table.loc["ok", "n"] == 1
    assert table.loc["crash", "n"] == 0 and table.loc["crash", "n_failed"] == 1
    assert table.loc["nan", "n"] == 0 and table.loc["nan", "n_failed"] == 1


def test_result_grid_source_matches_folder(plain):
    path, grid = plain
    from_grid, from_folder = analysis.load_trials(grid), analysis.load_trials(path)
    assert list(from_grid["trial_id"]) == list(from_folder["trial_id"])
    assert from_grid["last/score"].equals(from_folder["last/score"])


def test_cli_defaults_to_the_tune_metric(plain, capsys):
    path, _ = plain
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("score (max; best score over epochs), mean over seeds ± 95% CI:\nkind")
    assert out.endswith(f"report: {path / 'report' / 'report.md'}\n")
    for name in ("learning_curves.png", "timeline.png", "best_runs.md"):
        assert (path / "report" / name).stat().st_size > 0


def test_cli_unknown_metric_lists_metrics(plain, capsys, tmp_path):
    path, _ = plain
    assert main([str(path), "--metric", "val/acc", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "error: metric 'val/acc' was not reported by any trial; reported metrics: score, aux/loss\n"
    )
