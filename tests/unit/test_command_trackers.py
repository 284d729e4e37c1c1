"""Command trials whose script prints nothing and logs through a tracker: W&B offline runs, MLflow's
default store, a Lightning-style `metrics.csv` and a Hugging Face `trainer_state.json`
(`trainables/command/trackers.py`, `trainables/command/wandb_reader.py`), with the real packages."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from tests.helpers.command_sweeps import PY, ROOT
from trainables.command import process, trackers
from trainables.command.tracker_rows import csv_rows, hf_rows
from trainables.command.trackers import TrackerResults
from trainables.command.wandb_reader import read_history
from trainables.experiment.objective import Objective

SCRIPT = "tests/scripts/tracker_only.py"


def run_script(tmp_path: Path, tracker: str, *extra: str) -> Path:
    """Run the tracker script as a trial would (the environment `tracker_env` sets); returns `{trial_dir}`."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    process.tracker_env(env, work, tracker)
    subprocess.run(
        [PY, SCRIPT, "--tracker", tracker, "--lr", "0.2", "--out", str(work), *extra],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return work


def test_wandb_reader_reads_every_row_and_a_cut_log_up_to_its_last_whole_record(tmp_path):
    work = run_script(tmp_path, "wandb", "--epochs", "400")  # over 32 KiB: records cross a block
    [log] = list(work.glob(trackers.RUN_GLOB))
    assert log.parent.name.startswith(
        "offline-run-"
    )  # WANDB_MODE=offline, WANDB_DIR={trial_dir}: `wandb sync` finds it
    rows, end = read_history(log)
    assert [r["step"] for r in rows] == list(range(1, 401)) and end == log.stat().st_size > 32768
    assert rows[1]["metrics"] == {"val_acc": pytest.approx(0.54), "train/loss": 0.5}  # nested keys joined by /
    data = log.read_bytes()
    cut = tmp_path / "cut.wandb"
    for size in [*range(0, 300, 7), *range(32600, 33000, 7), len(data) - 1]:  # a log being written, or killed
        cut.write_bytes(data[:size])
        first, offset = read_history(cut)
        cut.write_bytes(data)
        rest, _ = read_history(cut, offset)
        assert [r["step"] for r in first + rest] == list(range(1, 401)), size
    (tmp_path / "other.wandb").write_bytes(b"not a run log")
    with pytest.raises(ValueError, match="is not a W&B run log"):
        read_history(tmp_path / "other.wandb")


def test_wandb_version_is_in_the_range_pyproject_pins():
    import wandb

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [pin] = [Requirement(r) for r in extras["trackers"] if r.startswith("wandb")]
    assert pin.specifier.contains(wandb.__version__), (wandb.__version__, str(pin))


def test_only_the_reader_imports_wandb_internals():
    allowed = {ROOT / "trainables" / "command" / "wandb_reader.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("sweeps", "trainables", "analysis")
        for path in (ROOT / folder).rglob("*.py")
        if path not in allowed and re.search(r"wandb\.(proto|sdk\.internal)", path.read_text())
    ]
    assert offenders == []


def test_csv_rows_merge_per_step_and_skip_a_line_being_written():
    text = "epoch,step,train_loss,val_acc\n0,9,0.9,\n0,9,,0.71\n1,19,0.5,\n1,19,,0.8\n2,29,0.4"
    rows = csv_rows(text, "epoch")
    assert rows[:2] == [{"epoch": 0, "step": 9, "train_loss": 0.9}, {"epoch": 0, "step": 9, "val_acc": 0.71}]
    reader = TrackerResults(
        Path("."), "epoch", ("csv",), objective=Objective("val_acc", test_metric=None)
    )  # a step ends when the next starts
    merged = [r for row in rows for r in reader.context.add(row)] + reader.context.close()
    assert merged == [
        {"step": 9, "train_loss": 0.9, "val_acc": 0.71, "epoch": 0},
        {"step": 19, "train_loss": 0.5, "val_acc": 0.8, "epoch": 1},
    ]
    assert csv_rows("step,loss\n5,0.3\n", "epoch") == [{"step": 5, "loss": 0.3, "epoch": 5}]  # no epoch column


def test_hf_rows_and_a_torn_trainer_state():
    text = '{"log_history": [{"loss": 0.9, "epoch": 0.5, "step": 5}, {"eval_acc": 0.7, "epoch": 1.0, "step": 10}]}'
    assert hf_rows(text, "epoch") == [
        {"loss": 0.9, "epoch": 0.5, "step": 5},
        {"eval_acc": 0.7, "epoch": 1.0, "step": 10},
    ]
    with pytest.raises(ValueError):
        hf_rows(text[:40], "epoch")


def test_tracker_env_fills_only_what_the_environment_leaves_unset(tmp_path):
    env = {"WANDB_MODE": "online", "MLFLOW_TRACKING_URI": ""}
    assert process.tracker_env(env, tmp_path, "output") == [
        f"WANDB_DIR={tmp_path}",
        f"MLFLOW_TRACKING_URI=sqlite:///{tmp_path}/mlflow.db",
    ]
    assert env["WANDB_MODE"] == "online"  # the user's choice stays
    assert process.tracker_env({}, tmp_path, "csv") == []
    assert process.tracker_env({}, tmp_path, "wandb") == ["WANDB_MODE=offline", f"WANDB_DIR={tmp_path}"]
    assert process.tracker_env({"WANDB_API_KEY": "k"}, tmp_path, "wandb") == [f"WANDB_DIR={tmp_path}"]


def test_records_are_read_live_from_this_attempt_and_every_source_is_described(tmp_path):
    old = tmp_path / "code" / "metrics.csv"  # a file of the code copy: older than the attempt
    old.parent.mkdir()
    old.write_text("epoch,val_acc\n9,0.1\n")
    os.utime(old, (1, 1))
    csv_file = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    csv_file.parent.mkdir(parents=True)
    csv_file.write_text("epoch,step,train_loss,val_acc\n1,9,0.9,\n1,9,,0.7\n2,19,0.5,")  # epoch 2: being written
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val_acc", test_metric=None), since=100.0, auto=True)
    assert reader.poll() == []  # epoch 1 may still get rows
    csv_file.write_text(csv_file.read_text() + "\n2,19,,0.8\n")
    reader.next_read = 0.0
    assert reader.poll() == [{"step": 9, "train_loss": 0.9, "val_acc": 0.7, "epoch": 1}]
    assert reader.close() == [{"step": 19, "train_loss": 0.5, "val_acc": 0.8, "epoch": 2}]
    assert reader.source == "csv"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trainer_state.json").write_text('{"log_history": [{"eval_loss": 0.3, "epoch": 1.0}]}')
    assert trackers.describe_sources(tmp_path, "epoch") == ("csv held step, train_loss, val_acc; hf held eval_loss")
    printed = TrackerResults(tmp_path, "epoch", auto=True)
    row = {"epoch": 1, "acc": 0.5}  # the command prints its own rows (no --metric known): they are the rows
    assert printed.poll([row]) == [row] and printed.close() == [] and printed.source is None


def test_a_metric_in_no_record_fails_the_trial_naming_the_keys_each_source_held(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from trainables.command import failure, runner
    from trainables.command.failure_gate import FAILURE_SIGNATURE_METRIC
    from trainables.command.process import Reading
    from trainables.experiment import records
    from trainables.experiment.outcome import FAILED_METRIC, NO_METRIC, NO_METRIC_METRIC

    reported = []
    monkeypatch.setattr(failure.tune, "report", reported.append)
    events = TrackerResults(
        tmp_path, "epoch", ("csv",), objective=Objective("val/acc", test_metric=None), since=0.0
    )  # then the command
    (tmp_path / "metrics.csv").write_text("epoch,train_loss,val_acc\n1,0.9,0.7\n2,0.5,0.8\n")
    rows = events.close()
    reporter = runner.StepReporter("epoch", tmp_path, last_step=2, parsed=len(rows))
    output = SimpleNamespace(events=events, tails={"OUT": [], "ERR": []})
    reading = Reading("epoch", [], None, "csv", tmp_path / "m.jsonl", tmp_path)
    with pytest.raises(
        failure.CommandFailed, match=r"--metric val/acc is in none of its records: csv held train_loss, val_acc"
    ):
        failure.verdict(0, ["python", "x.py"], reporter, output, reading, None)
    assert reported[0][FAILED_METRIC] == reported[0][NO_METRIC_METRIC] == 1  # counted by the sweep's gate, by reason:
    assert reported[0][FAILURE_SIGNATURE_METRIC] == "0: command exited 0 but --metric val/acc is in none of its records"
    assert reported[0]["command/no_retry"] == 1  # not retried: it logs the same
    assert records.read_failure(tmp_path).kind == NO_METRIC


def test_tracker_settings_are_said_only_for_a_tracker_the_command_or_its_script_names(tmp_path):
    (tmp_path / "plain.py").write_text("import torch\nprint('epoch=1 acc=0.5')\n")
    (tmp_path / "logs.py").write_text("try:\n    import wandb\nexcept ImportError:\n    pass\n")
    assert process.trackers_named(["python", "plain.py", "--lr", "0.1"], tmp_path, "output") == ()
    assert process.trackers_named(["python", "logs.py"], tmp_path, "output") == ("wandb",)
    assert process.trackers_named(["python", "plain.py", "--trainer.logger", "MLFlowLogger"], tmp_path, "output") == (
        "mlflow",
    )
    assert process.trackers_named(["python", "plain.py"], tmp_path, "mlflow") == ("mlflow",)
    env = {}
    assert process.tracker_env(env, tmp_path, "output", shown=()) == []  # set all the same, said for none
    assert env["WANDB_MODE"] == "offline" and env["MLFLOW_TRACKING_URI"].endswith("mlflow.db")


def test_wandb_rows_keep_the_epoch_the_script_logged():
    """`wandb.log({"epoch": e, ...})` with no step: W&B's `_step` counts 0, 1, 2; the history keeps epochs 1, 2, 3."""
    reader = TrackerResults(Path("."), "epoch", ("wandb",))
    found = [{"step": s, "metrics": {"epoch": s + 1, "val_acc": 0.5 + s / 10}} for s in range(3)]
    assert [r["epoch"] for r in reader._wandb_rows(Path("run.wandb"), found)] == [1, 2, 3]
    batch = [{"step": 3, "metrics": {"train/loss": 0.2}}]  # a row without its epoch, in a run that logs one
    assert reader._wandb_rows(Path("run.wandb"), batch) == []
    plain = [{"step": 5, "metrics": {"val_acc": 0.7}}]  # a run that never logs an epoch: W&B's step, as logged
    assert reader._wandb_rows(Path("other.wandb"), plain) == [{"val_acc": 0.7, "epoch": 5}]


def test_lightning_validation_step_rows_are_never_epochs():
    text = "epoch,step,train_loss_step,valid_loss_epoch,valid_loss_step\n0,4,0.9,,\n,0,,,0.8\n,1,,,0.7\n0,5,,0.75,\n"
    assert csv_rows(text, "epoch") == [
        {"epoch": 0, "step": 4, "train_loss_step": 0.9},
        {"epoch": 0, "step": 5, "valid_loss_epoch": 0.75},
    ]
    assert [r["step"] for r in csv_rows(text, "step")] == [4, 5]


def test_a_tracker_holding_the_metric_wins_over_printed_rows_and_where_they_disagree_is_said(tmp_path, capsys):
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val_acc", test_metric=None), since=0.0, auto=True)
    (tmp_path / "metrics.csv").write_text("epoch,val_acc\n1,0.8123\n2,0.9\n")
    # printed rows without --metric are held back, and dropped once the CSV's rows hold it...
    assert reader.poll([{"epoch": 1, "loss": 0.5}]) == [{"epoch": 1, "val_acc": 0.8123}] and reader.source == "csv"
    (tmp_path / "w").mkdir()
    reader = TrackerResults(
        tmp_path / "w", "epoch", objective=Objective("val_acc", test_metric=None), since=0.0, auto=True
    )
    (tmp_path / "w" / "metrics.csv").write_text("epoch,val_acc\n1,0.8123\n2,0.9\n")
    printed = [{"epoch": 1, "val_acc": 0.812}, {"epoch": 2, "val_acc": 0.85}]  # a Rich frame's rounded values
    # ...and so are printed rows holding it (Rich frames, rounded values): the CSV's are the rows
    assert reader.poll(printed[:1]) == [{"epoch": 1, "val_acc": 0.8123}]  # epoch 2 has begun in the CSV
    assert reader.close(printed[1:]) == [{"epoch": 2, "val_acc": 0.9}]
    assert reader.source == "csv" and reader.disagreed == [(2, 0.85, 0.9)]  # 0.8123 prints as 0.812: they agree
    said = capsys.readouterr().out
    assert "metrics from csv records: metrics.csv (they hold --metric val_acc" in said
    assert (
        "the printed val_acc and the csv records (metrics.csv) disagree at epoch 2: 0.85 printed, 0.9 recorded; "
        "the history holds the recorded values" in said
    )


def test_printed_rows_wait_through_one_read_and_a_tracker_found_later_takes_over(tmp_path, capsys):
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val_acc", test_metric=None), since=0.0, auto=True)
    assert reader.poll([{"epoch": 1, "val_acc": 0.4}]) == []  # the records are read once more first
    reader.next_read = 0.0
    assert reader.poll() == [{"epoch": 1, "val_acc": 0.4}] and reader.printed  # none holds it: as printed
    assert reader.poll([{"epoch": 2, "val_acc": 0.6}]) == [{"epoch": 2, "val_acc": 0.6}]  # at once from now on
    (tmp_path / "log.csv").write_text("epoch,val_acc\n1,0.51\n2,0.6\n3,0.7\n4,0.8\n")  # a tracker appears
    reader.next_read = 0.0
    rows = reader.poll([{"epoch": 3, "val_acc": 0.7}])  # the CSV holds it: its rows from now on
    assert reader.source == "csv" and rows == [{"epoch": 3, "val_acc": 0.7}] + [
        {"epoch": e, "val_acc": v}
        for e, v in ((1, 0.51), (2, 0.6), (3, 0.7))  # `StepReporter` skips steps 1-3
    ]
    assert reader.close([{"epoch": 4, "val_acc": 0.85}]) == [{"epoch": 4, "val_acc": 0.8}]
    said = capsys.readouterr().out
    assert "metrics from csv records: log.csv (they hold --metric val_acc; the printed rows up to epoch 3 were" in said
    assert "disagree at epoch 1: 0.4 printed, 0.51 recorded (and at 1 more); the history holds the recorded " in said
    assert "values (the printed ones up to epoch 3, reported before)" in said


def test_the_last_epoch_is_one_row_with_the_figures_logged_after_it(tmp_path):
    """Lightning's CSVLogger: `trainer.test` logs `test/acc` at epoch `max_epochs`, after the fit's last epoch."""
    log = tmp_path / "metrics.csv"
    reader = TrackerResults(tmp_path, "epoch", ("csv",), Objective("val/acc", test_metric="test/acc"), since=0.0)
    log.write_text("epoch,step,train/loss,val/acc,test/acc\n0,9,0.9,,\n0,9,,0.5,\n1,19,0.5,,\n")
    assert reader.poll() == [{"step": 9, "train/loss": 0.9, "val/acc": 0.5, "epoch": 0}]  # epoch 1 has begun
    log.write_text(log.read_text() + "1,19,,0.7,\n2,20,,,0.65\n")
    reader.next_read = 0.0
    assert reader.poll() == []  # epoch 1 may be the last: held until an epoch's keys come, or the end
    assert reader.close() == [{"step": 19, "train/loss": 0.5, "val/acc": 0.7, "test/acc": 0.65, "epoch": 1}]


def test_printed_rows_without_the_metric_are_reported_at_the_end_when_no_tracker_holds_it(tmp_path):
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val_acc", test_metric=None), since=0.0, auto=True)
    assert reader.poll([{"epoch": 1, "loss": 1.0}]) == []  # held back: a tracker's rows may hold val_acc
    # none does: the printed rows are the trial's, so its error can name the keys they held
    assert reader.close([{"epoch": 2, "loss": 0.5}]) == [{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}]
    assert reader.source is None


def test_a_hydra_run_six_folders_down_is_found_and_files_from_before_the_start_are_not(tmp_path):
    """lightning-hydra-template's `logger=csv` writes `logs/train/runs/<stamp>/csv/version_0/metrics.csv`."""
    old = tmp_path / "logs/train/runs/2026-01-01_00-00-00/csv/version_0/metrics.csv"
    old.parent.mkdir(parents=True)
    old.write_text("epoch,val/acc\n0,0.1\n")
    os.utime(old, (1_000, 1_000))
    new = tmp_path / "logs/train/runs/2026-11-28_07-00-00/csv/version_0/metrics.csv"
    new.parent.mkdir(parents=True)
    new.write_text("epoch,val/acc\n0,0.5\n")
    (tmp_path / ".git/a/b/c/d/e").mkdir(parents=True)
    (tmp_path / ".git/a/b/c/d/e/metrics.csv").write_text("epoch,val/acc\n0,0.9\n")
    assert trackers.find_records(tmp_path, "csv") == [old, new]
    assert trackers.find_records(tmp_path, "csv", since=2_000) == [new]


def test_of_several_runs_csv_logs_the_newest_is_read(tmp_path):
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val/acc", test_metric=None), since=100.0)
    for stamp, acc, mtime in (("07-00", 0.5, 200), ("07-05", 0.6, 300)):
        path = tmp_path / f"logs/train/runs/{stamp}/csv/version_0/metrics.csv"
        path.parent.mkdir(parents=True)
        path.write_text(f"epoch,val/acc\n0,{acc}\n")
        os.utime(path, (mtime, mtime))
    assert reader.close() == [{"epoch": 0, "val/acc": 0.6}]


def test_check_says_a_tracker_file_was_written_when_only_printed_text_was_read(tmp_path, capsys):
    from types import SimpleNamespace

    from sweeps.engine.command_sweep.command_check import _say_source

    path = tmp_path / "logs/train/runs/07-00/csv/version_0/metrics.csv"
    path.parent.mkdir(parents=True)
    path.write_text("epoch,loss\n0,0.5\n")
    events = SimpleNamespace(source=None, since=time.time() - 60, files={})
    _say_source(SimpleNamespace(metrics_from="output", step_key="epoch", metric="acc"), events, True, tmp_path)
    assert (
        "tracker files written but not read: logs/train/runs/07-00/csv/version_0/metrics.csv" in capsys.readouterr().out
    )
