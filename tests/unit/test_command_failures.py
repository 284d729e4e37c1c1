"""How a command sweep fails and stops, through `python sweeps/run_command.py` as a user types it, on the
session's shared Ray (conftest's `sweep_env`): a failure that repeats explains itself once; a stop never
tears the file the script is writing."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.command_sweeps import MISSING_DATA, PY, ROOT

# --- the pieces, without Ray -----------------------------------------------------------------------


def test_a_config_dump_is_not_a_metrics_row_and_a_crash_before_any_step_reports_nothing():
    from trainables.command.parse import StepContext, line_metrics

    assert line_metrics("Namespace(batch_size=64, data='../data', epochs=14, lr=1.0)", "epoch") == {}
    assert line_metrics("{'lr': 0.1, 'data_path': '../datasets', 'epochs': 10}", "epoch") == {}
    assert line_metrics('{"lr": 0.1, "amp": true}', "epoch") == {}
    assert line_metrics("{'eval_loss': 0.31, 'epoch': 2.0}", "epoch") == {"eval_loss": 0.31, "epoch": 2.0}  # HF
    crashed = StepContext("epoch")
    crashed.feed("lr: 0.1")  # a YAML dump, line by line
    assert crashed.close(crashed=True) == []
    finished = StepContext("epoch")
    finished.feed("val_acc: 0.9")  # a script that prints no step: its result, once it exited 0
    assert finished.close() == [{"val_acc": 0.9, "epoch": 0}]


def test_the_gate_lets_three_attempts_start_until_a_result_and_knows_a_repeated_error():
    from trainables.command.failure_gate import FailureGate

    gate = FailureGate(3)
    assert [gate.enter(a) for a in "abcd"] == ["go", "go", "go", "wait"]
    assert gate.failed_early("a", "1: FileNotFoundError: x") == (False, False)
    assert gate.enter("d") == "wait"  # 2 running + 1 failed: no fourth start yet
    assert gate.failed_early("b", "1: FileNotFoundError: x") == (True, False)  # the same error: not retried
    assert gate.failed_early("c", "1: KeyError: y") == (False, True)  # 3 failures before any result: the sweep stops
    assert gate.enter("d") == "stop"
    opened = FailureGate(3)
    opened.enter("a")
    opened.reported("a")
    assert [opened.enter(a) for a in "bcdef"] == ["go"] * 5  # a trial reported: every trial starts at once
    assert FailureGate(0).enter("a") == "go" and not FailureGate(0).stopping()


SHAPE_NOT_READ = "0: command exited 0 but reported no metric"  # a `no metric`'s signature: its summary
NO_VAL_ACC = "0: command exited 0 but reported no val_acc"


def test_the_gate_stops_after_three_exits_without_the_metric_for_one_reason_even_once_every_trial_started():
    from trainables.command.failure_gate import FailureGate

    gate = FailureGate(3, survival_s=0.0)
    assert [gate.enter(a) for a in "abc"] == ["go"] * 3
    gate.started("a")
    assert gate.enter("d") == "go"  # "a" outlived its window: every trial starts (it printed, never the metric)
    assert gate.failed_early("a", SHAPE_NOT_READ, True) == (False, False)
    assert gate.failed_early("b", NO_VAL_ACC, True) == (False, False)
    assert gate.failed_early("c", SHAPE_NOT_READ, True) == (True, False)  # 2 for one reason, 1 for another: on
    assert gate.enter("e") == "go"
    assert gate.failed_early("d", SHAPE_NOT_READ, True) == (True, True)  # the third for one reason: the sweep stops
    assert gate.enter("f") == "stop"  # the open window does not undo the stop
    closed = FailureGate(3)
    assert [closed.enter(a) for a in "abc"] == ["go"] * 3
    for attempt, why in zip("abc", (SHAPE_NOT_READ, NO_VAL_ACC, "0: command exited 0 but reported no test_acc")):
        closed.failed_early(attempt, why, True)
    assert closed.enter("d") == "go" and not closed.stopping()  # three reasons, one each: the next ones start
    works = FailureGate(3)
    works.enter("a")
    works.reported("a")
    assert [works.failed_early(a, SHAPE_NOT_READ, True)[1] for a in "bcd"] == [False] * 3
    assert works.enter("e") == "go"  # a trial reported the metric: later exits without it never stop the sweep


def test_lines_without_the_metric_do_not_show_the_gate_that_the_command_works(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from trainables.command.failure_gate import FailureGate
    from trainables.command.step_reporter import StepReporter

    monkeypatch.setattr("trainables.command.step_reporter.tune.report", lambda *args, **kwargs: None)
    gate = FailureGate(3)
    assert gate.enter("a") == "go"
    reporter = StepReporter("epoch", tmp_path, works_when=("val_acc",))
    reporter.ticket = SimpleNamespace(call=lambda method, *args: getattr(gate, method)("a", *args))
    reporter.report_new([{"epoch": 1, "loss": 0.3}])
    assert not gate.opened and not gate.works  # a row, but not the sweep's metric
    reporter.report_new([{"epoch": 2, "loss": 0.2, "val_acc": 0.5}])
    assert gate.opened and gate.works and reporter.works


def test_a_failure_signature_blanks_the_trial_and_the_hint_names_the_missing_relative_path():
    from trainables.command.failure import crash_failure
    from trainables.command.failure_gate import missing_path
    from trainables.command.initial_failures import hint

    tails = [
        ["Traceback (most recent call last):", f"FileNotFoundError: [Errno 2] No such file: '/runs/{t}/work/x'"]
        for t in ("t0", "t1")
    ]
    signatures = {
        crash_failure(1, tail, "python x.py", f"/runs/{t}/work", {f"/runs/{t}/work": "{trial_dir}"}, True).signature
        for tail, t in zip(tails, ("t0", "t1"))
    }
    assert len(signatures) == 1
    line = "FileNotFoundError: [Errno 2] No such file or directory: '../data/train'"
    assert missing_path(line) == "../data/train"
    failure = crash_failure(1, ["=> loading", line], "python x.py", "/runs/t0/work", {}, early=True)
    assert (failure.missing_path, failure.exception, failure.exit_code) == ("../data/train", line, 1)
    text = hint(failure)
    assert "'../data/train' is relative to the trial's working folder /runs/t0/work" in text
    assert "/runs/t0/data/train" in text and "--in-place" in text
    assert "--check" in hint(crash_failure(1, ["KeyError: 'lr'"], "python x.py", "/w", {}, early=True))
    assert "argparse's usage error" in hint(crash_failure(2, ["x.py: error: bad"], "python x.py", "/w", {}, True))


def test_initial_failures_stop_after_three_handled_errors_only_while_no_trial_reported():
    from types import SimpleNamespace

    from trainables.command.failure_gate import EARLY_FAILURE_METRIC
    from trainables.command.initial_failures import InitialFailures

    early = SimpleNamespace(last_result={EARLY_FAILURE_METRIC: 1})
    stopper = InitialFailures(3)
    for _ in range(2):
        stopper.on_trial_recover(0, [], early)
    assert not stopper.stop_all()
    stopper.on_trial_error(0, [], early)
    assert stopper.stop_all() and not stopper(trial_id="t", result={})
    working = InitialFailures(3)
    working.on_trial_result(0, [], early, {"epoch": 1, "val_acc": 0.5})
    for _ in range(5):
        working.on_trial_error(0, [], early)
    assert not working.stop_all()  # failures after a result keep Tune's retries


def test_initial_failures_stop_after_three_exits_without_the_metric_for_one_reason_until_a_trial_reports_it():
    from types import SimpleNamespace

    from trainables.command.failure_gate import EARLY_FAILURE_METRIC, FAILURE_SIGNATURE_METRIC
    from trainables.command.initial_failures import InitialFailures
    from trainables.experiment.outcome import FAILED_METRIC, NO_METRIC_METRIC

    def no_metric(why: str):
        marks = {FAILED_METRIC: 1, NO_METRIC_METRIC: 1, EARLY_FAILURE_METRIC: 1, FAILURE_SIGNATURE_METRIC: why}
        return SimpleNamespace(last_result=marks)

    stopper = InitialFailures(3, metric="val_acc")
    stopper.on_trial_result(0, [], no_metric(""), {"epoch": 1, "loss": 0.3})  # a row without the metric
    for why in (SHAPE_NOT_READ, NO_VAL_ACC, SHAPE_NOT_READ):
        stopper.on_trial_error(0, [], no_metric(why))
    assert not stopper.stop_all()  # 2 for one reason, 1 for another
    stopper.on_trial_error(0, [], no_metric(SHAPE_NOT_READ))
    assert (
        stopper.stop_all() and stopper.why == "its first 3 trials ended without reporting val_acc, for the same reason"
    )
    working = InitialFailures(3, metric="val_acc")
    working.on_trial_result(0, [], no_metric(""), {"epoch": 1, "val_acc": 0.5})
    for _ in range(4):
        working.on_trial_error(0, [], no_metric(SHAPE_NOT_READ))
    assert not working.stop_all()  # a trial reported the metric: the command works


@pytest.mark.parametrize("lost", ["unavailable", "died"])
def test_a_gate_that_does_not_answer_costs_a_warning_never_the_sweep(lost, monkeypatch, capsys):
    """A lost node took the gate actor (issue 55): Tune's error handler calls `on_trial_error`, whose `forget`
    raised ActorUnavailableError and ended fit(); now one line, nothing counted, the retries go on."""
    from types import SimpleNamespace

    import ray.exceptions

    from trainables.command import initial_failures
    from trainables.command.failure_gate import EARLY_FAILURE_METRIC

    def no_answer(ref):
        if lost == "unavailable":
            raise ray.exceptions.ActorUnavailableError("the node was lost", b"\0" * 16)
        raise ray.exceptions.RayActorError()

    monkeypatch.setattr(initial_failures.ray, "get", no_answer)
    callbacks = initial_failures.InitialFailures(3)
    callbacks._gate = SimpleNamespace(forget=SimpleNamespace(remote=lambda *args: "ref"))
    trial = SimpleNamespace(trial_id="t1", last_result={})
    for hook in (callbacks.on_trial_error, callbacks.on_trial_recover, callbacks.on_trial_complete):
        hook(0, [], trial)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    assert all(line.startswith("warning: the sweep's failure gate did not answer") for line in lines)
    assert callbacks.failures.count() == 0 and not callbacks.stop_all()
    callbacks.on_trial_error(0, [], SimpleNamespace(trial_id="t2", last_result={EARLY_FAILURE_METRIC: 1}))
    assert callbacks.failures.count() == 1  # a failure before any metric still counts from the trial's own result


def test_explain_prints_each_distinct_early_error_once_from_the_failure_records(tmp_path, capsys, monkeypatch):
    from trainables.command import failure as command_failure
    from trainables.command.failure import crash_failure, fail
    from trainables.command.failure_gate import EARLY_FAILURE
    from trainables.command.initial_failures import explain
    from trainables.experiment import records
    from trainables.experiment.outcome import FAILED_METRIC

    reported = []
    monkeypatch.setattr(command_failure.tune, "report", reported.append)
    line = "FileNotFoundError: [Errno 2] No such file or directory: '../data/train'"
    for i in range(3):
        work = f"/runs/command/t{i}/work"
        failure = crash_failure(
            1, ["=> loading", "Traceback (most recent call last):", line], "python x.py", work, {}, True
        )
        (tmp_path / f"t{i}").mkdir()
        error = fail(failure, tmp_path / f"t{i}")
        assert str(error).startswith(
            f"command exited with exit code 1 {EARLY_FAILURE}: python x.py\nworking folder: {work}"
        )
    assert reported == [{FAILED_METRIC: 1, "command/failed_early": 1}] * 3  # retried (no no-retry mark), counted early
    failures = {str(tmp_path / f"t{i}"): records.read_failure(tmp_path / f"t{i}") for i in range(3)}
    assert all(f.early and f.exception == line for f in failures.values())  # read back typed, not parsed
    explain(failures)
    out = capsys.readouterr().out
    assert [line[:7] for line in out.splitlines()].count(
        "error: "
    ) == 1 and f"error: 3 trial(s) failed {EARLY_FAILURE}, with the same error: {line}" in out
    assert "    => loading" in out and out.count("hint: '../data/train' is relative") == 1


def test_check_tells_a_crash_from_a_metric_never_printed(tmp_path):
    script = tmp_path / "missing_data.py"
    script.write_text(MISSING_DATA)
    proc = subprocess.run(
        [PY, "sweeps/run_command.py", "--check", "--in-place", "--", PY, str(script), "--seed", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "the command crashed (exit code 1) before --check could judge its metrics: FileNotFoundError" in proc.stdout
    assert f"it ran in {ROOT}" in proc.stdout
    assert "metrics row" not in proc.stdout  # the Namespace(...) dump is not one
    assert "--metric-pattern" not in proc.stderr  # no blame on the metric settings: the script crashed
    assert "'../imagenet_synth_missing/train/index.csv' is relative" in proc.stderr


def test_explain_says_once_what_each_source_held_and_which_shapes_are_read(tmp_path, capsys):
    from trainables.command.initial_failures import explain
    from trainables.experiment.outcome import NO_METRIC, TrialFailure

    held = "expected stdout or stderr lines naming the step (e.g. `epoch=3 val_acc=0.81`); lines with numbers not read"
    failures = {
        str(tmp_path / f"t{i}"): TrialFailure(
            kind=NO_METRIC,
            signature=SHAPE_NOT_READ,
            exit_code=0,
            exception=None,
            missing_path=None,
            tail=("epoch 1 val_acc 0.5",),
            source="stdout",
            summary="command exited 0 but reported no metric",
            detail=held + ": `epoch 1 val_acc 0.5`",
            command="python x.py",
            working_folder=f"/runs/t{i}/work",
            early=True,
        )
        for i in range(3)
    }
    explain(failures)
    out = capsys.readouterr().out
    assert [line[:7] for line in out.splitlines()].count("error: ") == 1, out
    assert "error: 3 trial(s) ended without the sweep's metric, the same way: command exited 0 but" in out
    assert out.count(held) == 1 and "    epoch 1 val_acc 0.5" in out  # what the sources held, the last lines
    hint = next(line for line in out.splitlines() if line.startswith("hint: "))
    assert "docs/output-shapes.md" in hint and "--metric-pattern" in hint and "--check" in hint, hint
