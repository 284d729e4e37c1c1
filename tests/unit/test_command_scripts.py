"""Real training scripts as they are (tests/scripts/*): each shape of output and input, through
`python sweeps/run_command.py` as a subprocess, as a user types it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.command_sweeps import PY, ROOT, run_sweep

# --- before Ray: dry run and check ---------------------------------------------------------------


def test_dry_run_prints_every_cell_and_imports_nothing_heavy(tmp_path):
    tasks = tmp_path / "tasks.csv"
    tasks.write_text("dataset,num_classes\ncaltech101,100\noxford_pets,37\n")
    proc = subprocess.run(
        [
            PY,
            "-X",
            "importtime",
            "sweeps/run_command.py",
            "--dry-run",
            "--tasks",
            str(tasks),
            "--axis",
            "config=configs/a b.yaml,configs/c.yaml",
            "--seeds",
            "2",
            "--storage-path",
            str(tmp_path / "runs"),
            "--",
            PY,
            "tests/scripts/dassl_style.py",
            "--config",
            "{config}",
            "--dataset",
            "{dataset}",
            "--num-classes",
            "{num_classes}",
            "--seed",
            "{seed}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "8 trials; nothing was run (--dry-run)"
    cells = [line for line in lines if " --config " in line]
    assert len(cells) == 8
    names = [line.split(":", 1)[0] for line in cells]
    assert len(set(names)) == 8 and not any(c in n for n in names for c in "/ ")
    assert (
        f"caltech101_numclasses100_a-b.yaml_seed1: {PY} tests/scripts/dassl_style.py --config 'configs/a b.yaml' "
        "--dataset caltech101 --num-classes 100 --seed 1" in cells
    )
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert not imported & {"ray", "torch", "pandas", "matplotlib"}
    assert not (tmp_path / "runs").exists()


def test_check_runs_the_first_cell_and_says_whether_the_metrics_were_seen(tmp_path):
    argv = [
        "--axis",
        "dataset,num_classes=caltech101:100,oxford_pets:37",
        "--test-metric",
        "accuracy",
        "--",
        PY,
        "tests/scripts/dassl_style.py",
        "--dataset",
        "{dataset}",
        "--num-classes",
        "{num_classes}",
        "--epochs",
        "2",
    ]
    ok = run_sweep(tmp_path, "--check", *argv, check=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "--check caltech101_numclasses100: " in ok.stdout and "--dataset caltech101 --num-classes 100" in ok.stdout
    assert "  | * accuracy: 70.0%" in ok.stdout  # the output, streamed
    # `time 0.100 (0.120)` is Dassl's AverageMeter: its running average is read
    assert "  metrics row: time=0.12, val_acc=66.0, epoch=1" in ok.stdout
    assert "  metrics row: time=0.12, val_acc=68.0, accuracy=70.0, epoch=2" in ok.stdout  # the final block joins
    assert "--metric val_acc: seen; --test-metric accuracy: seen" in ok.stdout
    assert "(set " not in ok.stdout  # the script names no tracker: no WANDB_* / MLFLOW_* lines
    bad = run_sweep(tmp_path, "--check", "--metric", "val_accuracy", *argv, check=True)
    assert bad.returncode == 1 and "--metric val_accuracy: NOT seen" in bad.stdout
    assert "; nearest to val_accuracy: accuracy, val_acc" in bad.stderr
    assert not (tmp_path / "runs").exists() and not Path(ROOT / "runs" / "command").exists()
