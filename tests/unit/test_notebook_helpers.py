"""What the notebooks call (analysis/notebook.py, analysis/writeup_pictures.py's `experiment_pictures`), on the
five kinds of experiment of tests/helpers/experiment_kinds.py; the notebooks themselves run in
tests/analysis/test_notebooks.py."""

from __future__ import annotations

import numpy as np
import pytest

import analysis
from analysis.notebook import notebook_objective, open_experiment, search_kind, search_markdown, show_picture
from analysis.writeup_pictures import experiment_pictures
from tests.helpers.analysis_fixtures import VAL_BUMP, paper_base, paper_grid
from tests.helpers.experiment_kinds import KIND_METRICS, command_sweep_experiment, five_kinds, plain_tune_experiment


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    return five_kinds(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("kind", list(KIND_METRICS))
def test_each_kind_is_ranked_by_its_recorded_metric_else_its_first(kind, kinds):
    experiment = open_experiment(str(kinds[kind]))
    metric, mode = KIND_METRICS[kind]
    assert (experiment.objective.metric, experiment.objective.mode) == (metric, mode)
    assert experiment.header.startswith(f"{kinds[kind]}: ")
    assert ("recorded no metric" in experiment.header) == (kind == "plain_tune")
    assert f"select/{metric}" in experiment.selected


def test_a_plain_tune_run_falls_back_to_its_first_metric_and_says_so(tmp_path):
    trials, history = analysis.load_experiment(plain_tune_experiment(tmp_path))
    objective, note = notebook_objective(trials, history)
    assert (objective.metric, objective.mode, objective.test_metric) == ("mean_accuracy", "max", None)
    assert note.startswith("the experiment recorded no metric: ranked by its first reported one, mean_accuracy (max")
    assert "reported: mean_accuracy, loss" in note
    asked, none = notebook_objective(trials, history, {"metric": "loss", "select": "last"})
    assert (asked.metric, asked.mode, asked.select, none) == ("loss", "min", "last", None)  # asked: no note
    with pytest.raises(analysis.ExperimentError, match="val_loss"):  # a metric never reported: refused, as the CLI
        notebook_objective(trials, history, {"metric": "val_loss"})


def test_a_command_sweep_keeps_its_recorded_metric_and_has_no_test_metric(tmp_path):
    trials, history = analysis.load_experiment(command_sweep_experiment(tmp_path))
    objective, note = notebook_objective(trials, history, {"metric": None, "test_metric": None})
    assert (objective.metric, objective.test_metric, note) == ("val_acc", None, None)


def test_pictures_need_their_axis_and_say_why_not(kinds, capsys):
    for kind, missing in {
        "command": "no noise_rate",
        "plain_tune": "no noise_rate",
        "search": "one noise rate (0.5)",
    }.items():
        experiment = open_experiment(str(kinds[kind]))
        pictures = {p.name: p for p in experiment_pictures(*_inputs(experiment))}
        assert list(pictures) == ["learning_curves", "metric_vs_noise_rate", "heatmap", "timeline"]
        assert pictures["metric_vs_noise_rate"].draw is None and pictures["metric_vs_noise_rate"].why.startswith(
            missing
        )
        assert show_picture(pictures["metric_vs_noise_rate"]) is None
        assert capsys.readouterr().out == f"metric_vs_noise_rate left out: {pictures['metric_vs_noise_rate'].why}\n"
        assert pictures["learning_curves"].draw is not None and pictures["timeline"].draw is not None


def test_a_picture_that_cannot_be_drawn_says_the_error(capsys):
    from analysis.figures.search import Picture

    def broken():
        raise ValueError("one value")

    assert show_picture(Picture("slice", "Slice", broken)) is None
    assert capsys.readouterr().out == "slice not drawn: ValueError: one value\n"


@pytest.mark.parametrize("select, bump", [("best-val", max(VAL_BUMP)), ("last", VAL_BUMP[-1])])
def test_the_heatmap_and_noise_rate_curve_show_each_trials_value_under_select(tmp_path, select, bump):
    grid = paper_grid(tmp_path, losses=("ce",), types=("sym", "asym"), rates=(0.2, 0.4), seeds=(0,))
    experiment = open_experiment(str(grid), {"select": select})
    pictures = {p.name: p for p in experiment_pictures(*_inputs(experiment))}
    heatmap = pictures["heatmap"].draw()
    values = heatmap.axes[0].images[0].get_array()
    expected = [[paper_base("ce", t, r, 0) + bump for r in (0.2, 0.4)] for t in sorted(("sym", "asym"))]
    assert np.allclose(np.asarray(values, dtype=float), expected)
    curve = pictures["metric_vs_noise_rate"].draw()  # one panel per noise type (asym, sym), x: the noise rates
    assert np.allclose([list(ax.lines[0].get_ydata()) for ax in curve.axes], expected)


def _inputs(experiment):
    return experiment.trials, experiment.history, experiment.selected, experiment.objective


def test_the_search_notebook_says_what_is_not_a_search_and_ranks_its_trials(kinds):
    grid = open_experiment(str(kinds["command"]))
    assert search_kind(grid.trials).startswith("not a search or PBT run")
    table = search_markdown(grid)
    assert "4 trials ranked by best val_acc over epochs (max)" in table
    assert "| rank | trial | lr | seed | epochs |" in table
    search = open_experiment(str(kinds["search"]))
    assert search_kind(search.trials) == "a search (OptunaSearch, AsyncHyperBandScheduler)"
    assert "| rank | trial | lr | weight_decay |" in search_markdown(search)
    assert search_kind(open_experiment(str(kinds["pbt"])).trials) == "a PBT run (PopulationBasedTraining)"
