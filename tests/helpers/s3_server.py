"""An S3 server on loopback for tests: moto's server as a subprocess the test session owns.

pyarrow (and so Ray Tune), boto3 and Ray's workers reach it through AWS_ENDPOINT_URL with dummy
credentials (`aws_env`). `tests/conftest.py`'s session fixture `s3_server` starts one per pytest
process (each pytest-xdist worker has its own), for every test that stores on `s3://`.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers.processes import wait_for
from tests.helpers.ray_cluster import free_port


def aws_env(endpoint: str) -> dict:
    """Dummy credentials and the endpoint of the S3 server: what pyarrow, boto3 and Ray's workers need."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def moto_server(folder: Path):
    """`python -m moto.server` on 127.0.0.1 and a free port, its log in `folder`; stopped (SIGTERM, then
    SIGKILL after 20 s) on exit.
    Yields:
        Its endpoint URL, `http://127.0.0.1:PORT`.
    """
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "moto.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: _answers(port) or server.poll() is not None, 60, "moto's server")
            assert server.poll() is None, log_path.read_text()[-2000:]
            yield f"http://127.0.0.1:{port}"
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=20)
