"""Command sweeps: checking a user's command before Ray starts, and running it as Tune trials
(`trainables/command/runner.py`) with tests/scripts/train_script.py, a PyTorch script that knows nothing of Ray."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.engine.command_sweep.command_template import (
    check_metric_producible,
    check_template,
    compile_metric_pattern,
    parse_axis,
    parse_metrics_line,
    placeholders,
    render,
)
from sweeps.engine.flags import UsageError
from trainables.command.sources import read_metrics_file
from trainables.experiment.objective import Objective

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, "tests/scripts/train_script.py"]  # relative: run with cwd=ROOT, like a user's sweep


# --- axes, templates, patterns: before Ray starts ---------------------------------------------


def test_axis_values_are_typed():
    assert parse_axis("noise_rate=0.2,0.4,0.6") == ("noise_rate", [0.2, 0.4, 0.6])
    assert parse_axis("epochs=10,20") == ("epochs", [10, 20])
    assert parse_axis("lr = 1e-3, .5") == ("lr", [0.001, 0.5])
    assert parse_axis("noise_type=sym,asym") == ("noise_type", ["sym", "asym"])
    assert isinstance(parse_axis("width=64")[1][0], int)


@pytest.mark.parametrize(
    "text, match",
    [
        ("noise_rate", "has no '='"),
        ("=0.1,0.2", "name '' is not allowed"),
        ("noise-rate=0.1", "'noise-rate' is not allowed"),
        ("trial_dir=a,b", "set by raysweep"),
        ("noise_rate=", "one or more comma-separated values"),
        ("noise_rate=0.1,,0.2", "none empty"),
        ("noise_rate=0.2,0.4,0.2", "repeats 0.2"),
        ("epochs=10,10.0", "repeats 10"),
    ],
)
def test_bad_axis_is_one_line_naming_the_flag(text, match):
    with pytest.raises(UsageError, match=match) as e:
        parse_axis(text)
    assert str(e.value).startswith("--axis") and "\n" not in str(e.value)


def test_placeholders_and_render_format_values_plainly():
    template = [
        "python",
        "train.py",
        "--noise-rate={noise_rate}",
        "--lr",
        "{lr:.0e}",
        "--out",
        "{trial_dir}/{trial_name}",
        "{{literal}}",
    ]
    assert placeholders(template) == {"noise_rate", "lr", "trial_dir", "trial_name"}
    argv = render(template, {"noise_rate": 0.1 + 0.2, "lr": 0.001, "seed": 3}, "/runs/t1/work", "t1")
    assert argv == ["python", "train.py", "--noise-rate=0.3", "--lr", "1e-03", "--out", "/runs/t1/work/t1", "{literal}"]
    assert render(
        ["{seed}", "{rate}", "{lr}", "{flag}"], {"seed": 3, "rate": 0.0, "lr": 1e-5, "flag": True}, "d", "n"
    ) == ["3", "0.0", "1e-05", "True"]
    with pytest.raises(UsageError, match=r"command: .*\{0\}"):
        placeholders(["python", "{0}"])


def test_check_template_accepts_a_complete_command():
    check_template(
        [*SCRIPT, "--noise-rate", "{noise_rate}", "--seed", "{seed}", "--out", "{trial_dir}"],
        {"noise_rate": [0.2, 0.4]},
        seeds=True,
    )


@pytest.mark.parametrize(
    "template, axes, seeds, match",
    [
        ([], {}, False, "command: none given"),
        (["python", "t.py", "--lr", "{lr}"], {}, False, r"placeholder \{lr\} is not defined.*--axis lr="),
        (["python", "t.py", "--seed", "{seed}"], {}, False, r"placeholder \{seed\} is not defined"),
        (["python", "t.py"], {"noise_rate": [0.1]}, False, r"--axis noise_rate: the command never uses \{noise_rate\}"),
        (
            ["python", "t.py", "--noise-rate", "{noise_rate}"],
            {"noise_rate": [0.1]},
            True,
            r"--seeds: the command never uses \{seed\}",
        ),
        (["python", "--seed", "{seed}"], {"seed": [1, 2]}, True, "--axis seed=... and --seeds"),
        (["no-such-program-g2", "{seed}"], {}, True, "program 'no-such-program-g2' is not found on PATH"),
        (["./no/such/train.sh", "{seed}"], {}, True, "is not an executable file"),
    ],
)
def test_bad_template_is_refused(template, axes, seeds, match):
    with pytest.raises(UsageError, match=match) as e:
        check_template(template, axes, seeds)
    assert "\n" not in str(e.value)


def test_a_script_path_must_be_executable(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho epoch=1\n")
    with pytest.raises(UsageError, match="chmod \\+x"):
        check_template([str(script), "{seed}"], {}, seeds=True)
    script.chmod(0o755)
    check_template([str(script), "{seed}"], {}, seeds=True)


def test_metric_pattern_and_metric_names_are_checked():
    with pytest.raises(UsageError, match=r"--metric-pattern='\(unclosed' is not a valid regular expression"):
        compile_metric_pattern("(unclosed")
    with pytest.raises(UsageError, match="has no named group"):
        compile_metric_pattern(r"epoch (\d+)")
    pattern = compile_metric_pattern(r"Epoch (?P<epoch>\d+) .*acc (?P<val_acc>[\d.]+)")
    check_metric_producible(Objective("val_acc", test_metric=None), pattern, "epoch")
    with pytest.raises(
        UsageError, match=r"--metric='val/acc' is not a named group of --metric-pattern \(groups: epoch, val_acc\)"
    ):
        check_metric_producible(Objective("val/acc", test_metric=None), pattern, "epoch")
    check_metric_producible(
        Objective("val_acc", test_metric=None), pattern, "step"
    )  # a step is read in its default forms too
    with pytest.raises(UsageError, match="--test-metric='test_acc' is not a named group"):
        check_metric_producible(Objective("val_acc", test_metric="test_acc"), [pattern], "epoch")
    check_metric_producible(
        Objective("val_acc", test_metric="test_acc"),
        [pattern, compile_metric_pattern(r"test (?P<test_acc>\S+)")],
        "epoch",
    )
    check_metric_producible(
        Objective("val acc", test_metric=None), None, "epoch", metrics_from="tensorboard"
    )  # tags are not checked
    check_metric_producible(Objective("val/acc", test_metric=None), None, "epoch")  # the default pattern reads any key
    with pytest.raises(UsageError, match="--metric='val acc' cannot be read"):
        check_metric_producible(Objective("val acc", test_metric=None), None, "epoch")


def test_metrics_lines_default_and_custom_patterns():
    assert parse_metrics_line("epoch=3 val_acc=0.81 loss=0.52\n", "epoch") == {
        "epoch": 3,
        "val_acc": 0.81,
        "loss": 0.52,
    }
    assert parse_metrics_line("epoch: 3, val/acc: 0.81, lr: 1e-3", "epoch") == {
        "epoch": 3,
        "val/acc": 0.81,
        "lr": 0.001,
    }
    assert parse_metrics_line("[GPU 0] step=120 | train.loss = -2.5e-1 | time=10ms | run=v1.2", "step") == {
        "step": 120,
        "train.loss": -0.25,
    }
    assert parse_metrics_line("loading: 3 files, val_acc=0.5", "epoch") is None  # no step key, no result
    assert parse_metrics_line("Epoch [3/30] | Loss 1.23", "epoch") == {"epoch": 3, "Loss": 1.23}  # a pipe pair
    assert parse_metrics_line("Epoch [3/30] Loss 1.23", "epoch") == {"epoch": 3}  # `Loss 1.23` alone is no pair
    nan = parse_metrics_line("epoch=4 loss=nan grad=inf", "epoch")
    assert math.isnan(nan["loss"]) and math.isinf(nan["grad"])
    pattern = compile_metric_pattern(r"Epoch (?P<epoch>\d+)/\d+ .*acc (?P<val_acc>[\d.]+)(?: best (?P<best>[\d.]+))?")
    assert parse_metrics_line("Epoch 3/30 - loss 0.5 - acc 0.81", "epoch", [pattern]) == {"epoch": 3, "val_acc": 0.81}
    assert parse_metrics_line("Epoch 3/30 - acc 0.81 best 0.9", "epoch", [pattern])["best"] == 0.9
    assert parse_metrics_line("epoch=3 acc=0.8", "epoch", [pattern]) == {"epoch": 3}  # the step in a default form
    assert parse_metrics_line("step=3 acc=0.8", "epoch", [pattern]) is None


def test_metrics_file_reads_whole_lines_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1, "val_acc": 0.5}\nnot json\n{"loss": 1}\n{"epoch": 2, "val')
    results, offset = read_metrics_file(path, 0, "epoch")
    assert results == [{"epoch": 1, "val_acc": 0.5}]  # junk and step-less lines skipped, the torn line kept
    with open(path, "a") as f:
        f.write('_acc": 0.6}\n')
    assert read_metrics_file(path, offset, "epoch") == ([{"epoch": 2, "val_acc": 0.6}], path.stat().st_size)


def test_report_helper_prints_or_appends_and_imports_nothing_heavy(tmp_path):
    code = (
        "import sys; from trainables.command.user_metrics import report; report({'val/acc': 0.5}, epoch=2); "
        "print(sorted(m for m in ('torch', 'ray', 'numpy') if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAYSWEEP_METRICS_FILE"}
    printed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert printed.stdout.splitlines() == ["val/acc=0.5 epoch=2", "[]"]
    assert parse_metrics_line(printed.stdout.splitlines()[0], "epoch") == {"val/acc": 0.5, "epoch": 2}
    metrics_file = tmp_path / "m.jsonl"
    subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, "RAYSWEEP_METRICS_FILE": str(metrics_file)}, check=True
    )
    assert [json.loads(line) for line in metrics_file.read_text().splitlines()] == [{"val/acc": 0.5, "epoch": 2}]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--axis", "noise_rate=0.2", "--"], "command: none given"),
        (
            ["--axis", "noise_rate=0.2", "--", "no-such-program-xyz", "{noise_rate}"],
            "program 'no-such-program-xyz' is not found",
        ),
        (
            ["--axis", "noise_rate=0.2", "--", "python", "--rate", "{noise_rat}"],
            r"placeholder \{noise_rat\} is not defined",
        ),
        (
            ["--axis", "noise_rate=0.2", "--axis", "lr=0.1", "--", "python", "{noise_rate}"],
            r"the command never uses \{lr\}",
        ),
        (["--axis", "noise_rate", "--", "python", "{noise_rate}"], "has no '='"),
        (["--axis", "noise_rate=", "--", "python", "{noise_rate}"], "give one or more comma-separated values"),
        (["--axis", "noise_rate=0.2,0.2", "--", "python", "{noise_rate}"], "repeats 0.2"),
        (
            ["--axis", "noise_rate=0.2", "--axis", "noise_rate=0.4", "--", "python", "{noise_rate}"],
            "--axis noise_rate is given twice",
        ),
        (
            ["--axis", "noise_rate=0.2", "--metric-pattern", "epoch (?P<epoch", "--", "python", "{noise_rate}"],
            "--metric-pattern",
        ),
        (
            [
                "--axis",
                "noise_rate=0.2",
                "--metric-pattern",
                r"e (?P<epoch>\d+) a (?P<acc>[\d.]+)",
                "--metric",
                "val_acc",
                "--",
                "python",
                "{noise_rate}",
            ],
            "--metric",
        ),
        (["--seeds", "2", "--", "python", "x.py"], r"the command never uses \{seed\}"),
    ],
)
def test_bad_command_sweeps_are_refused_before_ray_starts(argv, match, tmp_path):
    from sweeps import run_command

    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        run_command.main([*argv[: argv.index("--")], "--storage-path", str(storage), *argv[argv.index("--") :]])
    assert not storage.exists()


def test_the_helper_is_log_metrics_and_report_is_its_old_name(tmp_path, monkeypatch):
    from trainables.command import user_metrics

    assert user_metrics.report is user_metrics.log_metrics
    monkeypatch.setenv("RAYSWEEP_METRICS_FILE", str(tmp_path / "m.jsonl"))
    user_metrics.log_metrics({"val/acc": 0.5}, epoch=1)
    assert read_metrics_file(tmp_path / "m.jsonl", 0, "epoch")[0] == [{"val/acc": 0.5, "epoch": 1}]
