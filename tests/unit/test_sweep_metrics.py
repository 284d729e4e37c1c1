"""Readers take the sweep's own metrics (issue 34, item 4): `python -m analysis EXP --json`, `--paper` and the
report use the test metric the sweep recorded in raysweep.json, or none; a command sweep whose script prints
only `val_acc` works with all three."""

from __future__ import annotations

import json

import jsonschema
import pytest

from analysis.__main__ import main
from analysis.tables.json_output import SUMMARY_SCHEMA, schema
from tests.helpers.analysis_fixtures import trial_spec, write_experiment

ARGV = ["sweeps/run_command.py", "--command", "python train.py --lr {lr} --seed {seed}", "--metric", "val_acc"]


def command_sweep(root, settings: dict, test_key: str | None = None):
    """A run_command-like experiment: 2 lrs x 3 seeds, 3 steps each reporting `val_acc` (and `test_key`)."""
    trials = []
    for i, lr in enumerate((0.1, 0.01)):
        for seed in range(3):
            rows = []
            for step in range(3):
                val = 0.5 + 0.1 * i + 0.05 * step + 0.01 * seed
                rows.append({"step": step, "val_acc": val} | ({test_key: val - 0.02} if test_key else {}))
            trials.append(trial_spec(f"lr{lr}_seed{seed}", {"lr": lr, "seed": seed}, rows))
    experiment = write_experiment(root, "cmd", trials, metric="val_acc", mode="max")
    (experiment / "raysweep.json").write_text(json.dumps({"metric": "val_acc", "mode": "max", "argv": ARGV} | settings))
    return experiment


@pytest.mark.parametrize("settings", [{"test_metric": None}, {}], ids=["recorded-none", "older-record"])
def test_json_and_paper_of_a_command_sweep_with_only_val_acc(tmp_path, capsys, settings):
    experiment = command_sweep(tmp_path, settings)
    assert main([str(experiment), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema(SUMMARY_SCHEMA)).validate(document)
    assert (document["metric"], document["val_metric"], document["val_mode"]) == ("val_acc", "val_acc", "max")
    assert [cell["key"]["lr"] for cell in document["cells"]] == [0.01, 0.1]
    # best-val of each seed is its last step: 0.5 + 0.1 i + 0.1 + 0.01 seed, mean over seeds 0..2
    assert [cell["mean"] for cell in document["cells"]] == pytest.approx([0.71, 0.61])
    assert document["best"]["key"] == {"lr": 0.01} and document["best"]["test"] is None  # no test set to show

    assert main([str(experiment), "--paper", "--out", str(tmp_path / "paper")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No test metric: the cells are the validation metric itself. val_acc (%)")
    assert "| 0.01 | **71.00 ± 1.00** |" in out and "| 0.1 | <u>61.00 ± 1.00</u> |" in out
    assert "No test metric" in (tmp_path / "paper" / "paper_table.tex").read_text()

    assert main([str(experiment), "--out", str(tmp_path / "report")]) == 0  # the full report: no paper table
    assert not (tmp_path / "report" / "paper_table.md").exists()
    assert "val_acc (max; best val_acc over epochs)" in capsys.readouterr().out


def test_readers_take_the_test_metric_the_sweep_recorded(tmp_path, capsys):
    experiment = command_sweep(tmp_path, {"test_metric": "test_acc"}, test_key="test_acc")
    assert main([str(experiment), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["metric"], document["val_metric"]) == ("test_acc", "val_acc")
    assert [cell["mean"] for cell in document["cells"]] == pytest.approx([0.69, 0.59])
    assert document["best"]["test"]["mean"] == pytest.approx(0.69)

    assert main([str(experiment), "--paper", "--out", str(tmp_path / "paper")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("test_acc (%): test_acc at the epoch of best val_acc") and "**69.00 ± 1.00**" in out

    assert main([str(experiment), "--out", str(tmp_path / "report")]) == 0
    assert "test_acc" in (tmp_path / "report" / "paper_table.md").read_text()
    capsys.readouterr()
    # a metric given on the command line wins, and one no trial reported is still an error
    assert main([str(experiment), "--paper", "--test-metric", "test/acc", "--out", str(tmp_path / "p2")]) == 2
    assert "test/acc" in capsys.readouterr().err


def test_the_sweep_records_its_test_metric_or_none():
    from ray.tune import TuneConfig

    from sweeps.engine.sweep_records.sweep_info import sweep_info
    from trainables.experiment.objective import Objective

    tune_config = TuneConfig(metric="val_acc", mode="max", num_samples=2)
    grid = {"lr": {"grid_search": [0.1, 0.01]}}
    # run_command without --test-metric
    assert sweep_info(Objective("val_acc", test_metric="val_acc"), tune_config, grid, None)["test_metric"] is None
    info = sweep_info(Objective("val_acc", test_metric="test_acc"), tune_config, grid, None)
    assert (info["metric"], info["test_metric"], info["total_trials"]) == ("val_acc", "test_acc", 4)
