"""`make test` runs two pytest-xdist workers (`-n 2 --dist loadgroup`): the tests that share one session's
state (the README's smoke grid, the S3 server with its Ray head and the two-raylet cluster) run on one
worker, and each worker keeps its private Rays in its own short RAY_TMPDIR (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist", reason="needs pytest-xdist (the dev extra)")

ROOT = Path(__file__).resolve().parents[2]

# A session fixture's users, run under this repository's conftest: the fixtures are stand-ins here.
SUITE = """
import json, os, pytest
from pathlib import Path

@pytest.fixture(scope="session")
def smoke_grid():
    return "the quick start"

@pytest.fixture(scope="session")
def s3_server():
    return "http://127.0.0.1:1"

@pytest.fixture
def bucket(s3_server):  # a user of s3_server one fixture away
    return s3_server

def record(name):
    seen = {"worker": os.environ["PYTEST_XDIST_WORKER"], "ray_tmpdir": os.environ["RAY_TMPDIR"]}
    (Path(os.environ["SEEN"]) / (name + ".json")).write_text(json.dumps(seen))

@pytest.mark.parametrize("i", range(5))
def test_grid(smoke_grid, i):
    record(f"grid{i}")

@pytest.mark.parametrize("i", range(5))
def test_s3(bucket, i):
    record(f"s3{i}")

@pytest.mark.parametrize("i", range(5))
def test_free(i):
    record(f"free{i}")
"""


def test_session_state_users_share_a_worker_and_each_worker_has_its_own_ray_tmpdir(tmp_path):
    suite, seen = tmp_path / "suite", tmp_path / "seen"
    suite.mkdir()
    seen.mkdir()
    (suite / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (suite / "test_users.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEEN": str(seen)}
    env.pop("RAY_TMPDIR", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {p.stem: json.loads(p.read_text()) for p in seen.glob("*.json")}
    assert len(runs) == 15
    workers = lambda prefix: {r["worker"] for name, r in runs.items() if name.startswith(prefix)}  # noqa: E731
    assert len(workers("grid")) == 1 and len(workers("s3")) == 1, runs  # one worker per group
    tmpdirs = {r["worker"]: r["ray_tmpdir"] for r in runs.values()}
    assert len(tmpdirs) == 2 and len(set(tmpdirs.values())) == 2, tmpdirs  # both workers ran, each its own
    for worker, folder in tmpdirs.items():
        assert Path(folder).name.startswith(f"rs-{worker}-")
        # Ray's longest Unix socket path under it stays within the 107 bytes a socket path may have
        assert len(f"{folder}/ray/session_2026-11-25_21-15-27_123456_1234567/sockets/plasma_store") <= 107
        assert not Path(folder).exists()  # removed when its worker ended
