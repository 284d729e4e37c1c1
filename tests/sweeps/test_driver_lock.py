"""One driver per experiment (sweeps/engine/sweep_records/driver_lock.py): refusal, take-over, heartbeat, the end
record,
and two real sweeps started on one folder."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.engine.sweep_records import driver_lock
from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_sweeps_on_one_folder_the_second_exits_2_and_the_first_counts_each_cell_once(ray_gpus, tmp_path):
    address = ray_gpus.get_runtime_context().gcs_address
    argv = [
        sys.executable,
        "sweeps/noise_grid.py",
        "--noise-types",
        "sym",
        "--noise-rates",
        "0.1,0.2",
        "--epochs",
        "3",
        "--gpus-per-trial",
        "0",
        "--address",
        address,
        "--no-report",
        "--storage-path",
        str(tmp_path),
        "--name",
        "shared",
    ]
    first = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(
        lambda: (
            first.poll() is not None
            or (driver_lock.read_holder(str(tmp_path / "shared")) or {}).get("pid") == first.pid
        ),
        120,
        "the first driver's driver.json",
    )
    started = time.monotonic()
    second = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    refused_after = time.monotonic() - started
    out, _ = first.communicate(timeout=300)
    assert second.returncode == 2, second.stdout + second.stderr
    error = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"pid {first.pid}, since " in error[0] and "is in use by another driver" in error[0]
    print(f"\nsecond driver refused after {refused_after:.1f} s (exit 2)")
    assert first.returncode == 0, out[-3000:]
    table = out[out.index("test/acc (%)") : out.index("results:")].splitlines()
    assert [line.split()[-1] for line in table[2:4]] == ["(1)", "(1)"]
    assert "duplicates left out" not in out
    record = driver_lock.read_holder(str(tmp_path / "shared"))
    assert record["pid"] == first.pid and record["exit_code"] == 0 and record["ended"] is not None
