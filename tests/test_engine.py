"""G1, one engine: flags generated from TrainConfig, any field a grid axis, one launcher and one
trial runtime shared by the grid, the searches and PBT."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from sweeps import lr_search, noise_grid, pbt
from sweeps.engine import flags, grid, run_flags
from sweeps.engine.flags import UsageError
from sweeps.engine.run import preflight
from trainables.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
DIVERGING = ["--grad-clip", "0", "--momentum", "0.99"]  # with lr 9-10: NaN within two epochs on digits


def results_of(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line.strip()]


def trial_dirs(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if (p / "params.json").exists())


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
        (["--amp", "fp8"], "--amp: amp='fp8' is not one of off, bf16, fp16"),
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


@pytest.mark.parametrize("module", [flags, grid, run_flags])
def test_command_line_modules_are_the_bottom_of_sweeps(module):
    """flags is the bottom of sweeps/: it imports no other sweeps module, so none imports it back;
    grid and run_flags (the command line, checked before Ray loads) import only flags."""
    import ast

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    allowed = set() if module is flags else {"sweeps.engine.flags"}
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


# --- with Ray -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_axis_grid_subprocess_runs_every_cell_and_tables_by_every_axis(tmp_path, sweep_env):
    """--loss x --lr x noise rate x seeds: 2 x 2 x 2 x 2 = 16 trials (CI-sized; the 72-trial form
    differs only in length)."""
    proc = subprocess.run(
        [
            sys.executable,
            "sweeps/noise_grid.py",
            "--loss",
            "ce,gce",
            "--lr",
            "0.01,0.1",
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.2,0.4",
            "--seeds",
            "2",
            "--smoke-test",
            "--epochs",
            "1",
            "--quiet",
            "--storage-path",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=sweep_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0] == "16 trials in the grid"
    names = [p.name for p in trial_dirs(tmp_path / "noise_grid")]
    expected = sorted(
        f"{loss}_lr{lr}_sym_{rate}_seed{seed}"
        for loss in ("ce", "gce")
        for lr in ("0.01", "0.1")
        for rate in ("0.2", "0.4")
        for seed in (0, 1)
    )
    assert names == expected
    for trial in trial_dirs(tmp_path / "noise_grid"):
        config = json.loads((trial / "params.json").read_text())
        assert trial.name.startswith(f"{config['loss']}_lr{config['lr']:g}_")
        assert results_of(trial)[-1]["epoch"] == 1
    header = next(line for line in proc.stdout.splitlines() if line.split()[:3] == ["loss", "lr", "noise_rate"])
    rows = proc.stdout.splitlines()[proc.stdout.splitlines().index(header) + 1 :][:8]
    assert [row.split()[:3] for row in rows] == [
        [loss, lr, rate] for loss in ("ce", "gce") for lr in ("0.01", "0.1") for rate in ("0.2", "0.4")
    ]
    assert all(row.split()[-1] == "(2)" for row in rows)  # two seeds per cell


@pytest.mark.slow
def test_diverging_seed_in_a_search_ends_the_trial_diverged_not_errored(ray_gpus, tmp_path, monkeypatch, capsys):
    """Seed 1 of each --repeat 2 trial gets a NaN loss in epoch 2 (injected into the loss, so the runtime's
    own per-step check finds it): each trial ends diverged, naming seed 1 and epoch 2, writes
    divergence.json, and is neither an error nor retried. The search also takes --gpus-per-trial auto."""

    def nan_in_seed_1(config, data=None, seeds=None):
        import trainables.train as train
        import trainables.trial as trial

        real = train.build_loss

        def build_loss(cfg):
            loss_fn, calls = real(cfg), [0]

            def loss(logits, y):
                calls[0] += 1  # 5 steps per epoch (1221 samples, batch 256): call 8 is in epoch 2
                return loss_fn(logits, y) * (float("nan") if cfg.seed == 1 and calls[0] >= 8 else 1.0)

            return loss

        train.build_loss = build_loss
        try:
            trial.train_classifier(config, data, seeds)
        finally:
            train.build_loss = real

    monkeypatch.setattr("trainables.trial.train_classifier", nan_in_seed_1)
    code = lr_search.main(
        [
            "--repeat",
            "2",
            "--num-samples",
            "2",
            "--epochs",
            "3",
            "--grace-period",
            "3",
            "--losses",
            "ce",
            "--batch-sizes",
            "256",
            "--gpus-per-trial",
            "auto",
            "--cpus-per-trial",
            "1",
            "--storage-path",
            str(tmp_path),
            "--name",
            "nan",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # a diverged trial is reported in the exit code, as in the grid
    assert "--gpus-per-trial auto: 0.25 GPU per trial" in out  # logical GPUs: the probe saw no CUDA device
    trials = trial_dirs(tmp_path / "nan")
    assert len(trials) == 2
    state = json.loads(next((tmp_path / "nan").glob("experiment_state-*.json")).read_text())
    assert "ERROR" not in json.dumps(state["trial_data"])  # no trial errored (nor was retried)
    for trial in trials:
        rows = results_of(trial)
        assert [r["epoch"] for r in rows] == [1, 2]
        last = rows[-1]
        assert last["diverged"] is True and last["diverged/seed"] == 1 and "val/acc" not in last
        dump = json.loads((trial / "divergence.json").read_text())
        assert dump["seed"] == 1 and dump["num_seeds"] == 2 and dump["epoch"] == 2 and dump["step"] == 8
        assert f"diverged (not ranked): {trial.name} at epoch 2, step 8, seed 1" in out
        assert not (trial / "error.txt").exists()
    assert "sweep finished: 2 trials" in out and "2 diverged" in out  # the grid's progress block


@pytest.mark.slow
def test_search_trial_on_a_fractional_gpu_caps_its_memory(ray_gpus, tmp_path, monkeypatch, capsys):
    """A search trial on 0.5 logical GPU calls torch.cuda.set_per_process_memory_fraction(0.45): the
    runtime sees a mocked CUDA in trainables.gpu only (the model still trains on CPU)."""
    calls = tmp_path / "cap_calls"

    def with_mocked_cuda(config, data=None, seeds=None):
        import torch as real_torch

        import trainables.gpu as gpu
        import trainables.trial as trial

        def record(fraction, device):
            with open(calls, "a") as f:
                f.write(f"{fraction}\n")

        gpu.torch = types.SimpleNamespace(
            device=real_torch.device,
            cuda=types.SimpleNamespace(
                is_available=lambda: True,
                current_device=lambda: 0,
                set_per_process_memory_fraction=record,
                OutOfMemoryError=real_torch.cuda.OutOfMemoryError,
            ),
        )
        try:
            trial.train_classifier(config, data, seeds)
        finally:
            gpu.torch = real_torch

    monkeypatch.setattr("trainables.trial.train_classifier", with_mocked_cuda)
    code = lr_search.main(
        [
            "--num-samples",
            "2",
            "--epochs",
            "1",
            "--grace-period",
            "1",
            "--losses",
            "ce",
            "--batch-sizes",
            "256",
            "--gpus-per-trial",
            "0.5",
            "--cpus-per-trial",
            "0.5",
            "--storage-path",
            str(tmp_path),
            "--name",
            "cap",
        ]
    )
    assert code == 0
    assert [float(x) for x in calls.read_text().split()] == [pytest.approx(0.45)] * 2
    for trial in trial_dirs(tmp_path / "cap"):
        last = results_of(trial)[-1]
        assert last["gpu/fraction"] == 0.5 and last["gpu/memory_cap"] == pytest.approx(0.45)
        assert "INFO | [GPU " in (trial / "stdout").read_text()  # the per-trial log line, with its GPU id


@pytest.mark.slow
def test_pbt_prints_the_progress_block_and_writes_trial_logs(ray_gpus, tmp_path, capsys):
    code = pbt.main(
        [
            "--num-samples",
            "2",
            "--epochs",
            "2",
            "--perturbation-interval",
            "1",
            "--batch-size",
            "256",
            "--gpus-per-trial",
            "0",
            "--cpus-per-trial",
            "1",
            "--storage-path",
            str(tmp_path),
            "--name",
            "pbt",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "sweep finished: 2 trials: 0 running, 0 pending, 2 done, 0 errored, 0 diverged" in out
    trials = trial_dirs(tmp_path / "pbt")
    assert len(trials) == 2 and all(re.fullmatch(r"pbt_\d{5}", t.name) for t in trials)
    for trial in trials:
        log = (trial / "stdout").read_text()
        assert f"{trial.name}:INFO | [CPU | pid " in log and "Epoch [2/2]" in log
        assert (trial / "trial_config.json").exists() and (trial / "noise.json").exists()
    # Its report draws the population's schedule (issue 42), known from raysweep.json's scheduler.
    assert json.loads((tmp_path / "pbt" / "raysweep.json").read_text())["scheduler"] == "PopulationBasedTraining"
    report = (tmp_path / "pbt" / "report" / "report.md").read_text()
    assert "![PBT schedule](pbt_schedule.png)" in report and (tmp_path / "pbt" / "report" / "pbt_schedule.png").exists()
