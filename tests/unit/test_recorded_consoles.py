"""Printed text from the real packages, read value by value (issue 54): what comes after the last epoch is never
an epoch, the last epoch is one row, and log prefixes, crash dumps and Hydra's error lines are never rows.

`tests/recorded/` holds, recorded offline with the packages of a user's environment (torch 2.14, Keras 3.15 on
its torch backend, Lightning 2.6.6, Hydra 1.3, Rich 15), both streams as one console (PYTHONUNBUFFERED=1):
- `keras_fit_evaluate.console.txt`: `record_keras_fit_evaluate.py`, a tiny `model.fit` of 3 epochs, then
  `model.evaluate` (its bar) and keras-io `examples/vision/mnist_convnet.py`'s closing `Test loss:` /
  `Test accuracy:` prints; `.history.json` holds Keras's `History` and the evaluation's score.
- `hydra_template.console.txt`: ashleve/lightning-hydra-template `src/train.py trainer=cpu trainer.max_epochs=2
  data.train_val_test_split=[2000,250,250] logger=csv` on synthetic MNIST (`/work/shared/real-data/synth_mnist.py`),
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 so its test stage loads the checkpoint; `hydra_template_metrics.csv` is the
  CSVLogger's file of that run. `hydra_template_crash.console.txt`: the same without that variable and logger:
  torch 2.14 refuses the checkpoint, Hydra prints `Error executing job with overrides: [...]` and the traceback.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.helpers.recorded import RECORDED, console, recorded_lines
from trainables.command.parse import StepContext, line_metrics
from trainables.experiment.objective import Objective


def keras_truth() -> tuple[dict, list]:
    truth = json.loads((RECORDED / "keras_fit_evaluate.history.json").read_text())
    return truth["history"], truth["score"]


@pytest.mark.parametrize("metrics", [("val_accuracy", "test_accuracy"), ("val_accuracy",), ("accuracy",)])
def test_keras_console_each_epoch_as_printed_and_the_test_lines_are_final_figures(metrics):
    history, (test_loss, test_accuracy) = keras_truth()
    rows = console(recorded_lines("keras_fit_evaluate.console.txt"), *metrics)
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # the last epoch once, the evaluation no epoch of its own
    for name, values in history.items():  # Keras prints 4 decimals
        assert [r[name] for r in rows] == [round(v, 4) for v in values], name
    assert rows[2]["test_loss"] == test_loss and rows[2]["test_accuracy"] == test_accuracy  # `Test loss: ...`
    # `model.evaluate`'s bar (`accuracy: 0.3281 - loss: 1.0834`) never replaces epoch 3's training values
    assert (rows[2]["final_loss"], rows[2]["final_accuracy"]) == (round(test_loss, 4), round(test_accuracy, 4))
    assert set(rows[2]) == {*history, "epoch", "test_loss", "test_accuracy", "final_loss", "final_accuracy"}
    assert all(set(r) == {*history, "epoch"} for r in rows[:2])


def hydra_csv() -> dict:
    """{epoch: {column: value}} of the template's CSVLogger file (its rows of one epoch merged)."""
    epochs: dict = {}
    with open(RECORDED / "hydra_template_metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            epochs.setdefault(int(row["epoch"]), {}).update({k: float(v) for k, v in row.items() if v and k != "step"})
    return epochs


def test_hydra_template_console_reads_rich_last_frame_and_test_table_and_says_the_frame_is_rounded(capsys):
    logged = hydra_csv()
    rows = console(recorded_lines("hydra_template.console.txt"), "val/acc", "test/acc")
    # a non-terminal gets one Rich frame, at the end of `fit`: Lightning's epoch 1 of 0-1, wrapped over 6 lines
    assert [r["epoch"] for r in rows] == [1]
    frame = ("val/loss", "val/acc", "val/acc_best", "train/loss", "train/acc")
    assert {k: rows[0][k] for k in frame} == {k: round(logged[1][k], 3) for k in frame}
    # the Rich test table (`│ test/acc │ 0.6840000152587891 │`) in full, joined to the last epoch: one row
    assert (rows[0]["test/acc"], rows[0]["test/loss"]) == (logged[2]["test/acc"], logged[2]["test/loss"])
    assert set(rows[0]) == {*frame, "test/acc", "test/loss", "epoch"}  # no `rank` (`[rank: 0]`), no `v_num`
    assert "a non-terminal gets its last frame only" in capsys.readouterr().out


def test_hydra_crash_text_and_traceback_are_not_rows():
    rows = console(recorded_lines("hydra_template_crash.console.txt"), "val/acc")
    # the epoch Rich printed before the test stage crashed; nothing of `Error executing job with overrides:
    # ['trainer=cpu', 'trainer.max_epochs=2', ...]`, the traceback or `HYDRA_FULL_ERROR=1`
    assert rows == [
        {"val/loss": 1.246, "val/acc": 0.672, "val/acc_best": 0.672, "train/loss": 1.25, "train/acc": 0.761}
        | {"epoch": 1}
    ]


def test_log_prefixes_and_crash_lines_are_not_metrics():
    assert line_metrics("[\x1b[32mINFO\x1b[0m] - [rank: 0] Starting testing!", "epoch") == {}
    assert line_metrics("[rank3]: epoch=2 val_acc=0.5", "epoch") == {"epoch": 2, "val_acc": 0.5}
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    lines = [
        "epoch=1 val_acc=0.5",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "    step(lr=0.1)",
        "RuntimeError: CUDA error: out of memory=1",
        "epoch=2 val_acc=0.6",
        "loss: 0.3",
    ]
    assert [r for line in lines for r in ctx.feed(line)] + ctx.close() == [
        {"val_acc": 0.5, "epoch": 1},
        {"val_acc": 0.6, "epoch": 2},
        {"loss": 0.3, "epoch": 2},
    ]  # a new step ends the dump
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    lines = ["epoch=1 val_acc=0.5", "Error executing job with overrides: ['lr=0.1', 'trainer.max_epochs=2']"]
    assert [r for line in lines for r in ctx.feed(line)] + ctx.close(crashed=True) == [{"val_acc": 0.5, "epoch": 1}]


def test_a_step_named_the_last_is_held_for_the_final_figures_and_released_by_a_later_step():
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    assert ctx.feed("Epoch 2/2 val_acc: 0.5") == []  # held: the final figures may follow
    assert ctx.feed("Epoch 3/4 val_acc: 0.6") == [{"val_acc": 0.5, "epoch": 2}, {"val_acc": 0.6, "epoch": 3}]
    assert ctx.feed("Epoch 4/4 val_acc: 0.7 loss: 0.2") == []
    assert ctx.close() == [{"val_acc": 0.7, "loss": 0.2, "epoch": 4}]
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    ctx.feed("epoch=3 val_acc=0.7 loss=0.2")
    assert ctx.feed("Final loss: 0.25") == [] and ctx.feed("loss=0.2") == []
    assert ctx.close() == [{"final_loss": 0.25, "epoch": 3}]  # a value printed again is a repeat, another is final_
