"""G1, one engine: flags generated from TrainConfig, any field a grid axis, one launcher and one
trial runtime shared by the grid, the searches and PBT."""

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from sweeps import lr_search, noise_grid, pbt
from sweeps.engine import flags, grid, run_flags
from sweeps.engine.estimate import estimate_flags
from sweeps.engine.flags import UsageError
from sweeps.engine.grid import cells
from sweeps.engine.run import preflight
from trainables.config import TrainConfig

DIVERGING = ["--grad-clip", "0", "--momentum", "0.99"]  # with lr 9-10: NaN within two epochs on digits


# --- flags and axes, without Ray ----------------------------------------------------------------


def test_every_trainconfig_field_is_a_flag_with_its_comment_and_default():
    parser = flags.ArgumentParser(prog="x")
    flags.add_config_flags(parser, axes=True)
    text = " ".join(parser.format_help().split())  # argparse wraps lines
    comments = flags.field_help()
    for field in dataclasses.fields(TrainConfig):
        flag = f"--{field.name.replace('_', '-')}"
        assert flag in text, flag
        assert " ".join(f"{comments[field.name]} (default: {field.default})".split()) in text, field.name


def test_comma_values_become_typed_axes_and_the_cross_product():
    args = noise_grid.parse_args(
        ["--loss", "ce,gce,sce", "--lr", "0.01,0.1", "--noise-rates", "0.2,0.4", "--seeds", "3", "--batch-size", "32"]
    )
    axes = noise_grid.grid_axes(args)
    assert axes["loss"] == ["ce", "gce", "sce"] and axes["lr"] == [0.01, 0.1] and axes["batch_size"] == [32]
    assert axes["noise_type"] == ["sym", "asym"] and axes["seed"] == [0, 1, 2]
    cells = grid.grid_cells(axes, 10_000)
    assert len(cells) == 3 * 2 * 2 * 2 * 3 == 72
    assert len({json.dumps(c, sort_keys=True) for c in cells}) == 72
    name = grid.trial_namer(axes)
    trial = types.SimpleNamespace(config={**cells[-1]})
    assert name(trial) == "sce_lr0.1_asym_0.4_seed2"  # every varying axis, readable


def test_smoke_test_sets_the_epochs_unless_given():
    assert noise_grid.grid_axes(noise_grid.parse_args(["--smoke-test"]))["epochs"] == [run_flags.SMOKE_TEST_EPOCHS]
    assert noise_grid.grid_axes(noise_grid.parse_args(["--smoke-test", "--epochs", "5"]))["epochs"] == [5]
    assert "epochs" not in noise_grid.grid_axes(noise_grid.parse_args([]))  # TrainConfig's default applies


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--lr", "0.1", "--lr", "0.2"], "--lr is given twice"),
        (["--noise-rates", "0.2", "--noise-rate", "0.4"], "is given twice"),
        (["--loss", "ce,gce,ce"], "--loss='ce,gce,ce' repeats a value"),
        (["--loss", "ce,mae,gce"], "--loss: loss='mae' is not one of ce, label_smoothing, gce, sce"),
        (["--batch-size", "64,6.5"], "--batch-size='6.5' is not a whole number"),
        (["--lr", "0,0.1"], r"--lr: lr=0.0 is outside the allowed range \(0.0, 10.0\]"),
        (["--amp", "fp8"], "--amp: amp='fp8' is not one of auto, off, bf16, fp16"),
        (["--optimizer", "adam"], "optimizer='adam' is not one of sgd, adamw"),
        (["--seeds", "2", "--seed", "1"], "--seeds N .* and --seed are both given"),
        (["--learning-rate", "0.1"], "unrecognized arguments: --learning-rate"),
        (["--seeds", "2000000"], "the grid has 24,000,000 trials, more than --max-trials=10,000"),
        (["--seeds", "3", "--max-trials", "20"], "the grid has 36 trials, more than --max-trials=20"),
        (["--resume"], "--resume: no sweep to resume"),
        (["--name", "a/b"], "--name='a/b' must be a plain folder name"),
    ],
)
def test_bad_axis_input_is_one_line_before_ray_starts(argv, match, tmp_path):
    import ray

    was_running = ray.is_initialized()
    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        noise_grid.main([*argv, "--storage-path", str(storage)])
    assert not storage.exists() and ray.is_initialized() == was_running


def test_storage_probe_writes_and_removes_a_file_and_cleans_up_on_failure(tmp_path):
    preflight.probe_storage(str(tmp_path / "a" / "b"))
    assert not (tmp_path / "a").exists()  # created, written, and removed again
    (tmp_path / "kept").mkdir()
    preflight.probe_storage(str(tmp_path / "kept" / "b"))
    assert list((tmp_path / "kept").iterdir()) == []  # a folder that existed stays, what the probe made goes
    blocker = tmp_path / "file"  # a file where a folder must go: fails for root too (unlike modes)
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot write to .*file/runs/x"):
        preflight.probe_storage(str(blocker / "runs" / "x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "kept"]  # nothing left behind


def test_searches_refuse_axes_and_the_fields_they_search(tmp_path):
    with pytest.raises(UsageError, match="searches lr; use --lr-range"):
        pbt.main(["--lr", "0.1", "--storage-path", str(tmp_path)])
    with pytest.raises(UsageError, match="this sweep takes one value"):
        lr_search.main(["--model", "mlp,cnn", "--storage-path", str(tmp_path)])
    args = lr_search.parse_args(["--gpus-per-trial", "auto", "--model", "cnn", "--storage-path", str(tmp_path)])
    assert args.gpus_per_trial == "auto" and args.fixed["model"] == "cnn" and args.fixed["noise_rate"] == 0.5


def test_run_options_carry_the_checked_flags_typed(tmp_path):
    args = noise_grid.parse_args(
        [
            "--gpus-per-trial",
            "0.5",
            "--cpus-per-trial",
            "2",
            "--fail-fast",
            "--name",
            "g",
            "--storage-path",
            str(tmp_path / "runs"),
            "--max-concurrent",
            "3",
        ]
    )
    options = run_flags.run_options(args)
    assert isinstance(options, run_flags.RunOptions)
    assert (options.gpus_per_trial, options.cpus_per_trial, options.max_concurrent) == (0.5, 2.0, 3)
    assert options.max_failures == 0 and options.fail_fast  # --fail-fast: no retries
    assert options.experiment_dir == f"{tmp_path / 'runs'}/g"
    assert options.time_budget_s is None and options.retry_errored is False  # flags a grid lacks keep their defaults
    search = run_flags.run_options(pbt.parse_args(["--time-budget-s", "30", "--storage-path", str(tmp_path)]))
    assert search.time_budget_s == 30.0 and search.max_failures == run_flags.MAX_FAILURES
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.name = "other"


@pytest.mark.parametrize("module", [flags, cells, estimate_flags, run_flags])
def test_command_line_modules_are_the_bottom_of_sweeps(module):
    """flags is the bottom of sweeps/: it imports no other sweeps module, so none imports it back;
    grid.cells and estimate_flags (the command line, checked before Ray loads) import only flags, run_flags
    only those two."""
    import ast

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    allowed = set() if module is flags else {"sweeps.engine.flags"}
    allowed |= {"sweeps.engine.estimate.estimate_flags"} if module is run_flags else set()
    assert not {m for m in imported if (m == "sweeps" or m.startswith("sweeps.")) and m not in allowed}


EXIT_SCRIPT = """
import atexit, sys
from sweeps.engine import flags
from sweeps.engine.run import process_exit
atexit.register(lambda: print("atexit ran"))  # os._exit skips interpreter teardown and atexit hooks
def main(argv):
    print("printed, no newline", end="")
    print("to stderr", file=sys.stderr, end="")
    if argv == ["usage"]:
        raise flags.UsageError("--x=1 is bad")
    return None if argv == ["none"] else int(argv[0])
process_exit.run_main(main)
"""


@pytest.mark.parametrize(
    "arg,code,err",
    [
        ("0", 0, "to stderr"),
        ("3", 3, "to stderr"),
        ("none", 0, "to stderr"),
        ("usage", 2, "to stderrerror: --x=1 is bad\n"),
    ],
)
def test_run_main_flushes_and_leaves_with_the_sweeps_exit_code(arg, code, err, tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), arg],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(flags.__file__).parents[2])},
    )
    assert out.returncode == code
    assert out.stdout == "printed, no newline"  # flushed before os._exit; no atexit hook ran
    assert out.stderr == err
