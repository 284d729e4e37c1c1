"""Sweeps end to end: the smoke grid as a subprocess, GPU packing on logical GPUs, bad input."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--noise-rates", "0.2,1.0"], r"--noise-rate: noise_rate=1.0 is outside the allowed range \[0.0, 1.0\)"),
        (["--noise-rates", "0.2,abc"], "--noise-rate='abc' is not a number"),
        (["--noise-types", "sym,pair"], "--noise-type: noise_type='pair' is not one of sym, asym"),
        (["--dataset", "mnist"], "dataset='mnist' is not one of digits, cifar10, npz"),
        (["--model", "vit"], "model='vit' is not one of mlp, cnn, resnet18"),
        (["--loss", "mae"], "loss='mae' is not one of"),
        (["--gpus-per-trial", "-1"], "--gpus-per-trial=-1 is not allowed"),
        (["--gpus-per-trial", "1.5"], "--gpus-per-trial=1.5 is not allowed"),
        (["--seeds", "0"], "--seeds=0 must be a whole number >= 1"),
        (["--epochs", "0"], "--epochs: epochs=0 must be a whole number >= 1"),
        (["--dataset", "cifar10"], "needs data_root"),
        (["--dataset", "cifar10", "--data-root", "/nonexistent"], "lacks the CIFAR-10 python batches"),
        (["--dataset", "npz", "--data-root", "/nonexistent.npz"], "is not a file"),
    ],
)
def test_bad_input_is_refused_before_ray_starts(argv, match, tmp_path):
    import ray

    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        noise_grid.main([*argv, "--storage-path", str(storage)])
    assert not storage.exists()  # nothing written
    if not os.environ.get("RAY_ADDRESS"):
        assert not ray.is_initialized() or ray.cluster_resources().get("GPU") == 4  # only the test's own Ray


def test_corrupt_npz_and_unwritable_storage(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="not a readable .npz"):
        noise_grid.main(["--dataset", "npz", "--data-root", str(bad), "--storage-path", str(tmp_path / "r")])
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UsageError, match="storage-path"):
        noise_grid.main(["--storage-path", str(a_file / "runs")])


def test_user_mistake_prints_one_line_and_exit_code_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "sweeps/noise_grid.py", "--noise-rates", "0.5,1.5", "--storage-path", str(tmp_path / "r")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --noise-rate: noise_rate=1.5 is outside the allowed range [0.0, 1.0)"
    ]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()
