"""Real training output: every epoch's value in a trial's history is the one the script logged, at its own
epoch, with nothing extra (issue 38).

`tests/recorded/` holds what unmodified public scripts printed and wrote, run on CPU with tiny data for 2
epochs: pytorch/examples `word_language_model/main.py` (stdout), timm `train.py --device cpu` (stderr,
stdout, `summary.csv`), Lightning 2.6.6 `examples/pytorch/basics/backbone_image_classifier.py` (a
console excerpt, stderr, CSVLogger's `metrics.csv`, the default TensorBoard logger's event files). Issue 54
added `lightning_tb_steps/` and `add_scalars_tb/` (`tests/recorded/record_tensorboard.py` regenerates them): a
validation-step counter past the epochs, and `add_scalars` with an `epoch` key. The values expected are those
of the scripts' own files and lines. `tests/scripts/lightning_style.py` runs
the real `lightning` package.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from tests.helpers.recorded import RECORDED, console, file_rows, recorded_lines
from trainables.command.output_shapes import pipe_pairs
from trainables.command.trackers import TrackerResults, describe_sources
from trainables.experiment.objective import Objective


def read_records(work: Path, write, metric: str, sources=None, printed=(), step_key="epoch") -> list[dict]:
    """The rows a trial reads from the records `write(work)` leaves (a reader made before, as a trial's is)."""
    kwargs = {"sources": sources} if sources else {"auto": True}
    reader = TrackerResults(work, step_key, objective=Objective(metric, test_metric=None), since=0.0, **kwargs)
    write(work)
    return reader.poll(printed) + reader.close()


def test_word_language_model_pipe_pairs_and_its_end_of_training_line():
    lines = recorded_lines("word_language_model.stdout.txt")
    assert pipe_pairs(lines[1]) == {"epoch": 1, "lr": 20.0, "ms/batch": 1301.4, "loss": 7.26, "ppl": 1424.85}
    assert pipe_pairs(lines[5]) == {"epoch": 1, "valid_loss": 6.49, "valid_ppl": 658.06}  # `time: 60.40s` skipped
    rows = console(lines, "valid_loss", "test_loss")
    assert [(r["epoch"], r["valid_loss"], r["valid_ppl"]) for r in rows] == [(1, 6.49, 658.06), (2, 6.49, 655.85)]
    assert (rows[1]["test_loss"], rows[1]["test_ppl"]) == (6.43, 620.74) and "test_loss" not in rows[0]
    assert all(set(r) == {"epoch", "lr", "ms/batch", "loss", "ppl", "valid_loss", "valid_ppl"} for r in rows[:1])
    # without a test metric, the end-of-training line is the final result at the last epoch (joined to it)
    assert console(lines, "valid_loss")[2] == {"test_loss": 6.43, "test_ppl": 620.74, "epoch": 2}


def test_fairseq_pipes_name_the_subset():
    line = "epoch 001 | valid on 'valid' subset | loss 9.1 | nll_loss 8.9 | ppl 477.5 | num_updates 100"
    assert pipe_pairs(line) == {"epoch": 1, "valid_loss": 9.1, "valid_nll_loss": 8.9, "valid_ppl": 477.5,
                                "valid_num_updates": 100}  # fmt: skip
    assert pipe_pairs("  | Name     | Type     | Params | Mode") == {}  # Lightning's model summary
    assert pipe_pairs("0 | backbone | Backbone | 101 K  | train") == {}


def test_timm_console_best_metric_and_result_dump_are_not_epochs():
    """timm logs on stderr, then prints `--result` and a JSON list of its best epochs on stdout."""
    rows = console(recorded_lines("timm_train.stderr.txt", "timm_train.stdout.txt"), "Acc@1")
    summary = file_rows(RECORDED / "timm_summary.csv", "eval_top1")
    assert [r["epoch"] for r in rows] == [0, 1]
    assert [r["Acc@1"] for r in rows] == [round(summary[e], 3) for e in (0, 1)] == [20.0, 36.667]
    assert all(set(r) == set(rows[0]) for r in rows) and not {"metric", "top1", "loss", "count"} & set(rows[0])


def test_timm_summary_csv_is_read_when_it_holds_the_metric(tmp_path, capsys):
    printed = console(recorded_lines("timm_train.stderr.txt", "timm_train.stdout.txt"), "eval_top1")

    def write(work):
        (work / "output" / "train" / "x").mkdir(parents=True)
        shutil.copy(RECORDED / "timm_summary.csv", work / "output" / "train" / "x" / "summary.csv")
        (work / "data.csv").write_text("epoch,label\n0,1\n")  # a CSV without --metric: not read

    rows = read_records(tmp_path, write, "eval_top1", printed=printed)
    with open(RECORDED / "timm_summary.csv", newline="") as f:
        expected = [{k: float(v) if k != "epoch" else int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    assert rows == expected  # each epoch once, every column as written, nothing printed added
    assert "metrics from csv records: output/train/x/summary.csv (the printed lines hold no --metric eval_top1)" in (
        capsys.readouterr().out
    )


def lightning_csv(work: Path) -> None:
    (work / "lightning_logs" / "version_1").mkdir(parents=True)
    shutil.copy(RECORDED / "lightning_metrics.csv", work / "lightning_logs" / "version_1" / "metrics.csv")


def test_lightning_console_does_not_hide_its_csv_logger(tmp_path):
    """Lightning's bar prints only `v_num=1`, its stderr "`Trainer.fit` stopped: `max_epochs=2` reached.":
    no row; the CSV holds --metric: its epoch-level values at their epoch, `test_loss` joined to the last."""
    err = recorded_lines("lightning.stderr.txt")  # its banner comes first, "`Trainer.fit` stopped" after the bars
    end = next(i for i, line in enumerate(err) if "Trainer.fit" in line)
    printed = console(err[:end] + recorded_lines("lightning_console.txt") + err[end:], "valid_loss_epoch")
    assert printed == []
    rows = read_records(tmp_path, lightning_csv, "valid_loss_epoch", printed=printed)
    metrics = RECORDED / "lightning_metrics.csv"
    assert [r["epoch"] for r in rows] == [0, 1]  # one row per epoch: test_loss (logged at epoch 2) joins the last
    for column in ("valid_loss_epoch", "train_loss_epoch"):
        assert {r["epoch"]: r[column] for r in rows} == file_rows(metrics, column)
    assert "test_loss" not in rows[0] and rows[1]["test_loss"] == 0.27978435158729553
    assert not any("valid_loss_step" in r for r in rows)  # validation steps count on their own: never epochs
    steps = read_records(tmp_path / "s", lightning_csv, "valid_loss_epoch", ("csv",), step_key="step")
    assert min(r["step"] for r in steps) == 49 and steps[-1]["step"] == 3437  # no validation step 0..313


@pytest.mark.parametrize("sources", [("tensorboard",), None], ids=["tensorboard", "auto"])
def test_lightning_tensorboard_logger_epoch_values_at_their_epoch(tmp_path, sources):
    def write(work):
        (work / "lightning_logs" / "version_0").mkdir(parents=True)
        for path in (RECORDED / "lightning_tb").iterdir():
            shutil.copy(path, work / "lightning_logs" / "version_0" / path.name)

    rows = read_records(tmp_path, write, "valid_loss_epoch", sources)
    # the values the event files hold (tensorboard's EventFileLoader; the same run's metrics.csv agrees)
    assert [(r["epoch"], r["valid_loss_epoch"], r["train_loss_epoch"]) for r in rows[:2]] == [
        (0, 0.5871946811676025, 1.2091004848480225),
        (1, 0.2884407341480255, 0.3866567611694336),
    ]
    assert len(rows) == 2 and rows[1]["test_loss"] == 0.27978435158729553  # joined to the last epoch's row
    assert not any("valid_loss_step" in r or "hp_metric" in r for r in rows)


def events_of(run: Path) -> dict:
    """{tag: {step: value}} of the run folder `run`, read with tensorboard's `EventAccumulator` (what its UI shows)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def copy_recorded(name: str):
    return lambda work: shutil.copytree(RECORDED / name, work / "tb")


@pytest.mark.parametrize("sources", [("tensorboard",), None], ids=["tensorboard", "auto"])
def test_lightning_validation_steps_past_the_epochs_are_never_epochs(tmp_path, sources):
    """Issue 54: 3 epochs, `limit_val_batches=5`: `valid_loss_step` counts 0..14 from before the first
    `epoch` scalar; it is no row, and every epoch-level value is at the `epoch` logged with it."""
    rows = read_records(tmp_path, copy_recorded("lightning_tb_steps"), "valid_loss_epoch", sources)
    logged = events_of(RECORDED / "lightning_tb_steps" / "lightning_logs" / "version_0")
    assert len(logged["valid_loss_step"]) == 15 and min(logged["epoch"]) == 3  # the steps start before any epoch
    epoch_at = {step: int(e) for step, e in logged["epoch"].items()}
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # one row per epoch: test_loss, a final result, joins epoch 2
    for name in ("valid_loss_epoch", "train_loss_epoch"):
        assert {r["epoch"]: r[name] for r in rows} == {epoch_at[s]: v for s, v in logged[name].items()}
    assert set(rows[0]) == set(rows[1]) == {"epoch", "valid_loss_epoch", "train_loss_epoch"}
    assert rows[2] == {**rows[2], "test_loss": logged["test_loss"][12]} and epoch_at[12] == 3
    assert set(rows[2]) == set(rows[1]) | {"test_loss"}


@pytest.mark.parametrize("metric", ["dashboard_test_acc_1", "dashboard/test_acc_1"])
def test_add_scalars_runs_are_series_at_their_epoch_key(tmp_path, metric):
    """`add_scalars('dashboard', {'test_acc_1': a, 'pure_ratio_1': b, 'epoch': e}, global_step)`: one run folder
    per key, each with the tag `dashboard`; each key is a metric, at the epoch the `epoch` key holds at its step.
    The epoch's folder read last (written later) still maps the values read before it."""
    reader = TrackerResults(tmp_path, "epoch", ("tensorboard",), Objective(metric, test_metric=None), since=0.0)
    for run in ("", "dashboard_test_acc_1", "dashboard_pure_ratio_1"):
        (tmp_path / "tb" / run).mkdir(parents=True, exist_ok=True)
        for path in (RECORDED / "add_scalars_tb" / run).glob("events*"):
            shutil.copy(path, tmp_path / "tb" / run)
    rows = reader.poll()
    assert rows == []  # no epoch yet: the values wait for it (the per-batch train/loss is never a row)
    shutil.copytree(RECORDED / "add_scalars_tb" / "dashboard_epoch", tmp_path / "tb" / "dashboard_epoch")
    reader.next_read = 0.0
    rows = reader.poll() + reader.close()
    series = {key: events_of(RECORDED / "add_scalars_tb" / f"dashboard_{key}")["dashboard"] for key in
              ("test_acc_1", "pure_ratio_1", "epoch")}  # fmt: skip
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert {r["epoch"]: r[metric] for r in rows} == {
        int(series["epoch"][s]): v for s, v in series["test_acc_1"].items()
    }
    other = metric.replace("test_acc_1", "pure_ratio_1")  # the group's keys in the spelling --metric uses
    assert {r["epoch"]: r[other] for r in rows} == {0: 100.0, 1: 99.0, 2: 98.0}
    assert all(set(r) == {"epoch", metric, other} for r in rows)


def write_scalars(folder: Path, scalars: dict, steps=range(1, 4)) -> None:
    """`SummaryWriter(folder).add_scalar(tag, value(step), step)` for each tag of `scalars`, each step."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in steps:
        for tag, value in scalars.items():
            writer.add_scalar(tag, value(step), step)
    writer.close()


def test_tensorboard_steps_with_no_epoch_are_rows_only_at_their_steps(tmp_path):
    """A run with no `epoch` scalar: its steps are not epochs (no row under --step-key epoch, and the error
    says so); `--step-key step` reads each value at its TensorBoard step."""

    def write(work):
        write_scalars(work / "tb", {"val/accuracy": lambda s: s / 10})

    assert read_records(tmp_path / "a", write, "val/accuracy", ("tensorboard",)) == []
    assert "tensorboard held val/accuracy only at TensorBoard steps, no epoch" in describe_sources(
        tmp_path / "a", "epoch"
    )
    rows = read_records(tmp_path / "b", write, "val/accuracy", ("tensorboard",), step_key="step")
    assert rows == [{"val/accuracy": pytest.approx(s / 10), "step": s} for s in (1, 2, 3)]


def test_a_tag_in_two_run_folders_is_not_merged(tmp_path, capsys):
    """`runs/train` and `runs/val` both logging `loss` and `epoch`: raysweep cannot tell which `loss` is
    meant; neither is read, and one line names the folders."""

    def write(work):
        write_scalars(work / "runs" / "train", {"loss": lambda s: 1 / s, "epoch": lambda s: s})
        write_scalars(work / "runs" / "val", {"loss": lambda s: 2 / s, "epoch": lambda s: s, "acc": lambda s: s})

    rows = read_records(tmp_path, write, "loss", ("tensorboard",))
    assert not any("loss" in r for r in rows) and [r["acc"] for r in rows] == [1, 2, 3]
    assert (
        "metrics: TensorBoard tag loss is in 2 run folders (runs/train, runs/val): not read" in capsys.readouterr().out
    )
