"""`python -m analysis EXP --status`: a sweep's status from its folder, from another shell (issue 21)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers.processes import wait_until
from tests.helpers.sweep_status import record, status

ROOT = Path(__file__).resolve().parents[2]


def titled(names: set[str], token_path: str) -> set[str]:
    """The trial names among `ray::<name>` process titles of the Ray whose token is at `token_path` (the
    session's shared head: another pytest-xdist worker's sweeps have trials of the same names)."""
    found = set()
    for process in psutil.process_iter():
        try:
            cmdline = process.cmdline()
            if cmdline and cmdline[0].startswith("ray::") and cmdline[0][5:].strip() in names:
                if process.environ().get("RAY_AUTH_TOKEN_PATH") == token_path:
                    found.add(cmdline[0][5:].strip())
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_status_of_a_running_12_trial_sweep_then_of_its_killed_driver(tmp_path, sweep_env):
    """A real sweep in a subprocess on the session's shared Ray; `--status` from other processes while it runs
    and after a SIGKILL."""
    name = "live"
    experiment = tmp_path / name
    driver = subprocess.Popen(
        [
            sys.executable,
            "sweeps/noise_grid.py",
            "--smoke-test",
            "--epochs",
            "40",
            "--no-report",
            "--storage-path",
            str(tmp_path),
            "--name",
            name,
            "--quiet",
        ],
        cwd=ROOT,
        env={**sweep_env, "RAY_DEDUP_LOGS": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        seen = None

        def a_trial_runs() -> bool:
            nonlocal seen
            if not ((experiment / "raysweep.json").exists() and list(experiment.glob("experiment_state-*.json"))):
                return driver.poll() is not None
            if not (experiment / "driver.json").exists():  # a driver without its record (issue 20 not merged)
                (experiment / "driver.json").write_text(json.dumps(record(driver.pid)))
            seen = status(experiment)
            return (
                seen.returncode == 0 and " 0 running" not in seen.stdout.splitlines()[0]
            ) or driver.poll() is not None

        wait_until(a_trial_runs, 240, every_s=0.5)
        assert seen is not None and " 0 running" not in seen.stdout.splitlines()[0], "no trial ran within 240 s"
        out = seen.stdout.splitlines()
        counts = re.search(
            r"^\[\d+:\d\d:\d\d\] 12 trials: (\d+) running, (\d+) pending, (\d+) finished, (\d+) errored, "
            r"(\d+) diverged",
            out[0],
        )
        assert counts and sum(map(int, counts.groups())) == 12, out
        assert 1 <= int(counts[1]) <= 2  # 2 CPUs, 1 per trial
        running = [line.split()[0] for line in out[1:] if re.match(r"  \S+ +epoch \d+/40 ", line)]
        assert len(running) == int(counts[1]) and all(n.startswith(("sym_", "asym_")) for n in running), out
        assert any(line.startswith(f"driver: alive on {socket.gethostname()}, pid {driver.pid}") for line in out), out
        # `ps` names the trials: some running trial's worker is titled ray::<its name>.
        trial_names = {p.name for p in experiment.iterdir() if p.is_dir()}
        token_path = sweep_env["RAY_AUTH_TOKEN_PATH"]
        assert wait_until(lambda: titled(trial_names, token_path), 60), "no process titled ray::<trial name>"

        os.killpg(driver.pid, signal.SIGKILL)  # the driver and what it started (its trials end with it)
        driver.wait(30)
        after = status(experiment)
        assert after.returncode == 1, after.stdout + after.stderr
        assert "driver: gone (was on" in after.stdout and "--resume`" in after.stdout, after.stdout
        assert "noise_grid.py --smoke-test --epochs 40" in after.stdout
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
