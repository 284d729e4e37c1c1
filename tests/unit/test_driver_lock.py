"""One driver per experiment (sweeps/engine/sweep_records/driver_lock.py): refusal, take-over, heartbeat, the end
record,
and two real sweeps started on one folder."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.engine.sweep_records import driver_lock
from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
HOLD_AND_WAIT = (
    "import sys, time; from sweeps.engine.sweep_records import driver_lock; driver_lock.hold(sys.argv[1]); "
    "print('held', flush=True); time.sleep(600)"
)


def holder_process(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_WAIT, str(folder)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_driver_is_refused_and_a_dead_one_is_taken_over(tmp_path, capsys):
    folder = tmp_path / "exp"
    proc = holder_process(folder)
    try:
        record = driver_lock.read_holder(str(folder))
        assert record["pid"] == proc.pid and record["host"] == socket.gethostname() and record["ended"] is None
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", record["since"]) and driver_lock.holder_alive(record)
        with pytest.raises(
            driver_lock.ExperimentHeld,
            match=rf"^{re.escape(str(folder))} is in use by another driver: "
            rf"host {re.escape(socket.gethostname())}, pid {proc.pid}, since {record['since']} ",
        ):
            driver_lock.hold(str(folder))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert not driver_lock.holder_alive(driver_lock.read_holder(str(folder)))  # its pid is gone
    held = driver_lock.hold(str(folder))
    assert (
        f"taking over {folder}: its last driver (host {socket.gethostname()}, pid {proc.pid}" in capsys.readouterr().out
    )
    assert driver_lock.read_holder(str(folder))["pid"] == os.getpid()
    held.release(0)
    record = driver_lock.read_holder(str(folder))
    assert (
        record["exit_code"] == 0 and record["ended"] >= record["heartbeat"] - 1 and not driver_lock.holder_alive(record)
    )
    driver_lock.hold(str(folder)).release(3)  # an ended record is no holder: no take-over line
    assert "taking over" not in capsys.readouterr().out and driver_lock.read_holder(str(folder))["exit_code"] == 3


def test_holder_on_another_host_is_alive_until_its_heartbeat_is_a_minute_old(tmp_path, capsys):
    folder = tmp_path / "exp"
    folder.mkdir()
    record = {
        "host": "gpu-node-7",
        "pid": 1234,
        "since": "2026-01-01 10:00:00",
        "heartbeat": time.time() - 5,
        "ended": None,
        "exit_code": None,
    }
    (folder / "driver.json").write_text(json.dumps(record))
    with pytest.raises(
        driver_lock.ExperimentHeld, match=r"host gpu-node-7, pid 1234, since 2026-01-01 10:00:00 \(heartbeat 5 s ago\)"
    ):
        driver_lock.hold(str(folder))
    (folder / "driver.json").write_text(json.dumps({**record, "heartbeat": time.time() - 61}))
    driver_lock.hold(str(folder)).release(0)
    out = capsys.readouterr().out
    assert "its last driver (host gpu-node-7, pid 1234" in out and "is gone (no heartbeat for over 60 s)" in out
    assert driver_lock.read_holder(str(tmp_path / "absent")) is None


def test_a_sweep_refused_by_a_usage_error_leaves_the_folder_as_it_was(tmp_path):
    new = tmp_path / "runs" / "exp"
    driver_lock.hold(str(new)).release(2)  # e.g. the cluster refused the driver: nothing written stays
    assert not (tmp_path / "runs").exists()
    driver_lock.hold(str(new)).release(0)
    before = driver_lock.read_holder(str(new))
    driver_lock.hold(str(new)).release(2)
    assert driver_lock.read_holder(str(new)) == before  # the last real run's record is kept


def test_heartbeat_is_refreshed_while_the_driver_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_lock, "HEARTBEAT_S", 0.1)
    held = driver_lock.hold(str(tmp_path / "exp"))
    first = driver_lock.read_holder(str(tmp_path / "exp"))["heartbeat"]
    wait_for(
        lambda: driver_lock.read_holder(str(tmp_path / "exp"))["heartbeat"] > first,
        10,
        "a newer heartbeat",
        every_s=0.05,
    )
    held.release(130)
    assert driver_lock.read_holder(str(tmp_path / "exp"))["exit_code"] == 130
