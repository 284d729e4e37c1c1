"""Monitoring: console progress, per-trial log lines, sweeps as Ray jobs, the dashboard in a browser."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def ray_head():
    """A separate Ray head (token auth, non-default ports, its own temp dir) as a subprocess.

    Its own temp dir keeps it out of /tmp/ray/ray_current_cluster, so no `ray.init()` elsewhere
    on the machine connects to it; it is stopped by signalling the `ray start --block` process we
    started (not `ray stop`, which would stop every Ray on the machine).
    Yields (dashboard URL, token, environment of the head).
    """
    gcs, dashboard, client, agent_http, agent_grpc, metrics, runtime_env = free_ports(7)
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Unix socket paths are limited to 107 bytes
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }  # `python` = this venv's
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{dashboard}", token, env
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` and the processes it started
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)  # a graceful stop takes ~30 s on 2 busy cores
            head.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_sweep_submitted_as_ray_job_succeeds_with_best_run_table_in_its_logs(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    url, token, _ = ray_head
    deadline = time.monotonic() + 240
    while True:  # the head's dashboard, then its job agent, take a while to come up
        try:
            client = JobSubmissionClient(url, headers={"Authorization": f"Bearer {token}"})
            job_id = client.submit_job(
                entrypoint=f"python sweeps/noise_grid.py --smoke-test --noise-rates 0.5 --noise-types sym "
                f"--storage-path {tmp_path} --progress-every 1",
                runtime_env={"working_dir": str(ROOT), "excludes": [".venv", "runs", "*.png"]},
            )
            break
        except (ConnectionError, RuntimeError):  # RuntimeError: "No available agent to submit job"
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    ended = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    assert wait_until(lambda: client.get_job_status(job_id) in ended, deadline - time.monotonic(), every_s=2), (
        client.get_job_logs(job_id)[-3000:]
    )
    status = client.get_job_status(job_id)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    # The table, laid out as the grid: one noise rate (row) x one noise type (column), one seed.
    assert re.search(r"^noise_rate\s+sym\s*$", logs, re.M), logs[-3000:]
    assert re.search(r"^0\.5\s+\d+\.\d\d \(1\)\s*$", logs, re.M), logs[-3000:]  # ... and its cell
    assert "dashboard: http://" in logs
    assert re.search(
        r"\] sweep finished: 1 trials: 0 running, 0 pending, 1 finished, 0 errored, 0 diverged "
        r"\| best val/acc \d+\.\d\d% \(sym_0\.5_seed0\) \| epochs 2/2",
        logs,
    ), logs[-3000:]
    trial = tmp_path / "noise_grid" / "sym_0.5_seed0"
    assert re.search(r"sym_0\.5_seed0:INFO \| \[CPU \| pid \d+\] Epoch \[2/2\]", (trial / "stdout").read_text())
    assert (trial / "stderr").exists() and list(trial.glob("events.out.tfevents.*"))


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def headless_chromium(*flags: str, profile: Path) -> subprocess.CompletedProcess:
    """One run of headless Chromium (no sandbox: CI containers run as root) with a throwaway profile."""
    return subprocess.run(
        [
            find_chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,1330",
            "--virtual-time-budget=15000",
            *flags,
        ],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.browser
def test_dashboard_listens_on_loopback_only_and_shows_the_cluster_during_a_sweep_in_headless_chromium(tmp_path):
    """Run a sweep on the local Ray it starts: its dashboard port is bound to 127.0.0.1 only; open the dashboard's
    Cluster view in headless Chromium, find a running trial's name among the workers (their process titles,
    `ray::<trial name>`) and keep a screenshot. Without Chromium (never in CI: .ci/run installs it) the browser
    part is skipped after the loopback check.

    The screenshot goes to $RAYSWEEP_SCREENSHOT when set (docs/dashboard.png was made so), else tmp_path.
    """
    shot = Path(os.environ.get("RAYSWEEP_SCREENSHOT", tmp_path / "dashboard.png"))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # a local, 127.0.0.1-only dashboard for the browser
    env.pop("RAY_ADDRESS", None)
    sweep = subprocess.Popen(
        [
            sys.executable,
            "sweeps/noise_grid.py",
            "--noise-rates",
            "0.25,0.5",
            "--noise-types",
            "sym",
            "--epochs",
            "400",
            "--cpus-per-trial",
            "0.5",
            "--storage-path",
            str(tmp_path),
            "--progress-every",
            "2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url, seen = None, []
        for line in sweep.stdout:  # wait for the dashboard URL, then for both trials to run
            seen.append(line)
            url = url or (m.group(1) if (m := re.search(r"dashboard: (http://\S+)", line)) else None)
            if url and "2 running" in line:
                break
        assert url, "".join(seen)[-3000:]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        connections = psutil.net_connections("inet")
        listening = {c.laddr.ip for c in connections if c.status == "LISTEN" and c.laddr.port == port}
        assert listening == {"127.0.0.1"}, (url, listening)
        other_ip = socket.gethostbyname(socket.gethostname())
        if not other_ip.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((other_ip, port), timeout=2)
        if find_chromium() is None:
            assert os.environ.get("CI") != "true", "CI=true but no chromium: .ci/run installs Debian's chromium"
            pytest.skip("needs headless Chromium (Debian: apt-get install chromium); the loopback check passed")
        profile, names = tmp_path / "chromium-profile", ("sym_0.25_seed0", "sym_0.5_seed0")
        # The dashboard samples each worker's title every few seconds: load the page until a trial's shows.
        page = ""

        def a_trial_titled() -> bool:
            nonlocal page
            page = headless_chromium("--dump-dom", f"{url}/#/cluster", profile=profile).stdout
            return any(f"ray::{n}" in page for n in names)

        assert wait_until(a_trial_titled, 180, every_s=0), re.findall(r"ray::[\w.]+", page)
        headless_chromium(f"--screenshot={shot}", f"{url}/#/cluster", profile=profile)
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    finally:
        os.killpg(sweep.pid, signal.SIGINT)
        try:
            sweep.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(sweep.pid, signal.SIGKILL)
