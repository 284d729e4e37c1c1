"""A sweep's status as another shell sees it: a 6-cell experiment written as Tune writes it, driver records
(`driver.json`), and `python -m analysis EXP --status` run as a user runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.analysis_fixtures import trial_spec, write_experiment

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_DEDUP_LOGS": "0"}


def rows(epochs: int, base: float) -> list[dict]:
    return [{"epoch": e, "val/acc": base + 0.01 * e, "train/loss": 1.0 / e} for e in range(1, epochs + 1)]


def small_sweep(tmp_path: Path, driver: dict | None) -> Path:
    """6 cells of 5 epochs: 2 done, 1 diverged, 1 errored, 1 running (epoch 2 on GPU 1), 1 pending."""
    config = lambda seed: {"noise_rate": 0.2, "seed": seed, "epochs": 5}  # noqa: E731
    specs = [
        trial_spec("sym_0.2_seed0", config(0), rows(5, 0.80)),
        trial_spec("sym_0.2_seed1", config(1), rows(5, 0.85)),
        trial_spec("sym_0.2_seed2", config(2), [*rows(2, 0.5), {"epoch": 3, "diverged": True}]),
        trial_spec("sym_0.2_seed3", config(3), rows(1, 0.6), status="ERROR", error="RuntimeError: boom"),
        trial_spec("sym_0.2_seed4", config(4), rows(2, 0.95), status="RUNNING", gpu_ids="1"),
        trial_spec("sym_0.2_seed5", config(5), [], status="PENDING"),
    ]
    experiment = write_experiment(tmp_path, "grid", specs)
    info = json.loads((experiment / "raysweep.json").read_text())
    (experiment / "raysweep.json").write_text(
        json.dumps(
            {
                **info,
                "total_trials": 8,  # 2 not created by Tune yet
                "argv": ["sweeps/noise_grid.py", "--seeds", "8"],
            }
        )
    )
    (experiment / "tuner.pkl").write_bytes(b"")  # Tune saved the sweep: --resume can restore it
    running = next(experiment.glob("train_abcde_00004_*"))
    (running / "stdout").write_text(
        "sym_0.2_seed4:INFO | [GPU 1 | pid 7] Epoch [1/5] | Loss 1.0\n"
        "sym_0.2_seed4:INFO | [GPU 1 | pid 7] Epoch [2/5] | Loss 0.5\n"
    )
    if driver is not None:
        (experiment / "driver.json").write_text(json.dumps(driver))
    return experiment


def record(pid: int, host: str | None = None, heartbeat: float | None = None, ended=None, exit_code=None) -> dict:
    """A driver record (`driver.json`) of `pid` on `host` (this machine by default), its heartbeat now."""
    return {
        "host": host or socket.gethostname(),
        "pid": pid,
        "since": "2026-01-01 00:00:00",
        "heartbeat": time.time() if heartbeat is None else heartbeat,
        "ended": ended,
        "exit_code": exit_code,
    }


def status(experiment: Path, *flags: str) -> subprocess.CompletedProcess:
    """`python -m analysis EXPERIMENT --status FLAGS` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "analysis", str(experiment), "--status", *flags],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
