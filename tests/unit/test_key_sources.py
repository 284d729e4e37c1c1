"""Where each metric of a command trial was read (`trainables/command/key_sources.py`, issue 54 item 5):
printed lines with their stream and shape, tracker files with their column, TensorBoard run folders and tags,
kept in the trial's `metric_sources.json`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.helpers.recorded import recorded_lines
from trainables.command.key_sources import SourceRecord, describe, line_shape, trial_origins
from trainables.command.parse import StepContext
from trainables.command.trackers import TrackerResults
from trainables.experiment import records
from trainables.experiment.objective import Objective

RECORDED = Path(__file__).parents[1] / "recorded"


def test_printed_keys_keep_their_stream_and_line_shape_or_pattern():
    context = StepContext("epoch", [], Objective("val_accuracy", test_metric=None))
    for line in recorded_lines("keras_fit_evaluate.console.txt")[:4]:  # Epoch 1/3, then its bar
        context.feed(line, "stderr")
    assert context.origins["epoch"] == {"source": "stderr", "line": "Epoch <n>/<n>"}
    assert context.origins["val_accuracy"]["source"] == "stderr"
    shape = context.origins["val_accuracy"]["line"]  # the bar's last redraw, colours gone, numbers masked
    assert shape.endswith("- accuracy: <n> - loss: <n> - val_accuracy: <n> - val_loss: <n>") and "0.53" not in shape
    pattern = r"Iter (?P<iter>\d+) .*top1 (?P<top1>[\d.]+)%"
    context = StepContext("iter", [re.compile(pattern)])
    context.feed("Iter 3 | top1 71.5%")
    assert context.origins["top1"] == {"source": "stdout", "pattern": pattern}
    assert describe(context.origins["top1"]) == f"stdout, --metric-pattern {pattern}"
    assert line_shape("x" * 200 + " 1.5").endswith("...") and len(line_shape("x" * 200)) == 120


def test_tracker_keys_keep_their_file_and_column_and_tensorboard_keys_their_run_and_tag(tmp_path):
    reader = TrackerResults(tmp_path, "epoch", objective=Objective("val/acc", test_metric=None), since=0.0, auto=True)
    run = tmp_path / "logs/train/runs/2026-11-28_07-00-00/csv/version_0"
    run.mkdir(parents=True)
    shutil.copy(RECORDED / "hydra_template_metrics.csv", run / "metrics.csv")
    reader.close([{"epoch": 0, "val/acc": 0.504}])  # a Rich frame's value: the CSV holds --metric and wins
    where = "logs/train/runs/2026-11-28_07-00-00/csv/version_0/metrics.csv"
    assert reader.origins["val/acc"] == {"source": "csv", "file": where, "column": "val/acc"}
    assert describe(reader.origins["test/acc"]) == f"csv {where}, column test/acc"
    context = StepContext("epoch")
    context.feed("epoch 0 val/acc=0.504")
    assert trial_origins(context, reader)["val/acc"]["source"] == "csv"  # the printed text is not the source

    tb = TrackerResults(
        tmp_path / "w", "epoch", ("tensorboard",), Objective("dashboard_test_acc_1", test_metric=None), since=0.0
    )
    shutil.copytree(RECORDED / "add_scalars_tb", tmp_path / "w" / "tb")
    tb.close()
    assert tb.origins["dashboard_test_acc_1"] == {
        "source": "tensorboard",
        "run": "tb/dashboard_test_acc_1",
        "tag": "dashboard",
    }
    assert describe(tb.origins["dashboard_test_acc_1"]) == "tensorboard run tb/dashboard_test_acc_1, tag dashboard"


def test_the_record_holds_the_reported_keys_and_is_written_again_only_when_they_change(tmp_path, monkeypatch):
    context = StepContext("epoch")
    context.feed("epoch=1 val_acc=0.5 loss=0.9")
    origins = trial_origins(context, None, {"lr": None}, tmp_path / "metrics.jsonl")
    assert origins["lr"] == {"source": "jsonl", "file": "metrics.jsonl"}
    assert origins["val_acc"] == {"source": "stdout", "line": "epoch=<n> val_acc=<n> loss=<n>"}
    writes = []
    monkeypatch.setattr(records, "write_record", lambda path, record: writes.append(path) or path)
    record = SourceRecord(tmp_path)
    record.update({"epoch": 0, "val_acc": 0, "gpu_util": 0}, origins)  # a key of no source (raysweep's own): left out
    record.update({"epoch": 0, "val_acc": 0, "gpu_util": 0}, origins)
    assert len(writes) == 1
    monkeypatch.undo()
    SourceRecord(tmp_path).update(["epoch", "val_acc", "lr"], origins)
    assert records.read_metric_sources(tmp_path) == {k: origins[k] for k in ("epoch", "val_acc", "lr")}
    assert list(tmp_path.iterdir()) == [tmp_path / records.METRIC_SOURCES_FILE]  # no temporary file left
