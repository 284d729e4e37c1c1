"""A search's report draws the search (issue 42): how each trial ended, the search record, Optuna's own
pictures and PBT's schedule checked as data, grid pictures only where they mean something, the search
table in the report and in --json, no library warning on the console, and the ten-trial lr_search run."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.figures.pbt_schedule import plot_pbt_schedule
from analysis.figures.search import OPTUNA_PICTURES, search_pictures, study_from_trials
from analysis.tables.search_table import search_frame
from tests.helpers.analysis_fixtures import (
    noise_grid,
    pbt_experiment,
    search_experiment,
    trial_spec,
    write_driver_end,
    write_experiment,
)
from trainables.experiment.outcome import trial_outcome

REPO = Path(__file__).resolve().parents[2]
SEARCH_PNGS = {f"{name}.png" for name in OPTUNA_PICTURES} | {"optimization_history_time.png"}


# --- why each trial ended ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, stop_at, iterations, planned, stopped, outcome",
    [
        ("TERMINATED", 4, 4, 4, False, "finished"),  # ASHA's STOP at max_t: it ran all its epochs
        ("TERMINATED", None, 4, 4, False, "finished"),  # the trainable returned
        ("TERMINATED", 1, 1, 4, False, "pruned"),  # the scheduler said STOP at a rung
        ("TERMINATED", 2, 3, None, False, "finished"),  # it logged past the STOP: its script ran on and exited
        ("TERMINATED", None, 2, 4, True, "interrupted"),  # the sweep's end stopped it (its time budget, ...)
        ("TERMINATED", None, 2, 4, False, "finished"),  # returned early by itself: not stopped
        ("TERMINATED", 1, 1, None, False, "pruned"),  # no planned end: any STOP it did not outrun is the scheduler's
        ("ERROR", 1, 1, 4, False, "errored"),
        ("RUNNING", None, 2, 4, False, "running"),
        ("PENDING", None, 0, 4, False, "pending"),
    ],
)
def test_a_trial_was_pruned_only_when_its_scheduler_stopped_it_before_its_end(
    status, stop_at, iterations, planned, stopped, outcome
):
    result = {"training_iteration": iterations, "val/acc": 0.5} if iterations else {}
    assert trial_outcome(status, result, stopped=stopped, stop_at=stop_at, planned=planned) == outcome


def test_the_trial_table_says_how_each_trial_ended(tmp_path):
    trials = analysis.load_trials(search_experiment(tmp_path, errored=1))
    counts = {"finished": 6, "pruned": 4, "interrupted": 1, "errored": 1}
    assert trials["outcome"].value_counts().to_dict() == counts
    assert trials.attrs["ended_by"] == "time budget"  # the driver's record: what interrupted it
    pruned = trials[trials["outcome"] == "pruned"]
    assert (pruned["iterations"] == 1).all() and (pruned["status"] == "TERMINATED").all()
    # the driver's record of the scheduler's stops, where it has one, decides
    experiment = search_experiment(tmp_path / "recorded")
    write_driver_end(experiment, ended_by="finished", scheduler_stops={})  # no STOP recorded: none pruned
    assert set(analysis.load_trials(experiment)["outcome"]) == {"finished"}


def test_an_empty_result_json_is_read_from_progress_csv_and_its_empty_cells_are_not_nan(tmp_path):
    """Seen for PBT members paused and restored: Tune's result.json came back empty, progress.csv whole."""
    experiment = write_experiment(tmp_path, "pbt", [trial_spec("pbt_00000", {"lr": 0.1}, [{"val/acc": 0.5}] * 2)])
    folder = next(p for p in experiment.iterdir() if p.is_dir())
    (folder / "result.json").write_text("")
    (folder / "progress.csv").write_text(
        "val/acc,gpu_ids,done,training_iteration,trial_id\n0.4,,False,1,abcde_00000\n0.6,,False,2,abcde_00000\n"
    )
    trials, history = analysis.load_experiment(experiment)
    assert list(history["val/acc"]) == [0.4, 0.6] and trials.loc[0, "iterations"] == 2
    assert not trials.loc[0, "diverged"] and trials.loc[0, "outcome"] == "finished"  # an empty gpu_ids is no NaN


# --- what the experiment folder says about its search --------------------------------------------------------


def test_the_search_record_comes_from_raysweep_json_and_the_searchers_own_study(tmp_path):
    record = analysis.load_trials(search_experiment(tmp_path)).attrs["search"]
    assert (record.kind, record.searcher, record.scheduler) == ("search", "OptunaSearch", "AsyncHyperBandScheduler")
    assert record.params == ["lr", "weight_decay", "batch_size", "loss", "gce_q"]
    scales = {name: getattr(d, "log", None) for name, d in record.distributions.items()}
    assert scales == {"lr": True, "weight_decay": True, "batch_size": None, "loss": None, "gce_q": False}
    assert (record.distributions["lr"].low, record.distributions["lr"].high) == (1e-4, 1.0)  # the box, not the samples
    # A foreign Tune experiment (no raysweep.json): known by its searcher's state file.
    foreign = analysis.load_trials(search_experiment(tmp_path, "foreign", record=None)).attrs["search"]
    assert (foreign.kind, foreign.searcher, foreign.scheduler) == ("search", "OptunaSearch", None)
    assert analysis.load_trials(noise_grid(tmp_path, seeds=(0,))).attrs["search"] is None


def test_pbt_steps_are_read_from_tunes_log_and_named_by_trial(tmp_path):
    record = analysis.load_trials(pbt_experiment(tmp_path)).attrs["search"]
    assert (record.kind, record.scheduler) == ("pbt", "PopulationBasedTraining")
    (step,) = record.exploits
    assert (step.trial_id, step.source_id, step.iteration) == ("pbt42_00000", "pbt42_00002", 2)
    assert step.config["lr"] == 0.12 and record.sampled["pbt42_00000"]["lr"] == 0.001
    foreign = analysis.load_trials(pbt_experiment(tmp_path / "foreign", global_log=True)).attrs["search"]
    assert foreign.kind == "pbt"


# --- the pictures, checked as data -------------------------------------------------------------------------


@pytest.fixture
def search(tmp_path):
    """(selected trials, history) of a 12-trial search: 6 finished, 4 pruned, 1 stopped by the budget, 1 errored."""
    trials, history = analysis.load_experiment(search_experiment(tmp_path, errored=1))
    return analysis.add_selected(trials, history, ["val/acc"], analysis.Objective()), history


def drawn(pictures) -> dict:
    return {p.name: p.draw() for p in pictures if p.draw is not None}


def test_the_study_marks_pruned_trials_as_optuna_does(search):
    selected, history = search
    record = selected.attrs["search"]
    study = study_from_trials(
        search_frame(selected, "val/acc"),
        record.params,
        analysis.Objective("val/acc", "max"),
        distributions=record.distributions,
        history=history,
    )
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 6 and states.count("PRUNED") == 4 and states.count("FAIL") == 1
    assert states.count("RUNNING") == 1  # stopped by the budget: not finished
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert all(t.value is None and list(t.intermediate_values) == [1] for t in pruned)
    assert [t.user_attrs["trial"] for t in study.trials] == [f"lr_search_{k:05d}" for k in range(1, 13)]


def test_optuna_pictures_of_a_search_as_data(search):
    selected, history = search
    figures = drawn(search_pictures(selected, history, analysis.Objective("val/acc", "max")))
    assert set(figures) == {*OPTUNA_PICTURES, "optimization_history_time"}
    complete = 6
    (history_ax,) = figures["optimization_history"].axes
    assert len(history_ax.collections[0].get_offsets()) == complete  # one point per complete trial
    best = history_ax.lines[0].get_ydata()
    assert np.all(np.diff(best[np.isfinite(best)]) >= 0) and np.nanmax(best) == pytest.approx(
        selected.loc[selected["outcome"] == "finished", "select/val/acc"].max()
    )
    slice_axes = {ax.get_xlabel(): ax for ax in figures["slice"].axes if ax.get_label() != "<colorbar>"}
    assert set(slice_axes) == {"lr", "weight_decay", "batch_size", "loss", "gce_q"}
    assert {name for name, ax in slice_axes.items() if ax.get_xscale() == "log"} == {"lr", "weight_decay"}
    assert len(slice_axes["lr"].collections[0].get_offsets()) == complete
    complete_gce = ((selected["outcome"] == "finished") & (selected["config/loss"] == "gce")).sum()
    assert len(slice_axes["gce_q"].collections[0].get_offsets()) == complete_gce == 4  # gce's own parameter
    (importance_ax,) = figures["param_importances"].axes
    assert "PED-ANOVA" in importance_ax.get_title(loc="left")  # Optuna's default evaluator, named
    assert len(importance_ax.patches) == 5
    parallel = figures["parallel_coordinate"].axes
    assert len(parallel[0].collections[0].get_paths()) == complete  # one line per complete trial
    assert sum(ax.get_yscale() == "log" for ax in parallel) == 2  # lr and weight decay, as sampled
    (time_ax,) = figures["optimization_history_time"].axes
    assert np.isfinite(time_ax.collections[0].get_offsets()[:, 1]).sum() == complete


def test_pictures_that_cannot_be_drawn_say_why(tmp_path):
    trials, history = analysis.load_experiment(search_experiment(tmp_path, n=5, finished=1))
    selected = analysis.add_selected(trials, history, ["val/acc"], analysis.Objective())
    pictures = search_pictures(selected, history, analysis.Objective("val/acc", "max"))
    assert all(p.draw is None and not p.expected for p in pictures) and len(pictures) == 5
    assert pictures[0].why.startswith("1 complete trial(s), 2 needed among the complete trials (1 of 5 trials")


def test_the_pbt_schedule_as_data(tmp_path):
    trials = analysis.load_trials(pbt_experiment(tmp_path))
    fig = plot_pbt_schedule(trials, trials.attrs["search"], "val/acc")
    lr_ax, wd_ax = fig.axes[:2]
    assert (lr_ax.get_title(), wd_ax.get_title()) == ("lr", "weight_decay")
    assert lr_ax.get_yscale() == "log" and wd_ax.get_yscale() == "linear"  # lr spans 1000x, wd 2x
    member = next(line for line in lr_ax.lines if line.get_label().startswith("pbt_00000"))
    assert list(member.get_xdata()) == [0, 2, 4] and list(member.get_ydata()) == [0.001, 0.12, 0.12]
    assert member.get_drawstyle() == "steps-post"
    assert len(lr_ax.lines) == 4
    assert lr_ax.collections[0].get_offsets().tolist() == [[2.0, 0.12]]  # the exploit step, marked
    assert "← pbt_00002" in [t.get_text() for t in lr_ax.texts]  # the member it copied
    assert "1 exploit/explore step(s)" in fig.get_suptitle()


def test_learning_curves_of_a_big_search_show_the_best_few(search):
    selected, history = search
    fig = analysis.plot_learning_curves(history, selected, analysis.Objective("val/acc", "max"), highlight=3)
    (ax,) = fig.axes
    named = [line for line in ax.lines if not line.get_label().startswith("_")]
    assert len(named) == 3 and len(ax.lines) == 10  # 12 trials, the errored and the interrupted one left out
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "the other 7 configurations"
    best = selected.sort_values("best/val/acc", ascending=False)["config/lr"].iloc[0]
    assert legend[0].startswith(f"lr={best:g},")  # best first
    one_point = [line for line in named if len(line.get_xdata()) == 1]
    assert all(line.get_marker() == "o" for line in one_point)


# --- the report --------------------------------------------------------------------------------------------


def test_a_search_report_draws_the_search_and_leaves_out_grid_pictures(tmp_path, capsys):
    experiment = search_experiment(tmp_path, errored=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = analysis.write_up(experiment)
    assert not caught, [str(w.message) for w in caught]
    assert capsys.readouterr().out == ""  # nothing failed: no line on the console
    files = {p.name for p in out.iterdir()}
    assert SEARCH_PNGS <= files and {"search_table.csv", "search_table.md", "search_table.tex"} <= files
    assert not {"heatmap.png", "metric_vs_noise_rate.png", "noise_rate_curves.png"} & files
    report = (out / "report.md").read_text()
    assert "- `metric_vs_noise_rate`: one noise rate (0.5): nothing to draw against" in report
    assert "- `heatmap`: a search samples its parameters" in report
    assert "Evaluator: PED-ANOVA (Watanabe et al. 2023), Optuna's default" in report
    table = pd.read_csv(out / "search_table.csv")
    assert list(table["rank"].iloc[:6]) == [1, 2, 3, 4, 5, 6] and table["rank"].iloc[-2:].isna().all()
    assert set(table["ended"].iloc[-2:]) == {"errored", "interrupted"}  # unranked: no result of theirs
    assert "| 1 | lr_search_00009 |" in report and "pruned by ASHA" in report
    assert "stopped by the time budget" in report  # its driver's record: the budget ended the sweep


def test_a_pbt_report_holds_the_schedule_and_says_why_optuna_pictures_are_left_out(tmp_path):
    out = analysis.write_up(pbt_experiment(tmp_path))
    files = {p.name for p in out.iterdir()}
    assert "pbt_schedule.png" in files and not SEARCH_PNGS & files
    report = (out / "report.md").read_text()
    assert "![PBT schedule](pbt_schedule.png)" in report
    assert "- `slice`: PBT changes a member's hyperparameters while it trains" in report


def test_a_picture_that_cannot_be_drawn_is_one_line_on_the_console(tmp_path, capsys):
    out = analysis.write_up(search_experiment(tmp_path, n=5, finished=1))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [*OPTUNA_PICTURES, "optimization_history_time"]
    assert all("1 complete trial(s), 2 needed" in line for line in lines)
    assert "- `slice`: 1 complete trial(s), 2 needed" in (out / "report.md").read_text()


def test_heatmap_only_over_axes_with_few_values(tmp_path):
    rows = [{"val/acc": 0.5}]
    specs = [
        trial_spec(f"t{k}", {"loss": ("ce", "gce")[k % 2], "wd": (1e-4, 1e-3)[k // 2 % 2], "lr": 0.001 * (k + 1)}, rows)
        for k in range(16)
    ]
    out = analysis.write_up(write_experiment(tmp_path, "grid", specs))
    assert "## val/acc over loss × wd" in (out / "report.md").read_text()  # not over lr (16 values)
    specs = [trial_spec(f"t{k}", {"loss": ("ce", "gce")[k % 2], "lr": 0.001 * (k + 1)}, rows) for k in range(16)]
    out = analysis.write_up(write_experiment(tmp_path, "one_axis", specs))
    assert "heatmap.png" not in {p.name for p in out.iterdir()}
    assert (
        "- `heatmap`: fewer than two config keys vary over at most 12 values (lr: more)"
        in (out / "report.md").read_text()
    )


def test_json_holds_the_search_table(tmp_path):
    from jsonschema import Draft202012Validator

    from analysis.tables.json_output import schema

    def document(experiment):
        result = subprocess.run(
            [sys.executable, "-m", "analysis", str(experiment), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr
        doc = json.loads(result.stdout)
        Draft202012Validator(schema(doc["schema"])).validate(doc)
        return doc

    search = document(search_experiment(tmp_path, errored=1))["search"]
    assert (search["kind"], search["scheduler"]) == ("search", "AsyncHyperBandScheduler")
    assert [t["rank"] for t in search["trials"]] == [*range(1, 11), None, None]  # interrupted, errored: unranked
    first = search["trials"][0]
    assert first["trial"] == "lr_search_00009" and first["ended"] == "finished" and first["epochs"] == 4
    assert first["params"]["lr"] == pytest.approx(10 ** (-4 + 4 * 8 / 11))
    assert "gce_q" not in first["params"]  # a ce trial has no q
    assert {t["ended"] for t in search["trials"]} == {"finished", "pruned", "interrupted", "errored"}
    assert document(noise_grid(tmp_path, seeds=(0,)))["search"] is None


# --- one scale and one count per run ------------------------------------------------------------------------


def test_a_budget_ended_search_counts_its_never_made_trials_alike_and_shows_one_scale_everywhere(tmp_path):
    """6 trials made (3 finished, 1 stopped by the time budget, 2 pruned), 4 never made by the searcher: every
    count of the run says 10 trials, 4 not run, as the driver's last line did (`driver.json`'s not_created);
    val/acc (in [0, 1]) is shown x100 in % with its unit and spread said, and `--json` states its unit."""
    from analysis.reading.trial_outcomes import trial_counts
    from analysis.tables.search_table import search_outcome_lines
    from analysis.tables.summary import format_summary, sweep_tables

    experiment = search_experiment(tmp_path, n=6, finished=3, budget=1)
    write_driver_end(experiment, ended_by="time budget", stopped=["abcde_00002"], not_created=4)
    trials, history = analysis.load_experiment(experiment)
    objective = analysis.Objective("val/acc", "max")
    counts = trial_counts(trials)
    assert (counts["total"], counts["finished"], counts["interrupted"], counts["not_run"]) == (10, 3, 1, 4)
    summary = format_summary(trials, sweep_tables(trials, history, objective))
    assert "failed trials (left out of the cells): 0 errored, 0 diverged, 1 interrupted, 4 not run" in summary
    assert "test/acc (%)" in summary and "mean ± std (n seeds)" in summary  # its spread, said

    lines = search_outcome_lines(str(experiment), objective, planned=10)
    assert lines[0] == "10 trials: 3 finished, 2 pruned, 1 interrupted, 4 not run"
    header, best = lines[-1].splitlines()[:2]
    assert header.split()[-2:] == ["val/acc", "(%)"]  # one seed each: no spread to say
    top = trials.loc[trials["best/val/acc"].idxmax(), "best/val/acc"]  # the rule: the best over epochs
    assert best.split()[-1] == f"{top * 100:.2f}"  # the summary's scale, not 0.7877

    report = (analysis.write_up(experiment) / "report.md").read_text()
    assert "- trials: 10 (3 finished, 2 pruned, 0 errored, 0 diverged, 1 interrupted, 4 not run)" in report
    assert "4 not run" in report.split("## Search")[1].split("\n\n")[1]  # the search table's caption
    assert "running" not in report.split("## Search")[1]  # Optuna's states are not our words
    assert "val/acc (%)" in report and "val/acc (%; mean ± 95% CI)" in report

    result = subprocess.run(
        [sys.executable, "-m", "analysis", str(experiment), "--json"], capture_output=True, text=True, cwd=REPO
    )
    document = json.loads(result.stdout)
    assert document["trials"]["total"] == 10 and document["trials"]["not_run"] == 4
    assert document["units"] == {"val/acc": "fraction", "test/acc": "fraction"}
    assert document["search"]["unit"] == "fraction" and document["search"]["trials"][0]["value"] == pytest.approx(top)


def test_caption_adds_trials_never_made_to_the_not_run_already_counted():
    """CI failure of 2026-11-28: pandas 3 hands value_counts back read-only, so adding the trials the searcher
    never made to a 'not run' count already there raised instead of writing the caption."""
    from analysis.tables.search_table import search_caption

    table = pd.DataFrame({"ended": ["finished", "finished", "not run", "not run"]})
    table.attrs.update(mode="max", not_created=2)
    caption = search_caption(table, "val_acc")
    assert "2 finished" in caption and "4 not run" in caption
    assert "2 of the not run were never made by the searcher" in caption
