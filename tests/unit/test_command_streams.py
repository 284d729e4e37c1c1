"""Metrics on stderr and the common output shapes, through `sweeps/run_command.py` as a user types it:
`--check` (no Ray) and one sweep (slow)."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from tests.helpers.command_sweeps import PY, run_sweep
from trainables.command.process import next_lines, start_command, start_readers
from trainables.command.sources import (
    ATTEMPT_LINE,
    ERR_MARK,
    OUTPUT_FILES,
    STDOUT_LOG,
    StreamLog,
    catch_up,
    no_metrics_message,
    recorded_steps,
    unreported_results,
)
from trainables.experiment.objective import Objective

LOGGING = [PY, "tests/scripts/logging_style.py", "--lr", "{lr}", "--epochs", "3"]


def test_check_reads_metrics_that_python_logging_writes_to_stderr(tmp_path):
    ok = run_sweep(tmp_path, "--check", "--axis", "lr=0.1", "--metric", "eval_acc", "--", *LOGGING, check=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "  stderr | " in ok.stdout and "'eval_acc': 0.7" in ok.stdout  # streamed, marked as stderr
    assert "  metrics row: train_loss=1.0, eval_acc=0.7, epoch=1" in ok.stdout
    assert "  metrics row: train_loss=0.333, eval_acc=0.9, epoch=3" in ok.stdout


def test_check_names_the_stream_and_keys_when_the_metric_is_missing(tmp_path):
    missing = run_sweep(tmp_path, "--check", "--axis", "lr=0.1", "--metric", "val_acc", "--", *LOGGING, check=True)
    assert missing.returncode == 1 and "--metric val_acc: NOT seen" in missing.stdout
    assert "stderr held lines with epoch, train_loss, eval_acc;" in missing.stderr, missing.stderr
    argv = ["--check", "--axis", "lr=0.1", "--metric", "eval_acc", "--metrics-from", "stdout", "--"]
    unread = run_sweep(tmp_path, *argv, *LOGGING, check=True)
    assert unread.returncode == 1
    assert "stderr held lines with epoch, train_loss, eval_acc (not read: add --metrics-from output or stderr)" in (
        unread.stderr
    )


def test_check_mnist_accuracy_is_a_percentage(tmp_path):
    argv = ["--check", "--metric", "Accuracy", "--", PY, "tests/scripts/mnist_style.py", "--epochs", "2"]
    ok = run_sweep(tmp_path, *argv, check=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    rows = re.findall(r"metrics row: (.*)", ok.stdout)
    assert rows == [
        "Loss=0.002452, Accuracy=98.47, loss=0.05, epoch=1",
        "Loss=0.002449, Accuracy=98.94, loss=0.025, epoch=2",
    ], ok.stdout  # 9894/10000 read as 98.94 (a percentage), never the count


def test_no_metric_error_names_the_stream_that_held_candidates(tmp_path):
    tails = {"OUT": ["Training with learning rate 0.1"], "ERR": ["INFO - {'epoch': 1, 'eval_acc': 0.7}"]}
    message = no_metrics_message("epoch", [], "stdout", tmp_path / "m.jsonl", tmp_path, tails)
    assert message.startswith("command exited 0 but reported no metric: expected stdout lines naming the step")
    assert message.endswith(
        "stderr held lines with epoch, eval_acc (not read: add --metrics-from output or stderr); "
        "lines with numbers not read as metrics: `Training with learning rate 0.1`"  # `rate 0.1` looks like one
    )
    quiet = no_metrics_message("epoch", [], "output", tmp_path / "m.jsonl", tmp_path, {"OUT": ["hi"], "ERR": []})
    assert "expected stdout or stderr lines naming the step" in quiet and quiet.endswith("held a `name: number` pair")


def test_restart_recovers_every_printed_step_the_history_lacks(tmp_path):
    """The killed-worker gap: step 2's row never reached result.json while step 3's did; a retry with
    no checkpoint recovers step 2 (and 4), checked against the trial's own rows, from either stream."""
    log = tmp_path / STDOUT_LOG
    log.write_text(
        ATTEMPT_LINE + "2026-11-23 10:00:00\n"
        "epoch=1 val_acc=0.5\n"
        + ERR_MARK
        + "INFO epoch=2 val_acc=0.6\n"
        + "epoch=3 val_acc=0.7\n"
        + ERR_MARK
        + "INFO epoch=4 val_acc=0.8\n"
    )
    result_json = tmp_path / "result.json"
    result_json.write_text('{"epoch": 1, "val_acc": 0.5}\n{"epoch": 3, "val_acc": 0.7}\n{"epoch": 4, "val_a')  # torn
    recorded = recorded_steps(result_json)
    assert recorded == {1, 3}
    found = unreported_results(
        log, 3, "epoch", [], Objective("val_acc", test_metric=None), ("stdout", "stderr"), recorded
    )
    assert found == [{"val_acc": 0.6, "epoch": 2}, {"val_acc": 0.8, "epoch": 4}]
    assert (
        unreported_results(log, 3, "epoch", [], Objective("val_acc", test_metric=None), ("stdout",), recorded) == []
    )  # stderr not read
    assert [
        r["epoch"]
        for r in unreported_results(log, 1, "epoch", [], Objective("val_acc", test_metric=None), ("stdout", "stderr"))
    ] == [
        2,
        3,
        4,
    ]


def test_a_restart_before_any_logged_row_reports_from_the_first_step(tmp_path):
    """A worker killed after storing step 1's checkpoint but before the driver logged any row (no
    result.json, no Tune checkpoint to restore): the retry reports every printed step, epoch 1 included
    (seen once in a full suite: the history began at epoch 2); beside a history the folders still count."""
    from trainables.command.runner import StepReporter
    from trainables.experiment import records

    (tmp_path / STDOUT_LOG).write_text(ATTEMPT_LINE + "2026-11-26 00:05:11\nepoch=1 val_acc=0.5\nepoch=2 val_acc=0.6\n")
    records.write_command_step(tmp_path / "checkpoint_000000", 1)
    fresh = StepReporter.after_restart("epoch", tmp_path, None)
    assert fresh.restarted and fresh.last_step is None and fresh.recorded is None
    (tmp_path / "result.json").write_text('{"epoch": 1, "val_acc": 0.5}\n')
    logged = StepReporter.after_restart("epoch", tmp_path, None)
    assert logged.last_step == 1 and logged.recorded == {1}


def test_a_restart_joins_the_final_figures_to_the_row_of_the_last_step_the_history_holds(tmp_path, monkeypatch):
    """Killed after its last epoch's row was logged, before its final figures: the command run again prints both;
    the final figures join the history's row of that step (`JOINS_STEP_METRIC`: the tables keep the joined row,
    the progress line counts no extra epoch), Tune's own keys left out; before, they were reported as a second
    row of that step (pytorch/examples' word_language_model, one driver kill: `epochs 25/25` for 6 x 4)."""
    import json

    from trainables.command import step_reporter
    from trainables.experiment.records import JOINS_STEP_METRIC

    tune_keys = {"time_total_s": 1.0, "config": {"seed": 0}, "trial_id": "a", "done": False, "timestamp": 1}
    history = [{"epoch": e, "valid_loss": 5.0 - e, "training_iteration": e, **tune_keys} for e in (1, 2, 3, 4)]
    (tmp_path / "result.json").write_text("".join(json.dumps(row) + "\n" for row in history))
    (tmp_path / STDOUT_LOG).write_text(ATTEMPT_LINE + "2026-11-30 10:00:00\n")
    sent = []
    monkeypatch.setattr(step_reporter.tune, "report", lambda metrics, checkpoint: sent.append(metrics))
    reporter = step_reporter.StepReporter.after_restart("epoch", tmp_path, None)
    assert not reporter.report_new([{"epoch": e, "valid_loss": 5.0 - e} for e in (1, 2, 3, 4)])
    assert sent == []  # reported before the restart
    assert not reporter.report_new([{"epoch": 4, "test_loss": 0.5}], final=True)
    assert sent == [{"epoch": 4, "valid_loss": 1.0, "test_loss": 0.5, JOINS_STEP_METRIC: 1}]


def test_the_command_writes_to_files_and_the_trial_reads_each_line_once(tmp_path):
    """Both streams go to the trial folder's output files (no pipe) and are read into command_stdout.txt,
    a last line without a newline included; nothing is left for a retry to catch up."""
    script = "import sys; print('epoch=1'); print('oops', file=sys.stderr, flush=True); print('epoch=2', end='')"
    outputs = {name: tmp_path / file for name, file in OUTPUT_FILES.items()}
    log = StreamLog(tmp_path / STDOUT_LOG)
    proc = start_command([sys.executable, "-c", script], {"PATH": os.environ["PATH"]}, None, outputs)
    lines, got, ended, deadline = start_readers(proc, log, outputs), [], 0, time.monotonic() + 60
    while ended < 2 and time.monotonic() < deadline:
        proc.poll()  # reaps the leader once it exits (as the trial's loop does): its group then ends
        for name, line in next_lines(lines, 0.2):
            ended += line is None
            got += [(name, line)] if line is not None else []
    log.close()
    assert proc.stdout is None and proc.stderr is None  # files, not pipes
    assert [line for name, line in got if name == "OUT"] == ["epoch=1", "epoch=2"] and ("ERR", "oops") in got
    assert outputs["OUT"].read_text() == "epoch=1\nepoch=2"
    assert catch_up(tmp_path) == 0 and not outputs["OUT"].exists()  # every line was read: none added


def test_catch_up_copies_the_lines_a_killed_worker_never_read(tmp_path):
    """The worker read `epoch=1` (stdout) and one stderr line, then was killed; the command had written
    two more lines to stdout (the last without a newline) and one to stderr: those are appended once."""
    (tmp_path / STDOUT_LOG).write_text(
        ATTEMPT_LINE
        + "2026-11-23 10:00:00\nold\n"
        + ATTEMPT_LINE
        + "2026-11-23 10:05:00\nepoch=1\n"
        + ERR_MARK
        + "w1\n"
    )
    (tmp_path / OUTPUT_FILES["OUT"]).write_bytes(b"epoch=1\nepoch=2 val_acc=0.5\nepoch=3")
    (tmp_path / OUTPUT_FILES["ERR"]).write_bytes(b"w1\nval_acc: 0.6\n")
    assert catch_up(tmp_path) == 3
    log = (tmp_path / STDOUT_LOG).read_text()
    assert log.endswith("epoch=1\n" + ERR_MARK + "w1\nepoch=2 val_acc=0.5\nepoch=3\n" + ERR_MARK + "val_acc: 0.6\n")
    assert not any((tmp_path / file).exists() for file in OUTPUT_FILES.values())
    assert catch_up(tmp_path) == 0 and (tmp_path / STDOUT_LOG).read_text() == log  # once


def test_a_tasks_column_the_command_never_uses_names_the_file_and_column(tmp_path):
    from sweeps.engine.flags import UsageError
    from sweeps.run_command import parse_args

    tasks = tmp_path / "tasks.csv"
    tasks.write_text("dataset,num_classes\ncifar10,10\ncifar100,100\n")
    with pytest.raises(UsageError) as error:
        parse_args(["--tasks", str(tasks), "--", "python", "train.py", "--dataset", "{dataset}"])
    assert str(error.value).startswith(f"--tasks {tasks}: the command never uses its column 'num_classes', ")
    assert "--num-classes {num_classes}" in str(error.value) and "--axis" not in str(error.value)


def test_metric_names_with_at_are_accepted():
    from sweeps.run_command import parse_args

    args = parse_args(["--metric", "Acc@1", "--axis", "lr=0.1", "--", "python", "train.py", "--lr", "{lr}"])
    assert args.metric == "Acc@1" and args.metrics_from == "output"


def test_a_restart_recovers_epochs_from_the_tracker_holding_the_metric_and_printed_ones_only_without_one(
    tmp_path, capsys
):
    """As live (`TrackerResults`), a tracker holding --metric wins over the printed (rounded) values after a
    restart too: epoch 2 is the CSV's 0.6200000047683716, not the printed 0.620; without one, as printed."""
    from trainables.command.process import Reading
    from trainables.command.runner import StepReporter, _report_recovered

    trial, work = tmp_path / "trial", tmp_path / "work"
    (work / "csv/version_0").mkdir(parents=True)
    trial.mkdir()
    (work / "csv/version_0/metrics.csv").write_text("epoch,val/acc\n1,0.5\n2,0.6200000047683716\n3,0.7\n")
    (trial / STDOUT_LOG).write_text(
        ATTEMPT_LINE + "2026-11-28 12:00:00\nepoch=1 val/acc=0.500\nepoch=2 val/acc=0.620\n"
    )
    (trial / "result.json").write_text('{"epoch": 1, "val/acc": 0.5}\n')
    objective = Objective("val/acc", test_metric=None)
    for metrics_from, expected in (
        ("output", [{"epoch": 2, "val/acc": 0.6200000047683716}, {"epoch": 3, "val/acc": 0.7}]),
        ("csv", [{"epoch": 2, "val/acc": 0.6200000047683716}, {"epoch": 3, "val/acc": 0.7}]),
    ):
        reporter, reported = StepReporter.after_restart("epoch", trial, None), []
        reporter._report = reported.append
        assert not _report_recovered(reporter, "t", Reading("epoch", [], objective, metrics_from, trial / "m", work))
        assert reported == expected
        assert "(steps 2..3, from csv records)" in capsys.readouterr().out
    (work / "csv/version_0/metrics.csv").unlink()
    reporter, reported = StepReporter.after_restart("epoch", trial, None), []
    reporter._report = reported.append
    assert not _report_recovered(reporter, "t", Reading("epoch", [], objective, "output", trial / "m", work))
    assert reported == [{"val/acc": 0.62, "epoch": 2}]
    assert "(steps 2..2, from command_stdout.txt)" in capsys.readouterr().out


def test_the_commands_pid_is_known_when_it_ends_before_anyone_looks(tmp_path):
    """The log prefix names the command's pid (the shim's child), not the shim's, even for a command that has
    ended before the worker looks: a starved Ray worker on a loaded CI machine looked for the shim's child only
    after the 0.3 s script had ended, and named the shim's pid. Here the command ends in about a millisecond."""
    from trainables.command.process import read_command_pid

    outputs = {"OUT": tmp_path / "out", "ERR": tmp_path / "err"}
    proc = start_command(["sh", "-c", "echo $$"], {"PATH": os.environ["PATH"]}, None, outputs)
    assert proc.wait(timeout=30) == 0
    shell_pid = int((tmp_path / "out").read_text())  # $$: the shell's own pid, the process the shim forked
    assert proc.command_pid == shell_pid != proc.pid
    read_end, write_end = os.pipe()
    os.close(write_end)  # a shim that exited before it could write: its own pid
    assert read_command_pid(read_end, 4242) == 4242
    read_end, write_end = os.pipe()
    assert read_command_pid(read_end, 4242, timeout_s=0.05) == 4242  # nothing written in time
    os.close(write_end)
