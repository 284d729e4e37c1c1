"""Connecting to clusters: fast one-line errors, token authentication, and a real two-raylet cluster.

The cluster test runs on the session's two `ray start --block` nodes (`two_raylets` in tests/conftest.py,
shared with tests/test_s3.py; tests/ray_cluster.py's `TwoRaylets`): a head
that turns token authentication on by itself (a token exists in its HOME, RAY_AUTH_MODE unset, as
on a user's machine after any local `ray.init`) and a second node on 127.0.0.2 that joins with
RAY_AUTH_MODE=token. The sweep connects with an explicit HOST:PORT and no RAY_AUTH_MODE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.engine.cluster import ray_start
from sweeps.engine.flags import UsageError
from tests import ray_cluster
from tests.ray_cluster import ray_auth_restored
from trainables import ray_private

pytestmark = pytest.mark.usefixtures(ray_auth_restored.__name__)  # each test leaves Ray's auth mode as it found it

ROOT = Path(__file__).resolve().parents[1]
WORKER_IP = "127.0.0.2"  # loopback too: the second node's trials are told apart by their node_ip


@pytest.mark.parametrize(
    "address,match",
    [
        ("127.0.0.1", r"--address='127.0.0.1' is not HOST:PORT"),
        ("10.0.0.5:99999", r"--address='10.0.0.5:99999' is not HOST:PORT"),
        ("head.invalid:6379", r"--address=head.invalid:6379: nothing answers at head.invalid:6379 \("),
    ],
)
def test_bad_addresses_are_one_line(address, match):
    with pytest.raises(UsageError, match=match):
        ray_start.connect_checks(address)


def test_nothing_listening_is_refused_with_the_address(capfd):
    port = ray_cluster.free_port()  # bound, then released: nothing listens there
    with pytest.raises(
        UsageError,
        match=rf"--address=127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} "
        rf"\(Connection refused\); start the head there with `ray start --head --port {port}`",
    ):
        ray_start.connect_checks(f"127.0.0.1:{port}")
    assert capfd.readouterr().err == ""  # no retry lines


def test_a_port_that_is_not_a_gcs_is_refused(tmp_path):
    """Something answers (a plain TCP server) but never speaks GCS: given up after the handshake's deadline."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(UsageError, match=rf"127.0.0.1:{port} answers but not as a Ray head's GCS port"):
            ray_start.connect_checks(f"127.0.0.1:{port}", timeout_s=2)


def test_auto_and_client_addresses_are_left_to_ray():
    assert ray_start.split_address("auto") is None and ray_start.split_address("ray://head:10001") is None
    assert ray_start.split_address("[::1]:6379") == ("::1", 6379)


def test_a_token_turns_token_mode_on_unless_a_mode_was_chosen(tmp_path, monkeypatch):
    pytest.importorskip(ray_private.AUTH_LOGGER)  # the module of Ray's token set-up
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert ray_start.use_token_if_available() == "no token" and "RAY_AUTH_MODE" not in os.environ
    token = tmp_path / "elsewhere"
    token.write_text("a" * 32)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert ray_start.use_token_if_available() == "disabled"  # the user's choice stands
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert ray_start.use_token_if_available() == "token" and os.environ["RAY_AUTH_MODE"] == "token"


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

    One sweep of three cells: a trial trains on the second node (its rows carry that node's IP),
    then that node's raylet is SIGKILLed; Tune retries the trial on the head and the sweep ends
    with every cell done once, exit 0. (Three cells, not two: trial actors are reused, so with
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
    assert "3 done, 0 errored" in output
