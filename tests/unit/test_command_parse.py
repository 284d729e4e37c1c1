"""Metrics from real training output (`trainables/command/parse.py`), linked axes, task files and
safe trial names (`sweeps/engine/command_sweep/command_template.py`, `sweeps/cli.py`): fast, no Ray, no subprocess."""

from __future__ import annotations

import re
import types

import pytest

from sweeps.engine.command_sweep.command_template import cell_axes, expand_cells, parse_axis, read_tasks
from sweeps.engine.flags import UsageError
from sweeps.engine.grid.cells import short_forms, trial_namer
from trainables.command.output_shapes import epoch_with_batch, fraction_percent, meters, progress_bar, summary
from trainables.command.parse import StepContext, line_metrics
from trainables.experiment.objective import Objective


@pytest.mark.parametrize(
    "line",
    [
        "epoch=3 loss=0.5",
        "epoch: 3 loss=0.5",
        "Epoch 3 loss=0.5",
        "epoch 3/50 loss=0.5",
        "EPOCH [3/50] loss=0.5",
        "[epoch 3] loss=0.5",
        "[Epoch 3/50]  loss: 0.5",
    ],
)
def test_every_default_step_form_sets_the_step(line):
    assert line_metrics(line, "epoch") == {"epoch": 3, "loss": 0.5}


def test_percent_values_and_numbers_that_are_not_metrics():
    assert line_metrics("* accuracy: 97.0%", "epoch") == {"accuracy": 97.0}
    assert line_metrics("val_acc=71.5 %", "epoch") == {"val_acc": 71.5}
    assert line_metrics("Elapsed: 0:00:03", "epoch") == {}  # a duration, not elapsed=0
    assert line_metrics("* total: 1,000", "epoch") == {}  # a thousands separator, not total=1
    assert line_metrics("epochs: 3 stepped", "epoch") == {"epochs": 3}  # another key, not the step
    assert line_metrics("best epoch 2, val_acc=0.8", "step") == {"val_acc": 0.8}


def test_several_patterns_one_per_line_shape_and_a_step_group():
    patterns = [
        re.compile(r"^Iter (?P<step>\d+): loss (?P<loss>[\d.]+)"),
        re.compile(r"^Eval .*top1 (?P<top1>[\d.]+%)"),
    ]
    ctx = StepContext("step", patterns)
    assert ctx.feed("Iter 100: loss 2.5") == []
    assert ctx.feed("Eval on val: top1 41.5%") == []
    assert ctx.feed("Iter 200: loss 1.5") == [{"loss": 2.5, "top1": 41.5, "step": 100}]
    assert ctx.feed("loss=9 top1=1") == []  # no default pairs when patterns are given
    assert ctx.close() == [{"loss": 1.5, "step": 200}]


def test_step_context_dassl_style_lines_and_final_result_block():
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric="accuracy"))
    lines = [
        "Loading dataset: caltech101, classes: 100",
        "epoch [1/2] batch [1/2] time 0.1 loss 0.9 acc 60.0 lr 2.0e-03 eta 0:00:02",
        "epoch [1/2] batch [2/2] time 0.1 loss 0.8 acc 61.0 lr 2.0e-03 eta 0:00:01",
        "val_acc: 62.5%",
        "epoch [2/2] batch [1/2] time 0.1 loss 0.5 acc 70.0 lr 2.0e-03 eta 0:00:02",
        "val_acc: 71.0%",
        "=> result",
        "* total: 1,000",
        "* accuracy: 72.5%",
        "Elapsed: 0:00:03",
    ]
    out = [r for line in lines for r in ctx.feed(line)]
    # the preamble `classes: 100` is not a result; the test block belongs to the last step, complete once
    # it holds both metrics; `epoch [2/2]` names the last step: held until the command ends, then one row
    assert out == [{"val_acc": 62.5, "epoch": 1}]
    assert ctx.close() == [{"val_acc": 71.0, "accuracy": 72.5, "epoch": 2}]
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    out = [r for line in lines for r in ctx.feed(line)] + ctx.close()
    assert out == [{"val_acc": 62.5, "epoch": 1}, {"val_acc": 71.0, "accuracy": 72.5, "epoch": 2}]
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    out = [r for line in lines for r in ctx.feed(line)] + ctx.close(cut=True)  # Tune stopped it in the test block
    assert out == [{"val_acc": 62.5, "epoch": 1}, {"val_acc": 71.0, "epoch": 2}]


def test_step_complete_at_once_when_it_holds_the_sweep_metrics_and_each_step_once():
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    assert ctx.feed("epoch=1 val_acc=0.5 loss=2") == [{"val_acc": 0.5, "loss": 2, "epoch": 1}]
    assert ctx.feed("lr: 0.1") == []  # after the step was reported: dropped, unless it is the final result
    assert ctx.feed("epoch=2 val_acc=0.6") == [{"val_acc": 0.6, "epoch": 2}]
    assert ctx.feed("test_acc: 0.55") == []
    assert ctx.close() == [{"test_acc": 0.55, "epoch": 2}]


def test_a_script_that_never_prints_a_step_reports_once_at_step_0():
    ctx = StepContext("epoch")
    for line in ["training...", "val_acc: 0.5", "val_acc: 0.7", "test_acc = 0.65"]:
        assert ctx.feed(line) == []
    assert ctx.close() == [{"val_acc": 0.7, "test_acc": 0.65, "epoch": 0}]
    assert StepContext("epoch").close() == []


def test_linked_axes_and_path_values():
    assert parse_axis("dataset,num_classes=caltech101:100,oxford_pets:37") == (
        ("dataset", "num_classes"),
        [("caltech101", 100), ("oxford_pets", 37)],
    )
    assert parse_axis("config=configs/a b.yaml,configs/c.yaml") == ("config", ["configs/a b.yaml", "configs/c.yaml"])
    with pytest.raises(
        UsageError, match=r"'oxford_pets' must have 2 non-empty parts joined by ':' \(dataset:num_classes\)"
    ):
        parse_axis("dataset,num_classes=caltech101:100,oxford_pets")
    with pytest.raises(UsageError, match="names a setting twice"):
        parse_axis("a,a=1:2")
    cells = expand_cells({("dataset", "num_classes"): [("c", 100), ("o", 37)], "seed": [0, 1]}, None, 100)
    assert cells == [
        {"dataset": "c", "num_classes": 100, "seed": 0},
        {"dataset": "c", "num_classes": 100, "seed": 1},
        {"dataset": "o", "num_classes": 37, "seed": 0},
        {"dataset": "o", "num_classes": 37, "seed": 1},
    ]
    with pytest.raises(UsageError, match="more than --max-trials=3"):
        expand_cells({("dataset", "num_classes"): [("c", 100), ("o", 37)], "seed": [0, 1]}, None, 3)


def test_trial_names_of_paths_are_safe_short_and_unique():
    values = ["configs/fast.yaml", "configs/slow.yaml", "other/fast.yaml", "my runs/x y.yaml", "sym"]
    forms = short_forms(values)
    assert forms["sym"] == "sym" and forms["configs/slow.yaml"] == "slow.yaml"
    assert len(set(forms.values())) == len(values)
    assert all(re.fullmatch(r"[A-Za-z0-9._+-]+", f) and len(f) <= 60 for f in forms.values())
    long = ["a/" + "x" * 80 + "/run.yaml", "b/" + "x" * 80 + "/run.yaml"]
    assert len(set(short_forms(long).values())) == 2 and all(len(f) <= 60 for f in short_forms(long).values())
    cells = expand_cells({"config": values, ("dataset", "k"): [("c", 1), ("o", 2)]}, None, 100)
    namer = trial_namer(cell_axes(cells))
    names = [namer(types.SimpleNamespace(config=c)) for c in cells]
    assert len(set(names)) == len(cells) and not any("/" in n or " " in n for n in names)
    assert "slow.yaml_c_k1" in names  # each linked name appears


@pytest.mark.parametrize(
    "suffix,text",
    [
        (".csv", "dataset,num_classes\ncaltech101,100\noxford_pets,37\n"),
        (".yaml", "- {dataset: caltech101, num_classes: 100}\n- dataset: oxford_pets\n  num_classes: 37\n"),
        (".json", '[{"dataset": "caltech101", "num_classes": 100}, {"dataset": "oxford_pets", "num_classes": 37}]'),
    ],
)
def test_task_file_in_three_formats(tmp_path, suffix, text):
    path = tmp_path / f"tasks{suffix}"
    path.write_text(text)
    rows = read_tasks(str(path))
    assert rows == [{"dataset": "caltech101", "num_classes": 100}, {"dataset": "oxford_pets", "num_classes": 37}]
    assert len(expand_cells({"seed": [0, 1, 2]}, rows, 100)) == 6


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("t.csv", "dataset,k\na,1\nb\n", r"row 2 has an empty or nested value"),
        ("t.yaml", "dataset: a\n", r"expected a non-empty list of rows"),
        ("t.yaml", "- {a: 1}\n- {b: 2}\n", r"row 2 must be a mapping of the same settings as row 1 \(a\)"),
        ("t.json", '[{"a": 1}, ', r"not valid JSON"),
        ("t.txt", "a\n", r"use a \.csv"),
        ("t.csv", "trial_dir\n1\n", r"setting 'trial_dir' must be a name"),
        ("t.json", '[{"a": 1}, {"a": 1}]', r"a row is given twice"),
    ],
)
def test_bad_task_files_are_one_line_errors(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        read_tasks(str(path))
    with pytest.raises(UsageError, match="cannot read it"):
        read_tasks(str(tmp_path / "missing.csv"))


def test_quoted_keys_and_progress_bar_redraws():
    line = "{'eval_loss': 0.31, 'eval_accuracy': 0.912, 'epoch': 2.0}"
    assert line_metrics(line, "epoch") == {"eval_loss": 0.31, "eval_accuracy": 0.912, "epoch": 2.0}
    assert line_metrics('{"epoch": 3, "val/acc": 81.5}', "epoch") == {"epoch": 3, "val/acc": 81.5}
    ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
    bar = (
        "Epoch 3:  50%|#####     | 5/10 [00:01<00:01, v_num=0, train_loss=0.9]\r"
        "Epoch 3: 100%|##########| 10/10 [00:02<00:00, v_num=0, train_loss=0.5, val_acc=0.812]"
    )
    assert ctx.feed(bar) == []  # a bar's postfix is redrawn all epoch: its last redraw, at the step's end, counts
    assert ctx.feed("Epoch 4:   0%|          | 0/10 [00:00<?, v_num=0, train_loss=0.5, val_acc=0.812]") == [
        {"train_loss": 0.5, "val_acc": 0.812, "epoch": 3}  # `v_num` is the logger's version, not a metric
    ]
    assert line_metrics("Epoch: [3][ 10/391]\tTime 0.1\tLoss 2.3 (2.4)", "epoch") == {"epoch": 3, "Loss": 2.4}
    assert line_metrics("Epoch [3/50], Step [100/600], Loss: 0.2", "epoch") == {"epoch": 3, "Loss": 0.2}


# Lines as the real repos print them (format strings read from each repo's source, values ours).
SHAPES = [
    (  # pytorch/examples mnist/main.py test(): 'Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)'
        "Test set: Average loss: 0.0330, Accuracy: 9894/10000 (99%)",
        {"loss": 0.033, "Accuracy": 98.94},
    ),
    (  # pytorch/examples mnist/main.py train(): 'Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'
        "Train Epoch: 1 [640/60000 (1%)]\tLoss: 2.305400",
        {"epoch": 1, "Loss": 2.3054},
    ),
    (  # pytorch/examples imagenet/main.py ProgressMeter.display: prefix 'Epoch: [{}]', '[{:3d}/391]', meters
        "Epoch: [0][ 10/391]\tTime  0.123 ( 0.456)\tData  0.001 ( 0.050)\tLoss 6.9078e+00 (6.9080e+00)"
        "\tAcc@1   0.00 (  0.10)\tAcc@5   0.78 (  0.49)",
        {"epoch": 0, "Time": 0.456, "Data": 0.05, "Loss": 6.908, "Acc@1": 0.1, "Acc@5": 0.49},
    ),
    (  # pytorch/examples imagenet/main.py validate(): prefix 'Test: ', 79 batches
        "Test: [10/79]\tTime  0.101 ( 0.230)\tLoss 1.2345e+00 (1.3000e+00)\tAcc@1  75.00 ( 71.20)"
        "\tAcc@5  90.62 ( 90.10)",
        {"Time": 0.23, "Loss": 1.3, "Acc@1": 71.2, "Acc@5": 90.1},
    ),
    (  # pytorch/examples imagenet/main.py display_summary(): ' '.join([' *', '', '', 'Acc@1 ...', 'Acc@5 ...'])
        " *   Acc@1 76.130 Acc@5 92.862",
        {"Acc@1": 76.13, "Acc@5": 92.862},
    ),
    (  # timm train.py train_one_epoch(): f'Train: {epoch} [{update_idx:>4d}/{updates_per_epoch} ({pct:>3.0f}%)]  '
        "Train: 3 [ 100/1251 (  8%)]  Loss: 6.12 (6.23)  Time: 0.215s, 4762.79/s  (0.230s, 4452.17/s)  "
        "LR: 1.000e-03  Data: 0.012 (0.020)",
        {"epoch": 3, "Loss": 6.23, "LR": 0.001, "Data": 0.02},
    ),
    (  # timm train.py validate(): 'Test: [{0:>4d}/{1}]  ' 'Loss: {loss.val:>7.4f} ({loss.avg:>6.4f})  '
        # 'Acc@1: {top1.val:>7.3f} ({top1.avg:>7.3f})  '
        "Test: [  48/48]  Time: 0.215s (0.230s, 4452.17/s)  Loss:  1.2000 (1.3000)  Acc@1:  75.000 ( 71.200)  "
        "Acc@5:  92.000 ( 90.100)",
        {"Loss": 1.3, "Acc@1": 71.2, "Acc@5": 90.1},
    ),
    (  # timm validate.py: ' * Acc@1 {:.1f} ({:.3f}) Acc@5 {:.1f} ({:.3f})' (value, then its error)
        " * Acc@1 76.1 (23.870) Acc@5 93.0 (7.010)",
        {"Acc@1": 76.1, "Acc@5": 93.0},
    ),
    (  # Hugging Face transformers Trainer.log -> ProgressCallback.on_log: str(logs)
        "{'loss': 0.4, 'grad_norm': 1.234, 'learning_rate': 5e-05, 'epoch': 1.0}",
        {"loss": 0.4, "grad_norm": 1.234, "learning_rate": 5e-05, "epoch": 1.0},
    ),
    (  # Hugging Face transformers Trainer.evaluate -> log(metrics)
        "{'eval_loss': 0.31, 'eval_accuracy': 0.874, 'eval_runtime': 1.2, 'eval_samples_per_second': 100.0, "
        "'eval_steps_per_second': 12.5, 'epoch': 1.0}",
        {
            "eval_loss": 0.31,
            "eval_accuracy": 0.874,
            "eval_runtime": 1.2,
            "eval_samples_per_second": 100.0,
            "eval_steps_per_second": 12.5,
            "epoch": 1.0,
        },
    ),
    (  # transformers 5.x Trainer: the same dicts, each value formatted into a string (issue 45)
        "{'eval_loss': '0.3431', 'eval_accuracy': '0.874', 'eval_runtime': '1.2', 'epoch': '2.0'}",
        {"eval_loss": 0.3431, "eval_accuracy": 0.874, "eval_runtime": 1.2, "epoch": 2.0},
    ),
    (  # Lightning TQDMProgressBar on stderr (tqdm postfix: metrics formatted '{:.3g}')
        "Epoch 3: 100%|██████████| 10/10 [00:01<00:00,  8.10it/s, v_num=0, val_acc=0.812, train_loss=0.310]",
        {"epoch": 3, "val_acc": 0.812, "train_loss": 0.31},
    ),
    (  # mmengine LogProcessor.get_log_after_epoch: f'Epoch({mode}) [{cur_epoch}][{n}/{n}]  ' + '  '.join(items)
        "Epoch(val) [3][100/100]  accuracy/top1: 76.1200  accuracy/top5: 93.0100  data_time: 0.0061  time: 0.0187",
        {"epoch": 3, "accuracy/top1": 76.12, "accuracy/top5": 93.01, "data_time": 0.0061, "time": 0.0187},
    ),
    (  # mmengine LogProcessor.get_log_after_iter: f'Epoch({mode}){cur_epoch_str}' ('[3]'.rjust(6) for 100 epochs)
        "Epoch(train)   [3][ 10/196]  lr: 1.0000e-01  eta: 0:55:21  time: 0.2113  data_time: 0.0123  "
        "memory: 1234  loss: 2.3022",
        {"epoch": 3, "lr": 0.1, "time": 0.2113, "data_time": 0.0123, "memory": 1234, "loss": 2.3022},
    ),
]


@pytest.mark.parametrize("line,expected", SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_common_output_shapes_read_with_no_pattern(line, expected):
    assert line_metrics(line, "epoch") == expected


def test_each_shape_function_alone():
    assert fraction_percent("Accuracy: 9894/10000 (99%)") == {"Accuracy": 98.94}
    assert fraction_percent("Accuracy: 9894/10000") == {}  # no percentage: not known to be a fraction
    assert meters("Acc@1  75.00 ( 71.20)") == {"Acc@1": 71.2}
    assert summary(" * Acc@1 76.130 Acc@5 92.862") == {"Acc@1": 76.13, "Acc@5": 92.862}
    assert summary("Acc@1 76.130") == {}  # not a summary line
    assert progress_bar("Epoch 0:  10%|#  | 1/10 [00:00<00:09, 1.00it/s]") == {}
    assert epoch_with_batch("Epoch: [0][ 0/391]\tLoss 1 (1)") == (0, " \tLoss 1 (1)")  # counted from 0, as printed
    assert epoch_with_batch("Test: [ 0/79]") == (None, "Test: [ 0/79]")


def test_imagenet_epoch_is_the_summary_not_a_training_meter():
    """`--metric Acc@1`: the epoch's train meters are running values, the ` * Acc@1` summary completes it."""
    ctx = StepContext("epoch", objective=Objective("Acc@1", test_metric=None))
    assert ctx.feed("Epoch: [0][  0/391]\tLoss 6.9e+00 (6.9e+00)\tAcc@1   0.00 (  0.00)") == []
    assert ctx.feed("Epoch: [0][390/391]\tLoss 5.1e+00 (5.5e+00)\tAcc@1  12.50 (  8.20)") == []
    assert ctx.feed("Test: [78/79]\tLoss 4.0e+00 (4.2e+00)\tAcc@1  20.00 ( 15.40)") == []
    assert ctx.feed(" *   Acc@1 15.400 Acc@5 35.100") == [{"Loss": 4.2, "Acc@1": 15.4, "epoch": 0, "Acc@5": 35.1}]


def test_mnist_accuracy_is_a_percentage_per_epoch():
    ctx = StepContext("epoch", objective=Objective("Accuracy", test_metric=None))
    assert ctx.feed("Train Epoch: 1 [59520/60000 (99%)]\tLoss: 0.010500") == []
    assert ctx.feed("") == []
    assert ctx.feed("Test set: Average loss: 0.0330, Accuracy: 9894/10000 (99%)") == [
        {"Loss": 0.0105, "loss": 0.033, "Accuracy": 98.94, "epoch": 1}
    ]


def test_end_of_run_summaries_and_a_result_dump_are_not_epochs():
    assert line_metrics("*** Best metric: 36.666666666666664 (epoch 1)", "epoch") == {}  # timm
    assert line_metrics("`Trainer.fit` stopped: `max_epochs=2` reached.", "epoch") == {}  # Lightning
    assert line_metrics("epoch 3 val_acc=0.8 (best)", "epoch") == {"epoch": 3, "val_acc": 0.8}
    ctx = StepContext("epoch", objective=Objective("acc", test_metric=None))
    assert ctx.feed('[\n    {\n        "epoch": 0,') == []  # not after a step yet: read as usual
    ctx = StepContext("epoch", objective=Objective("acc", test_metric=None))
    out = ctx.feed("epoch=0 acc=0.5") + ctx.feed("epoch=1 acc=0.6") + ctx.feed("--result")
    dump = ["[", "    {", '        "epoch": 0,', '        "validation": {"acc": 0.5, "loss": 2}', "    }", "]"]
    out += [r for line in dump for r in ctx.feed(line)] + ctx.feed("epoch=2 acc=0.7") + ctx.close()
    assert out == [{"acc": 0.5, "epoch": 0}, {"acc": 0.6, "epoch": 1}, {"acc": 0.7, "epoch": 2}]
    ctx = StepContext(
        "epoch", objective=Objective("acc", test_metric=None)
    )  # one object of numbers, pretty-printed: a final result
    out = ctx.feed("epoch=1 acc=0.6") + [r for line in ["{", '  "test_acc": 0.9,', '  "test_loss": 0.3', "}"]
                                         for r in ctx.feed(line)]  # fmt: skip
    assert out + ctx.close() == [{"acc": 0.6, "epoch": 1}, {"test_acc": 0.9, "test_loss": 0.3, "epoch": 1}]


def test_a_missing_metric_names_the_nearest_keys_and_the_lines_not_read():
    from trainables.command.sources import candidate_keys, describe_candidates, skipped_lines

    lines = {"stdout": ["| end of epoch 1 | valid loss 6.49", "valid accuracy 81.0", "*** Best metric: 6.49 (epoch 1)"]}
    found = candidate_keys(lines, "epoch")
    assert found == {"stdout": ["epoch", "valid_loss"]}
    text = describe_candidates(found, ("stdout",), "val_loss", skipped_lines(lines, "epoch"))
    assert text == (
        "stdout held lines with epoch, valid_loss; nearest to val_loss: valid_loss; lines with numbers not read "
        "as metrics: `valid accuracy 81.0` `*** Best metric: 6.49 (epoch 1)`"
    )


def test_check_hint_for_a_crash_in_check_is_not_run_check():
    from trainables.command.failure import crash_failure
    from trainables.command.initial_failures import hint

    failure = crash_failure(1, ["ValueError: bad"], "python x.py", "/tmp/x", {}, early=True)
    assert "with --check" in hint(failure) and "--check again" in hint(failure, in_check=True)
    assert "with --check" not in hint(failure, in_check=True)


def test_one_number_parser_for_printed_values_tracker_cells_and_axis_values():
    from sweeps.engine.command_sweep.command_template import parse_axis
    from trainables.command.parse import parse_number
    from trainables.command.tracker_rows import csv_rows

    assert [parse_number(t) for t in ("3", " -2 ", "0.81", "1e-3", ".5", "97.0%", "nan", "-inf", "ce", "")] == [
        3,
        -2,
        0.81,
        0.001,
        0.5,
        97.0,
        pytest.approx(float("nan"), nan_ok=True),
        float("-inf"),
        None,
        None,
    ]
    assert [parse_number(t, printed=False) for t in ("3", "0.5", "50%", "nan", "inf")] == [3, 0.5, None, None, None]
    # the same rule in a CSV logger's cells (a `%` cell was text) and in an axis (`nan` stays a string)
    assert csv_rows("epoch,val_acc,note\n1,97.0%,-nan\n", "epoch") == [
        {"epoch": 1, "val_acc": 97.0, "note": pytest.approx(float("nan"), nan_ok=True)}
    ]
    assert parse_axis("x=3,0.5,nan,50%") == ("x", [3, 0.5, "nan", "50%"])
