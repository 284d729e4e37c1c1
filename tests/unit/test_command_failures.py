"""How a command sweep fails and stops, through `python sweeps/run_command.py` as a user types it, on the
session's shared Ray (conftest's `sweep_env`): a failure that repeats explains itself once; a stop never
tears the file the script is writing."""

from __future__ import annotations

import os
import subprocess

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
