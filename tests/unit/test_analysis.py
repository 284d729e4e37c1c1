"""analysis/ on experiments written by tests/helpers/analysis_fixtures.py and on hand-made DataFrames.

No Ray here: see test_analysis_tune.py for experiments made by real Tune runs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from tests.helpers.analysis_fixtures import T0, noise_grid, trial_spec, write_experiment

REPO = Path(__file__).resolve().parents[2]
T_975 = {1: 12.706204736174698, 2: 4.302652729911275}  # Student t quantiles, from tables


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def grid(tmp_path) -> Path:
    return noise_grid(tmp_path, seeds=(0, 1, 2), rates=(0.0, 0.2, 0.4), epochs=5, gpus=2)


def test_load_trials_one_row_per_trial(grid):
    trials = analysis.load_trials(grid)
    assert len(trials) == 18
    assert list(trials.columns[:10]) == [
        "trial_id",
        "trial_name",
        "status",
        "outcome",
        "diverged",
        "error",
        "start_time",
        "end_time",
        "duration_s",
        "iterations",
    ]
    row = trials.set_index("trial_name").loc["asym_0.4_seed2"]
    assert row["status"] == "TERMINATED" and not row["diverged"] and row["error"] is None
    assert row["config/noise_type"] == "asym" and row["config/noise_rate"] == 0.4 and row["config/seed"] == 2
    assert row["last/val/acc"] == pytest.approx(0.9 - 0.4 * 0.8 - 0.1 / 5 + 0.02)
    assert row["best/val/acc"] == pytest.approx(row["last/val/acc"])  # rises every epoch
    assert row["best/val/loss"] == pytest.approx(1 / 5 + 0.4)  # guess_mode: min for losses
    assert row["resources/GPU"] == 1.0 and row["resources/CPU"] == 1.0
    assert row["iterations"] == 5 and row["node"] == "node0" and row["last/gpu_ids"] in ("0", "1")
    assert row["duration_s"] == pytest.approx(5.0)
    assert row["trial_dir"].startswith(str(grid))
    assert trials.attrs == {
        "experiment": str(grid),
        "metric": "val/acc",
        "mode": "max",
        "test_metric": "test/acc",  # raysweep.json records none: the default
        "duplicates": [],
        "search": None,  # a grid: no searcher, no PBT
        "ended_by": None,  # no driver record
        "not_created": 0,  # nor trials its searcher never made
    }
    assert set(trials["outcome"]) == {"finished"}


def test_load_history_long_form(grid):
    history = analysis.load_history(grid)
    assert len(history) == 18 * 5
    assert list(history.columns[:4]) == ["trial_id", "training_iteration", "time_total_s", "timestamp"]
    assert {"epoch", "val/acc", "val/loss", "train/loss", "gpu_ids"} <= set(history.columns)
    assert "config" not in history.columns and "hostname" not in history.columns
    first = history[history["trial_id"] == history["trial_id"].iloc[0]]
    assert list(first["training_iteration"]) == [1, 2, 3, 4, 5]


def test_nested_metrics_and_config_are_flattened(tmp_path):
    rows = [{"score": 1.0, "aux": {"loss": 0.5, "deep": {"x": 1}}}]
    path = write_experiment(
        tmp_path, "nested", [trial_spec("t", {"opt": {"lr": 0.1, "betas": [0.9, 0.99]}}, rows)], metric=None
    )
    trials = analysis.load_trials(path)
    assert trials.loc[0, "config/opt/lr"] == 0.1 and trials.loc[0, "config/opt/betas"] == (0.9, 0.99)
    assert trials.loc[0, "last/aux/loss"] == 0.5 and trials.loc[0, "last/aux/deep/x"] == 1
    assert trials.attrs["metric"] is None


def test_errored_and_nonfinite_trials(tmp_path):
    ok = [{"acc": 0.5}, {"acc": 0.6}]
    specs = [
        trial_spec("ok", {"seed": 0}, ok),
        trial_spec("err", {"seed": 1}, ok[:1], status="ERROR", error="ValueError: bad batch"),
        trial_spec("nan", {"seed": 2}, [{"acc": 0.5}, {"acc": float("nan")}]),
        trial_spec("inf", {"seed": 3}, [{"acc": 0.5, "loss": float("inf")}, {"acc": 0.7, "loss": 1.0}]),
        trial_spec("flag", {"seed": 4}, [{"acc": 0.5}, {"acc": 0.4, "diverged": True}]),
        trial_spec("pending", {"seed": 5}, [], status="PENDING"),
    ]
    trials = analysis.load_trials(write_experiment(tmp_path, "e", specs, metric=None)).set_index("trial_name")
    assert trials.loc["err", "status"] == "ERROR" and trials.loc["err", "error"] == "ValueError: bad batch"
    assert list(trials["diverged"]) == [False, False, True, True, True, False]
    assert math.isnan(trials.loc["nan", "last/acc"]) and trials.loc["nan", "best/acc"] == 0.5
    assert trials.loc["inf", "last/loss"] == 1.0 and trials.loc["inf", "best/loss"] == 1.0
    assert "last/diverged" not in trials.columns
    assert trials.loc["pending", "status"] == "PENDING" and trials.loc["pending", "iterations"] == 0
    assert pd.isna(trials.loc["pending", "start_time"]) and pd.isna(trials.loc["pending", "duration_s"])


def test_half_written_last_line_is_skipped_with_warning(tmp_path):
    path = write_experiment(
        tmp_path, "running", [trial_spec("a", {"seed": 0}, [{"acc": 0.1}, {"acc": 0.2}], status="RUNNING")], metric=None
    )
    result = next(path.glob("*/result.json"))
    result.write_text(result.read_text() + '{"acc": 0.3, "training_it')
    with pytest.warns(UserWarning, match="result.json: skipped unreadable last line"):
        trials, history = analysis.load_experiment(path)
    assert trials.loc[0, "status"] == "RUNNING" and trials.loc[0, "last/acc"] == 0.2
    assert len(history) == 2


def test_running_experiment_with_folders_not_in_state(tmp_path):
    specs = [
        trial_spec("a", {"seed": 0}, [{"acc": 0.1}], status="RUNNING"),
        trial_spec("b", {"seed": 1}, [{"acc": 0.2}, {"acc": 0.3}]),
    ]
    path = write_experiment(tmp_path, "running", specs, metric=None)
    state = next(path.glob("experiment_state-*.json"))
    data = json.loads(state.read_text())
    data["trial_data"] = data["trial_data"][:1]  # trial b started after the last snapshot
    state.write_text(json.dumps(data))
    (path / "report").mkdir()  # not a trial folder: ignored
    trials = analysis.load_trials(path).set_index("config/seed")
    assert len(trials) == 2
    assert trials.loc[0, "status"] == "RUNNING"
    assert trials.loc[1, "status"] == "TERMINATED"  # its last result says done
    assert trials.loc[1, "last/acc"] == 0.3 and pd.isna(trials.loc[1, "resources/CPU"])


def test_without_state_file_times_are_estimated(tmp_path):
    specs = [
        trial_spec("a", {"seed": 0}, [{"acc": 0.1}] * 8, start=10.3, step_s=0.37),
        trial_spec("b", {"seed": 1}, [{"acc": 0.2}], status="ERROR", error="KeyError: 'x'"),
    ]
    path = write_experiment(tmp_path, "copied", specs, state=False, metric=None)
    trials = analysis.load_trials(path).set_index("config/seed")
    start = (trials.loc[0, "start_time"] - pd.Timestamp(T0, unit="s", tz="UTC")).total_seconds()
    assert start == pytest.approx(10.3, abs=0.2)  # int timestamps, yet well under 1 s off
    assert trials.loc[0, "duration_s"] == pytest.approx(8 * 0.37)
    assert trials.loc[0, "status"] == "TERMINATED"
    assert trials.loc[1, "status"] == "ERROR" and trials.loc[1, "error"] == "KeyError: 'x'"


def test_unreadable_state_file_falls_back_to_folders(tmp_path):
    path = write_experiment(tmp_path, "e", [trial_spec("a", {"seed": 0}, [{"acc": 0.1}])], metric=None)
    state = next(path.glob("experiment_state-*.json"))
    state.write_text(state.read_text()[:50])
    with pytest.warns(UserWarning, match="unreadable experiment state"):
        trials = analysis.load_trials(path)
    assert len(trials) == 1 and trials.loc[0, "last/acc"] == 0.1


def test_progress_csv_when_no_result_json(tmp_path):
    path = write_experiment(tmp_path, "e", [trial_spec("a", {"seed": 0}, [{"acc": 0.1}, {"acc": 0.4}])], metric=None)
    folder = next(path.glob("train_*"))
    (folder / "result.json").unlink()
    (folder / "progress.csv").write_text("acc,training_iteration,time_total_s,timestamp\n0.1,1,1.0,5\n0.4,2,2.0,6\n")
    trials, history = analysis.load_experiment(path)
    assert trials.loc[0, "last/acc"] == 0.4 and len(history) == 2


def test_fsspec_uri_source(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    path = noise_grid(tmp_path, seeds=(0,), rates=(0.2,), epochs=2)
    memory = fsspec.filesystem("memory")
    for file in path.rglob("*"):
        if file.is_file():
            memory.pipe(f"/exp/{file.relative_to(path).as_posix()}", file.read_bytes())
    trials = analysis.load_trials("memory://exp")
    assert len(trials) == 2 and trials["trial_dir"].str.startswith("memory://").all()
    assert list(trials["last/val/acc"]) == list(analysis.load_trials(path)["last/val/acc"])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "is not a folder"),
        (lambda p: (p / "notes").mkdir() or (p / "notes"), "is not a Ray Tune experiment folder"),
        (lambda p: write_experiment(p, "empty", [], metric=None), "has no trials"),
    ],
)
def test_bad_input_raises_one_line_error(tmp_path, make, message):
    with pytest.raises(analysis.ExperimentError, match=message) as error:
        analysis.load_trials(make(tmp_path))
    assert "\n" not in str(error.value)


def test_folder_of_experiments_names_them(grid):
    with pytest.raises(analysis.ExperimentError, match="it holds experiments: noise_grid"):
        analysis.load_trials(grid.parent)


def test_unknown_metric_lists_reported_metrics(grid):
    trials = analysis.load_trials(grid)
    with pytest.raises(analysis.ExperimentError, match=r"'top5' was not reported .*: epoch, val/acc, val/loss"):
        analysis.best_runs(trials, analysis.Objective("top5", "max"))


def test_latest_experiment(tmp_path, monkeypatch):
    older = write_experiment(tmp_path / "runs", "old", [trial_spec("a", {}, [{"acc": 1}])])
    newer = write_experiment(tmp_path / "runs", "new", [trial_spec("a", {}, [{"acc": 1}])])
    state = next(older.glob("experiment_state-*"))
    os.utime(state, (state.stat().st_mtime + 100,) * 2)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")  # found in the parent folder
    assert analysis.latest_experiment("runs") == older
    assert newer != older


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def _trials(rows: list[tuple]) -> pd.DataFrame:
    """A load_trials-like table from (noise_rate, seed, val/acc, status, diverged) tuples."""
    return pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(len(rows))],
            "trial_name": [f"r{r[0]}_seed{r[1]}" for r in rows],
            "status": [r[3] for r in rows],
            "diverged": [r[4] for r in rows],
            "config/noise_type": "sym",
            "config/noise_rate": [r[0] for r in rows],
            "config/seed": [r[1] for r in rows],
            "last/val/acc": [r[2] for r in rows],
        }
    )


HAND = _trials(
    [
        (0.2, 0, 0.80, "TERMINATED", False),
        (0.2, 1, 0.82, "TERMINATED", False),
        (0.2, 2, 0.87, "TERMINATED", False),
        (0.4, 0, 0.60, "TERMINATED", False),
        (0.4, 1, 0.70, "TERMINATED", False),
        (0.4, 2, 0.99, "ERROR", False),
        (0.4, 3, float("nan"), "TERMINATED", True),
        (0.6, 0, 0.50, "TERMINATED", False),
    ]
)


def test_best_runs_matches_hand_computation():
    table = analysis.best_runs(HAND, analysis.Objective("val/acc", "max"))
    assert list(table["noise_rate"]) == [0.2, 0.4, 0.6]  # best first; noise_type does not vary
    assert list(table.columns) == [
        "noise_rate",
        "n",
        "n_failed",
        "mean",
        "std",
        "ci95",
        "ci95_low",
        "ci95_high",
        "best",
        "best_seed",
        "best_trial",
    ]
    a, b, c = (table.iloc[i] for i in range(3))
    assert (a["n"], a["n_failed"]) == (3, 0) and (b["n"], b["n_failed"]) == (2, 2) and (c["n"], c["n_failed"]) == (1, 0)
    assert a["mean"] == pytest.approx(0.83) and a["std"] == pytest.approx(math.sqrt(0.0013))
    assert a["ci95"] == pytest.approx(T_975[2] * math.sqrt(0.0013) / math.sqrt(3))
    assert a["ci95_low"] == pytest.approx(0.83 - a["ci95"]) and a["ci95_high"] == pytest.approx(0.83 + a["ci95"])
    assert b["mean"] == pytest.approx(0.65) and b["std"] == pytest.approx(math.sqrt(0.005))
    assert b["ci95"] == pytest.approx(T_975[1] * math.sqrt(0.005) / math.sqrt(2))
    assert b["best"] == 0.70 and b["best_seed"] == 1  # the errored 0.99 is left out
    assert c["mean"] == 0.5 and math.isnan(c["std"]) and math.isnan(c["ci95"])
    assert a["best_seed"] == 2 and a["best_trial"] == "r0.2_seed2"


def test_best_runs_min_mode_and_explicit_by():
    table = analysis.best_runs(HAND, analysis.Objective("val/acc", "min"), by=["noise_type"])
    assert list(table.columns[:1]) == ["noise_type"] and len(table) == 1
    assert table.loc[0, "n"] == 6 and table.loc[0, "n_failed"] == 2
    assert table.loc[0, "best"] == 0.5 and table.loc[0, "best_seed"] == 0
    ranked = analysis.best_runs(HAND, analysis.Objective("val/acc", "min"))
    assert list(ranked["noise_rate"]) == [0.6, 0.4, 0.2] and ranked.loc[1, "best"] == 0.6


def test_best_runs_does_not_modify_input():
    before = HAND.copy()
    analysis.best_runs(HAND, analysis.Objective("val/acc", "max"))
    pd.testing.assert_frame_equal(HAND, before)


def test_best_runs_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        analysis.best_runs(HAND, analysis.Objective("val/acc", "best"))
    with pytest.raises(analysis.ExperimentError, match="config key 'lr' not found; config keys: noise_type"):
        analysis.best_runs(HAND, analysis.Objective("val/acc", "max"), by=["lr"])


def test_format_and_write_table(tmp_path):
    table = analysis.best_runs(HAND, analysis.Objective("val/acc", "max"))
    text = analysis.format_table(table)
    assert text.splitlines()[0].split() == [
        "noise_rate",
        "n",
        "failed",
        "val/acc",
        "(%;",  # an accuracy in [0, 1]: x100, as every table of the run shows it
        "mean",
        "±",
        "95%",
        "CI)",
        "std",
        "best",
        "seed",
    ]
    assert "83.00 ± 8.96" in text and "3.61" in text and len(text.splitlines()) == 4
    markdown = analysis.format_table(table, "markdown")
    assert markdown.splitlines()[1] == "|---|---|---|---|---|---|"
    assert "| 0.2 | 3 | 0 | 83.00 ± 8.96 | 3.61 | 2 |" in markdown
    latex = analysis.format_table(table, "latex")
    assert r"noise\_rate" in latex and r"83.00 $\pm$ 8.96" in latex and latex.startswith(r"\begin{tabular}{lrrrrr}")
    paths = analysis.write_table(table, tmp_path / "out" / "best_runs")
    assert [p.name for p in paths] == ["best_runs.csv", "best_runs.md", "best_runs.tex"]
    assert pd.read_csv(paths[0])["mean"].tolist() == pytest.approx([0.83, 0.65, 0.5])  # the CSV: as logged
    loss = analysis.best_runs(
        HAND.assign(**{"last/val/acc": HAND["last/val/acc"] * 100}), analysis.Objective("val/acc", "max")
    )
    assert not loss.attrs["percent"] and "83 ± 8.957" in analysis.format_table(loss)  # already in %: as logged


# ---------------------------------------------------------------------------------------------
# Timeline
# ---------------------------------------------------------------------------------------------


def _timed(spans, gpus=None, status=None) -> pd.DataFrame:
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    return pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(len(spans))],
            "trial_name": [f"t{i}" for i in range(len(spans))],
            "status": status or ["TERMINATED"] * len(spans),
            "diverged": [False] * len(spans),
            "start_time": [t0 + pd.Timedelta(seconds=s) for s, _ in spans],
            "end_time": [t0 + pd.Timedelta(seconds=e) for _, e in spans],
            "node": "n0",
            **({"last/gpu_ids": gpus} if gpus is not None else {}),
        }
    )


def test_timeline_packs_cpu_trials_into_fewest_slots():
    rows = analysis.timeline(_timed([(0, 10), (0, 5), (5, 12), (10, 20), (12, 13)]))
    assert rows["slot"].nunique() == 2  # at most two ran at once
    for _, slot in rows.groupby("slot"):
        spans = sorted(zip(slot["start_s"], slot["end_s"]))
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_timeline_uses_gpu_ids_and_multi_gpu_trials_get_a_bar_per_gpu():
    rows = analysis.timeline(_timed([(0, 10), (0, 4), (4, 10)], gpus=["0,1", "2", "2"]))
    assert list(rows["slot"]) == ["GPU 0", "GPU 1", "GPU 2", "GPU 2"]


def test_sweep_efficiency_hand_computed():
    # two slots, makespan 10 s, busy 10 + 6 = 16 slot-seconds
    assert analysis.sweep_efficiency(_timed([(0, 10), (2, 8)])) == pytest.approx(16 / 20)
    assert analysis.sweep_efficiency(_timed([(0, 10), (2, 8)]), slots=4) == pytest.approx(16 / 40)
    # two trials sharing GPU 0 with overlap count once
    assert analysis.sweep_efficiency(_timed([(0, 6), (4, 10)], gpus=["0", "0"])) == pytest.approx(1.0)
    assert math.isnan(analysis.sweep_efficiency(_timed([])))


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def loaded(grid):
    return analysis.load_experiment(grid)


def test_plot_learning_curves(loaded):
    trials, history = loaded
    fig = analysis.plot_learning_curves(history, trials, analysis.Objective("val/acc"))
    assert [ax.get_title() for ax in fig.axes] == ["noise_type = asym", "noise_type = sym"]
    for ax in fig.axes:
        assert len(ax.lines) == 3  # one per noise rate; seeds averaged
        assert len(ax.collections) == 3  # one ± std band each
        assert ax.get_xlabel() == "epoch"
    assert fig.axes[0].get_ylabel() == "val/acc"
    assert fig.get_suptitle() == "val/acc per configuration (mean ± 1 std over seeds)"
    labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert labels == ["noise_rate=0 (n=3)", "noise_rate=0.2 (n=3)", "noise_rate=0.4 (n=3)"]
    line = fig.axes[0].lines[2]  # asym, 0.4
    assert list(line.get_xdata()) == [0, 1, 2, 3, 4]
    assert line.get_ydata()[-1] == pytest.approx(0.9 - 0.32 - 0.02 + 0.01)  # mean over seeds 0, 1, 2
    (single,) = analysis.plot_learning_curves(history, trials, analysis.Objective("val/acc"), panel=None).axes
    assert len(single.lines) == 6 and "noise_type=asym, noise_rate=0.4 (n=3)" in [
        t.get_text() for t in single.get_legend().get_texts()
    ]


def test_plot_learning_curves_leaves_out_failed_trials():
    history = pd.DataFrame(
        {"trial_id": ["a", "a", "b", "b"], "training_iteration": [1, 2, 1, 2], "acc": [0.1, 0.2, 0.3, float("nan")]}
    )
    trials = pd.DataFrame(
        {
            "trial_id": ["a", "b"],
            "trial_name": ["a", "b"],
            "status": ["TERMINATED"] * 2,
            "diverged": [False, True],
            "config/seed": [0, 1],
            "last/acc": [0.2, np.nan],
        }
    )
    (ax,) = analysis.plot_learning_curves(history, trials, analysis.Objective("acc")).axes
    assert len(ax.lines) == 1 and list(ax.lines[0].get_ydata()) == [0.1, 0.2]
    assert ax.get_xlabel() == "training iteration (reports)"


def test_plot_metric_vs_noise_rate(loaded):
    trials, _ = loaded
    fig = analysis.plot_metric_vs_noise_rate(trials, analysis.Objective("val/acc"))
    assert [ax.get_title() for ax in fig.axes] == ["noise_type = asym", "noise_type = sym"]
    for ax in fig.axes:
        assert len(ax.containers) == 1  # nothing else varies: one line per panel
        assert list(ax.containers[0].lines[0].get_xdata()) == [0.0, 0.2, 0.4]
        assert ax.get_xlabel() == "noise rate (fraction of labels corrupted)"
    assert fig.axes[0].get_ylabel() == "val/acc (last; mean ± 95% CI over seeds)"
    assert list(fig.axes[1].containers[0].lines[0].get_ydata()) == pytest.approx([0.89, 0.79, 0.69])


def test_plot_metric_vs_noise_rate_one_line_per_loss(tmp_path):
    specs = [
        trial_spec(
            f"{t}{r}{loss}{s}",
            {"noise_type": t, "noise_rate": r, "loss": loss, "seed": s},
            [{"val/acc": 0.5 + r + (0.1 if loss == "gce" else 0) + 0.01 * s}],
        )
        for t in ("sym", "asym")
        for r in (0.1, 0.3)
        for loss in ("ce", "gce")
        for s in (0, 1)
    ]
    trials = analysis.load_trials(write_experiment(tmp_path, "e", specs))
    fig = analysis.plot_metric_vs_noise_rate(trials, analysis.Objective("val/acc"))
    assert len(fig.axes) == 2 and all(len(ax.containers) == 2 for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[-1].get_legend().get_texts()] == ["loss=ce", "loss=gce"]


def test_plot_heatmap(loaded):
    trials, _ = loaded
    fig = analysis.plot_heatmap(trials, "val/acc", x="noise_rate", y="noise_type")
    ax, colorbar = fig.axes
    (image,) = ax.images
    assert image.get_array().shape == (2, 3)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "0.2", "0.4"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["asym", "sym"]
    assert image.get_array()[0, 2] == pytest.approx(0.57)  # asym, 0.4, mean over seeds
    assert colorbar.get_ylabel() == "val/acc (last, mean)"
    assert ax.get_xlabel() == "noise rate (fraction of labels corrupted)" and ax.get_ylabel() == "noise type"
    assert len(ax.texts) == 6


def test_plot_timeline(loaded):
    trials, _ = loaded
    fig = analysis.plot_timeline(trials)
    (ax,) = fig.axes
    assert len(ax.patches) == 18  # one bar per trial (one GPU each)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU 0", "GPU 1"]
    efficiency = analysis.sweep_efficiency(trials)
    assert f"sweep efficiency {efficiency:.0%}" in ax.get_title()
    assert efficiency == pytest.approx(45 / 49, abs=0.01)  # 9 trials of 5 s per GPU, 0.5 s gaps
    assert ax.get_xlabel() == "time since first trial start (s)" and ax.get_ylabel() == "GPU"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["terminated"]


def test_plot_timeline_colours_status_and_cpu_slots():
    fig = analysis.plot_timeline(_timed([(0, 300), (0, 200), (200, 400)], status=["TERMINATED", "ERROR", "RUNNING"]))
    (ax,) = fig.axes
    assert len(ax.patches) == 3 and ax.get_ylabel() == "slot"
    assert ax.get_xlabel() == "time since first trial start (min)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["terminated", "error", "running"]


def test_plot_timeline_names_the_trials_on_bars_wide_enough():
    spans = [(0, 300), (300, 302), (0, 290)]  # the 2-s bar is far too narrow for a name
    trials = _timed(spans).assign(trial_name=["asym_0.375_seed1", "sym_0.5_seed0", "sym_0.125_seed2"])
    fig = analysis.plot_timeline(trials)
    (ax,) = fig.axes
    assert sorted(t.get_text() for t in ax.texts) == ["asym_0.375_seed1", "sym_0.125_seed2"]
    for text in ax.texts:  # each name lies inside its own bar
        bar = next(p for p in ax.patches if abs(p.get_x() + p.get_width() / 2 - text.get_position()[0]) < 1e-9)
        assert text.get_window_extent().width < abs(
            ax.transData.transform((bar.get_width(), 0))[0] - ax.transData.transform((0, 0))[0]
        )


def test_save_figure_png_and_svg(loaded, tmp_path):
    trials, _ = loaded
    paths = analysis.save_figure(analysis.plot_timeline(trials), tmp_path / "timeline", ("png", "svg"))
    assert [p.name for p in paths] == ["timeline.png", "timeline.svg"]
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and b"<svg" in paths[1].read_bytes()[:500]


# ---------------------------------------------------------------------------------------------
# Report and CLI
# ---------------------------------------------------------------------------------------------


def test_write_report(grid):
    out = analysis.write_up(grid, formats=("svg",))
    assert out == grid / "report"
    names = {p.name for p in out.iterdir()}
    assert {
        "timeline.svg",
        "heatmap.svg",
        "report.md",
        "best_runs.csv",
        "best_runs.md",
        "best_runs.tex",
        "best_runs.txt",
        "trials.csv",
        "learning_curves.png",
        "metric_vs_noise_rate.png",
        "heatmap.png",
        "timeline.png",
    } <= names
    report = (out / "report.md").read_text()
    for png in ("learning_curves.png", "metric_vs_noise_rate.png", "heatmap.png", "timeline.png"):
        assert f"]({png})" in report
    assert "- trials: 18 (18 finished, 0 errored, 0 diverged)" in report


def test_a_report_is_replaced_whole_and_keeps_the_files_it_does_not_write(grid, monkeypatch):
    """A writer killed midway leaves the previous report and `report.writing` (issue 55), never a torn report;
    files the write-up does not write (the seeds table, a user's notes) stay; the next write-up clears the leftover."""
    from analysis import writeup

    out = analysis.write_up(grid, formats=())
    (out / "notes.md").write_text("my notes\n")
    before = (out / "report.md").read_text()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a SIGTERM or Ctrl-C while the figures are drawn

    monkeypatch.setattr(writeup, "experiment_pictures", killed)
    with pytest.raises(KeyboardInterrupt):
        analysis.write_up(grid, formats=())
    assert (out / "report.md").read_text() == before and (grid / "report.writing").is_dir()
    monkeypatch.undo()
    assert analysis.write_up(grid, formats=()) == out
    assert (out / "notes.md").read_text() == "my notes\n" and (out / "report.md").read_text() == before
    assert sorted(p.name for p in grid.iterdir() if p.name.startswith("report")) == ["report"]
    assert analysis.load_trials(grid).shape[0] == 18  # the report folder is not taken for a trial


def test_resolve_metric_defaults(grid, tmp_path):
    def resolve_metric(experiment, metric=None):
        objective = analysis.resolve_objective(*analysis.load_experiment(experiment), {"metric": metric})
        return objective.metric, objective.mode

    assert resolve_metric(grid) == ("val/acc", "max")
    assert resolve_metric(grid, "val/loss") == ("val/loss", "min")
    plain = write_experiment(tmp_path, "p", [trial_spec("a", {}, [{"val/acc": 1}])], metric=None)
    assert resolve_metric(plain) == ("val/acc", "max")
    other = write_experiment(tmp_path, "q", [trial_spec("a", {}, [{"reward": 1}])], metric=None)
    with pytest.raises(analysis.ExperimentError, match="recorded no metric; .*reported metrics: reward"):
        resolve_metric(other)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "analysis", *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_cli_prints_table_and_report_path(grid, tmp_path):
    result = _cli(grid, "--out", tmp_path / "r", "--metric", "val/loss")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "val/loss (min; best val/loss over epochs), mean over seeds ± 95% CI:"  # the rule, stated
    assert lines[1].split()[:3] == ["noise_type", "noise_rate", "n"]
    assert lines[-1] == f"report: {tmp_path / 'r' / 'report.md'}"


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/nope"], "is not a folder"),
        (["{tmp}"], "is not a Ray Tune experiment folder"),
        (["{grid}", "--metric", "top5"], "metric 'top5' was not reported by any trial; reported metrics: epoch"),
        (["{empty}"], "has no trials"),
    ],
)
def test_cli_bad_input_one_line_error(grid, tmp_path, capsys, args, message):
    from analysis.__main__ import main

    (tmp_path / "x").mkdir()  # an ordinary folder
    empty = write_experiment(tmp_path / "y", "empty", [])
    code = main([a.format(tmp=tmp_path / "x", grid=grid, empty=empty) for a in args])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and message in captured.err


def test_cli_bad_input_exit_code_without_traceback(tmp_path):
    result = _cli(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr == f"error: {tmp_path} is not a Ray Tune experiment folder (no experiment_state-*.json "
        "and no trial folders with result.json)\n"
    )


def test_public_names_stay_functions_whatever_was_imported_first():
    # `analysis.timeline` was also a submodule's name: once `analysis.figures.plots` imported that module,
    # the package attribute was the module and `analysis.timeline(rows)` failed, depending on test order
    code = (
        "import analysis.figures.plots, analysis.writeup, analysis; "
        "assert all(callable(getattr(analysis, n)) for n in analysis.__all__ if n.islower()), "
        "[n for n in analysis.__all__ if n.islower() and not callable(getattr(analysis, n))]"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
