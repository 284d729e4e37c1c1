"""A search's report draws the search (issue 42): why each trial ended, the search record, Optuna's own
pictures and PBT's schedule checked as data, grid pictures only where they mean something, the search
table in the report and in --json, no library warning on the console, and the ten-trial lr_search run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis.figures.search import OPTUNA_PICTURES, search_pictures

REPO = Path(__file__).resolve().parents[2]
SEARCH_PNGS = {f"{name}.png" for name in OPTUNA_PICTURES} | {"optimization_history_time.png"}


def drawn(pictures) -> dict:
    return {p.name: p.draw() for p in pictures if p.draw is not None}


# --- end to end: sweeps/lr_search.py and sweeps/pbt.py -------------------------------------------------------


@pytest.mark.slow
def test_a_ten_trial_search_reports_the_search_without_a_warning(tmp_path, sweep_env):
    """The issue's check: `lr_search.py` with 10 trials (TPE + ASHA); its console and its report."""
    argv = ["--num-samples", "10", "--epochs", "2", "--grace-period", "1", "--reduction-factor", "2"]
    argv += ["--batch-sizes", "64,256", "--gpus-per-trial", "0", "--cpus-per-trial", "1", "--max-concurrent", "2"]
    proc = subprocess.run(
        [sys.executable, "sweeps/lr_search.py", *argv, "--storage-path", str(tmp_path), "--name", "s10", "--quiet"],
        cwd=REPO,
        env=sweep_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    assert "Warning" not in console, [line for line in console.splitlines() if "Warning" in line]
    experiment = tmp_path / "s10"
    settings = json.loads((experiment / "raysweep.json").read_text())
    assert (settings["searcher"], settings["scheduler"]) == ("OptunaSearch", "AsyncHyperBandScheduler")
    files = {p.name for p in (experiment / "report").iterdir()}
    assert SEARCH_PNGS | {"search_table.csv", "learning_curves.png"} <= files
    assert not {"heatmap.png", "metric_vs_noise_rate.png", "noise_rate_curves.png"} & files
    # The pictures, as data, from the experiment the report was drawn from.
    trials, history = analysis.load_experiment(experiment)
    selected = analysis.add_selected(trials, history, ["val/acc"], analysis.Objective())
    pruned = int((trials["outcome"] == "pruned").sum())
    complete = int((trials["outcome"] == "finished").sum())
    assert f"10 trials: {complete} finished, {pruned} pruned\n" in proc.stdout  # as the report counts
    assert complete + pruned == 10 and complete >= 2
    figures = drawn(search_pictures(selected, history, analysis.Objective("val/acc", "max")))
    slice_axes = {ax.get_xlabel(): ax for ax in figures["slice"].axes if ax.get_label() != "<colorbar>"}
    assert slice_axes["lr"].get_xscale() == "log" and slice_axes["weight_decay"].get_xscale() == "log"
    assert slice_axes["batch_size"].get_xscale() == "linear"
    assert len(slice_axes["lr"].collections[0].get_offsets()) == complete
    assert len(figures["parallel_coordinate"].axes[0].collections[0].get_paths()) == complete
    assert len(figures["optimization_history"].axes[0].collections[0].get_offsets()) == complete
    table = pd.read_csv(experiment / "report" / "search_table.csv")
    assert len(table) == 10 and set(table["ended"]) <= {"finished", "pruned"}
