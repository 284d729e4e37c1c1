"""Connecting to clusters: fast one-line errors, token authentication, and a real two-raylet cluster.

The cluster test runs on the session's two `ray start --block` nodes (`two_raylets` in tests/conftest.py,
shared with tests/clusters/test_s3.py; tests/helpers/ray_cluster.py's `TwoRaylets`): a head
that turns token authentication on by itself (a token exists in its HOME, RAY_AUTH_MODE unset, as
on a user's machine after any local `ray.init`) and a second node on 127.0.0.2 that joins with
RAY_AUTH_MODE=token. The sweep connects with an explicit HOST:PORT and no RAY_AUTH_MODE.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.engine.cluster import ray_start
from tests.helpers import ray_cluster

pytestmark = pytest.mark.usefixtures("ray_auth_restored")  # each test leaves Ray's auth mode as it found it

ROOT = Path(__file__).resolve().parents[2]
WORKER_IP = "127.0.0.2"  # loopback too: the second node's trials are told apart by their node_ip


def sweep(address: str, storage: Path, name: str, env: dict, *extra: str, epochs: int = 2) -> list[str]:
    return [
        sys.executable,
        "sweeps/noise_grid.py",
        "--address",
        address,
        "--storage-path",
        str(storage),
        "--name",
        name,
        "--storage-is-shared",
        "--noise-types",
        "sym",
        "--noise-rates",
        "0.2,0.4,0.6",
        "--epochs",
        str(epochs),
        "--gpus-per-trial",
        "0",
        "--cpus-per-trial",
        "1",
        "--max-failures",
        "3",
        "--quiet",
        "--no-report",
        *extra,
    ]


def trial_rows(experiment: Path) -> dict[str, list[dict]]:
    """Result rows per trial folder (trial name -> rows), from the trials' result.json files."""
    rows = {}
    for trial in sorted(p for p in experiment.iterdir() if (p / "result.json").exists()):
        text = (trial / "result.json").read_text().strip()
        rows[trial.name] = [json.loads(line) for line in text.splitlines()] if text else []
    return rows


@pytest.mark.slow
def test_sweep_on_two_raylets_spreads_and_survives_losing_one(two_raylets, tmp_path):
    """Head + second node (1 CPU each, so 1-CPU trials must spread), token auth, explicit address.

    A driver without the token is refused, and one whose --storage-path is a local folder without
    --storage-is-shared (the second node could not reach it). Then one sweep of three cells: a trial trains
    on the second node (its rows carry that node's IP), then that node's raylet is SIGKILLed; Tune retries the
    trial on the head from its checkpoint in the shared folder and the sweep ends with every cell done once,
    exit 0. (Three cells, not two: trial actors are reused, so with
    two short trials the head could finish both before the second node's actor has started.)
    """
    env, address = two_raylets.env, two_raylets.address
    assert two_raylets.worker_ip == WORKER_IP
    ips = ray_cluster.alive_nodes(address, env)
    assert len(ips) == 2 and WORKER_IP in ips
    head_ip = next(ip for ip in ips if ip != WORKER_IP)

    # Without the token, the driver is refused in one line, exit 2, nothing written.
    stranger = {**env, "HOME": str(tmp_path / "stranger")}
    proc = subprocess.run(
        sweep(address, tmp_path / "refused", "refused", stranger),
        cwd=ROOT,
        env=stranger,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: --address={address}: the Ray cluster refused this driver's authentication "
        "(no token in RAY_AUTH_TOKEN, "
        f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token here); {ray_start.TOKEN_HELP}"
    ]
    assert not (tmp_path / "refused").exists()

    # A local folder on a two-node cluster, not vouched for with --storage-is-shared: refused before any trial.
    local = [arg for arg in sweep(address, tmp_path / "local", "local", env) if arg != "--storage-is-shared"]
    proc = subprocess.run(local, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"--storage-path={tmp_path / 'local'} is on a local file system" in proc.stderr, proc.stderr[-2000:]
    assert "but the cluster has 2 nodes" in proc.stderr and "pass --storage-is-shared" in proc.stderr
    assert not list((tmp_path / "local").glob("*/*/result.json"))  # no trial ran

    # With the token in HOME and RAY_AUTH_MODE unset, the sweep connects; kill the second node mid-trial.
    experiment = tmp_path / "runs" / "two_nodes"
    epochs = 40

    def trial_on_worker():
        if not experiment.is_dir():
            return None
        for error in experiment.glob("*/error.txt"):  # a trial that failed there: say why at once
            if f"ip={WORKER_IP}" in (text := error.read_text()):
                raise AssertionError(f"a trial failed on the second node: {text.strip().splitlines()[-1]}")
        return next(
            (
                name
                for name, r in trial_rows(experiment).items()
                if r and r[-1]["node_ip"] == WORKER_IP and r[-1]["epoch"] < epochs - 5
            ),
            None,
        )

    victim, code, output = ray_cluster.kill_node_under_a_trial(
        sweep(address, tmp_path / "runs", "two_nodes", env, epochs=epochs),
        env,
        ROOT,
        tmp_path / "sweep.out",
        two_raylets.nodes[1],
        trial_on_worker,
    )
    assert code == 0, output[-4000:]
    rows = trial_rows(experiment)
    assert sorted(rows) == [f"sym_{r}_seed0" for r in ("0.2", "0.4", "0.6")]  # each cell once: no second folder
    assert {row["node_ip"] for r in rows.values() for row in r} == {head_ip, WORKER_IP}  # both nodes trained
    assert rows[victim][0]["node_ip"] == WORKER_IP
    for name, r in rows.items():
        assert r[-1]["epoch"] == epochs and r[-1]["node_ip"] == head_ip, (name, r[-1])  # finished on the head
    assert "3 finished, 0 errored" in output
