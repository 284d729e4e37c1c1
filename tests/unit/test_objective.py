"""The objective (issue 39, item 1): one frozen value, its defaults written once, its flags generated from it,
passed whole from the flags to Tune, the trials and the tables."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective, add_objective_flags, objective_of


def test_defaults_and_what_the_tables_and_trials_read_from_it():
    objective = Objective()
    assert (objective.metric, objective.mode, objective.test_metric) == ("val/acc", "max", "test/acc")
    assert (objective.select, objective.k) == ("best-val", 10)
    assert (objective.table_metric, objective.table_mode) == ("test/acc", "max")
    assert objective.step_metrics == ("val/acc", "test/acc")
    assert objective.rule == "test/acc at the epoch of best val/acc (ties: earliest)"
    validation = objective.validation()
    assert (validation.table_metric, validation.rule) == ("val/acc", "best val/acc over epochs")
    with pytest.raises(dataclasses.FrozenInstanceError):
        objective.metric = "val/loss"


def test_a_test_metric_equal_to_the_metric_is_none_and_the_test_metric_has_its_own_direction():
    command = Objective("val_acc", test_metric="val_acc")
    assert command.test_metric is None and command.table_metric == "val_acc" and command.step_metrics == ("val_acc",)
    assert command == Objective("val_acc", test_metric=None)
    loss = Objective("val/loss", "min", test_metric="test/acc", select="last-k", k=3)
    assert (loss.table_mode, loss.rule) == ("max", "test/acc averaged over the last 3 epochs")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"mode": "best"}, "mode must be 'max' or 'min', not 'best'"),
        ({"select": "best-test"}, "unknown selection rule 'best-test'"),
        ({"select": "last-k", "k": 0}, "last-k needs k >= 1"),
    ],
)
def test_bad_values_are_refused_when_made(fields, message):
    with pytest.raises(ExperimentError, match=message):
        Objective(**fields)


def test_flags_are_generated_from_the_fields_with_each_default_once():
    parser = argparse.ArgumentParser()
    add_objective_flags(
        parser, ("metric", "mode", "test_metric"), defaults={"metric": "val_acc"}, later={"test_metric": "--metric"}
    )
    helps = {a.dest: a for a in parser._actions}
    assert helps["metric"].help.endswith("(default: val_acc)") and helps["metric"].default == "val_acc"
    assert helps["mode"].choices == ("max", "min") and helps["mode"].default == Objective.mode
    assert helps["test_metric"].default is None and helps["test_metric"].help.endswith("(default: --metric)")
    assert "select" not in helps
    assert objective_of(parser.parse_args([])) == Objective("val_acc", test_metric=None)
    given = objective_of(parser.parse_args(["--metric", "loss", "--mode", "min", "--test-metric", "test_loss"]))
    assert given == Objective("loss", "min", "test_loss")

    analysis_flags = argparse.ArgumentParser()
    add_objective_flags(analysis_flags, ("select", "k"))
    args = analysis_flags.parse_args(["--select", "last-k", "--k", "3"])
    assert (args.select, args.k) == ("last-k", 3) and analysis_flags.parse_args([]).k == Objective.k


def test_run_options_carry_the_objective_made_once():
    from sweeps import run_command
    from sweeps.engine import run_flags

    args = run_command.parse_args(["--metric", "acc", "--test-metric", "test_acc", "--", "python", "train.py"])
    options = run_flags.run_options(args)
    assert options.objective is args.objective == Objective("acc", "max", "test_acc")
    plain = argparse.ArgumentParser()
    run_flags.add_run_args(plain, name="x", grid=False)
    parsed = plain.parse_args([])
    run_flags.check_run_args(parsed)
    assert run_flags.run_options(parsed).objective == Objective()
