"""Connecting to clusters: fast one-line errors, token authentication, and a real two-raylet cluster.

The cluster test runs on the session's two `ray start --block` nodes (`two_raylets` in tests/conftest.py,
shared with tests/clusters/test_s3.py; tests/helpers/ray_cluster.py's `TwoRaylets`): a head
that turns token authentication on by itself (a token exists in its HOME, RAY_AUTH_MODE unset, as
on a user's machine after any local `ray.init`) and a second node on 127.0.0.2 that joins with
RAY_AUTH_MODE=token. The sweep connects with an explicit HOST:PORT and no RAY_AUTH_MODE.
"""

from __future__ import annotations

import os

import pytest

from sweeps.engine.cluster import ray_start
from sweeps.engine.flags import UsageError
from tests.helpers import ray_cluster
from trainables import ray_private

pytestmark = pytest.mark.usefixtures("ray_auth_restored")  # each test leaves Ray's auth mode as it found it


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
