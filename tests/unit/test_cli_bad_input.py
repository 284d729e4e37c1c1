"""Bad input of G3 through the sweep's command line: refused before Ray starts, one line, nothing written.

Each case calls `noise_grid.main([...])` in-process and expects `UsageError` (the script prints it
as one line and exits 2): GPUs that do not exist, data no trial can learn from, an address where
nothing answers, a tracker that cannot work.
"""

from __future__ import annotations

import importlib.util
import os
import socket

import numpy as np
import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError

pytestmark = pytest.mark.usefixtures("ray_auth_restored")  # the address check may turn token mode on


def npz(tmp_path, y, x=None) -> str:
    y = np.asarray(y)
    x = np.random.default_rng(0).random((len(y), 4)).astype(np.float32) if x is None else x
    np.savez(tmp_path / "data.npz", x=x, y=y)
    return str(tmp_path / "data.npz")


def with_nan(n=60):
    x = np.random.default_rng(0).random((n, 4)).astype(np.float32)
    x[5, 2] = np.nan
    return x


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # released on return: nothing listens there


CASES = {
    "absent GPU index": (
        lambda tmp: ["--gpus", "0,5"],
        {"RAYSWEEP_LOGICAL_GPUS": "4"},
        r"--gpus: GPU 5 does not exist; this machine has GPU\(s\) 0, 1, 2, 3",
    ),
    "--gpus without GPUs": (
        lambda tmp: ["--gpus", "0"],
        {},
        r"--gpus=0: this machine has no GPU \(NVML and torch see none\)",
    ),
    "single-class npz": (
        lambda tmp: ["--dataset", "npz", "--data-root", npz(tmp, [1] * 60)],
        {},
        r"data.npz: labels must be 0..C-1 but class\(es\) \[0\] of 0..1 have no sample",
    ),
    "one class, labelled 0": (
        lambda tmp: ["--dataset", "npz", "--data-root", npz(tmp, [0] * 60)],
        {},
        r"data.npz: the training data has 1 class\(es\) \(60 samples\)",
    ),
    "NaN features": (
        lambda tmp: ["--dataset", "npz", "--data-root", npz(tmp, np.arange(60) % 3, with_nan())],
        {},
        r"data.npz: x holds 1 NaN/inf value\(s\) in 1 of 60 samples",
    ),
    "too-small class": (
        lambda tmp: ["--dataset", "npz", "--data-root", npz(tmp, [0] * 30 + [1] * 29 + [2])],
        {},
        r"data.npz: class sizes \{2: 1\} \(class: samples\) are below the 3 per class",
    ),
    "labels not 0..C-1": (
        lambda tmp: ["--dataset", "npz", "--data-root", npz(tmp, np.arange(60) % 3 * 2)],
        {},
        r"data.npz: labels must be 0..C-1 but class\(es\) \[1, 3\] of 0..4 have no sample",
    ),
    "unreachable address": (
        lambda tmp: ["--address", f"127.0.0.1:{closed_port()}"],
        {},
        r"--address=127.0.0.1:\d+: nothing answers at 127.0.0.1:\d+ \(Connection refused\)",
    ),
    "malformed address": (lambda tmp: ["--address", "headnode"], {}, r"--address='headnode' is not HOST:PORT"),
    "file MLflow store": (
        lambda tmp: ["--mlflow-uri", f"file:{tmp}/mlruns"],
        {"MLFLOW_ALLOW_FILE_STORE": None},
        r"--mlflow-uri='file:.*/mlruns': MLflow cannot use this tracking store",
    ),
    "unreachable MLflow server": (
        lambda tmp: ["--mlflow-uri", f"http://127.0.0.1:{closed_port()}"],
        {},
        r"--mlflow-uri='http://127.0.0.1:\d+': MLflow cannot use this tracking store",
    ),
}
NEEDS_MLFLOW = {"file MLflow store", "unreachable MLflow server"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            name,
            marks=pytest.mark.skipif(
                name in NEEDS_MLFLOW and importlib.util.find_spec("mlflow") is None,
                reason="needs the trackers extra (mlflow)",
            ),
        )
        for name in CASES
    ],
)
def test_bad_input_is_refused_before_ray_starts(case, tmp_path, monkeypatch):
    import ray

    argv, env, match = CASES[case]
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(
        "sweeps.engine.cluster.gpus.read_nvml", lambda: None
    )  # a machine without GPUs, wherever this runs
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))  # restored afterwards
    was_running = ray.is_initialized()
    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        noise_grid.main(
            [*argv(tmp_path), "--noise-types", "sym", "--noise-rates", "0.2", "--storage-path", str(storage)]
        )
    assert not storage.exists() and not (tmp_path / "mlruns").exists()  # nothing written
    assert ray.is_initialized() == was_running  # no Ray started by the sweep
