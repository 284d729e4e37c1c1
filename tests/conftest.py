"""Shared fixtures: a tiny trial config, an in-process Ray (4 logical GPUs), a `ray start --head` for sweeps,
the README's smoke grid run once on it, an S3 server (moto) with a head whose workers reach it, and a
two-raylet cluster.

Each is started once per pytest process: under pytest-xdist (`make test` runs two workers) once per
worker, each with its own ports, temp dirs and Ray temp dir (`RAY_TMPDIR`). The tests that share one
session's state are kept on one worker (`--dist loadgroup`, groups set in `pytest_collection_modifyitems`).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under pytest-xdist, else None
WORKER_RAY_TMPDIR = None
if XDIST_WORKER and "RAY_TMPDIR" not in os.environ:
    # Each worker's private Rays (`ray_gpus`, sweeps with `--address local`) keep their session folders,
    # `session_latest` and `ray_current_cluster` apart from the other worker's. A short folder where Ray's
    # own would be (TMPDIR on Linux, else /tmp): Unix socket paths under it must stay within 107 bytes.
    WORKER_RAY_TMPDIR = tempfile.mkdtemp(
        prefix=f"rs-{XDIST_WORKER}-", dir=None if sys.platform.startswith("linux") else "/tmp"
    )
    os.environ["RAY_TMPDIR"] = WORKER_RAY_TMPDIR

# Tests whose fixtures are one session's state run on one worker under `--dist loadgroup`: the first
# fixture of a test found here names its group (a test has one group).
SESSION_GROUPS = {
    "s3_server": "s3",  # the S3 server, its Ray head and the two-raylet cluster whose nodes reach it
    "smoke_grid": "smoke_grid",  # the README's quick start, run once
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = next((g for name, g in SESSION_GROUPS.items() if name in item.fixturenames), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # Tests marked `gpu` run where torch sees a CUDA GPU (`make gpu-check`), and are skipped elsewhere.
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_tests and not _cuda_available():
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (make gpu-check runs it on one)"))


def _cuda_available() -> bool:
    import torch  # only when a `gpu` test was collected

    return torch.cuda.is_available()


def pytest_unconfigure(config):
    if WORKER_RAY_TMPDIR:
        shutil.rmtree(WORKER_RAY_TMPDIR, ignore_errors=True)


@pytest.fixture
def tiny_config(tmp_path) -> dict:
    """A trial config that trains in well under a second on one CPU core."""
    return {"dataset": "digits", "model": "mlp", "epochs": 3, "batch_size": 128, "lr": 0.05, "seed": 0}


@pytest.fixture(scope="session")
def ray_gpus():
    """Ray with 2 CPUs and 4 logical GPUs: Ray sets CUDA_VISIBLE_DEVICES as on a real 4-GPU box."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def shared_ray_head(tmp_path_factory):
    """The session's shared `ray start --head` (`shared_head`); yields the environment that joins it."""
    from tests.ray_cluster import shared_head

    with shared_head(tmp_path_factory.mktemp("ray_head")) as env:
        yield env


@pytest.fixture(scope="session")
def eight_slot_head(tmp_path_factory):
    """A second `ray start --head`, with 8 logical CPUs and 4 logical GPUs: 8 slots at 0.5 GPU per trial, as
    on a GPU box (the failure gate's start at 8 slots, tests/clusters/test_gate_slots.py); yields the environment
    that joins it. Started only by the tests that ask for it."""
    from tests.ray_cluster import shared_head

    with shared_head(tmp_path_factory.mktemp("ray_8_slots"), num_cpus=8, num_gpus=4) as env:
        yield env


@pytest.fixture
def receiver():
    """A loopback HTTP server keeping each --notify message POSTed to it (`receiver.url`, apprise's json:// target;
    `receiver.messages`: the JSON bodies): `tests/unit/test_research_record.py:Receiver`."""
    from tests.unit.test_research_record import Receiver

    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def sweep_env(shared_ray_head) -> dict:
    """The environment of a sweep subprocess that joins the session's shared Ray (`shared_ray_head`): pass it
    as `subprocess.run(..., env=sweep_env)`. A copy: a test may add to it."""
    return dict(shared_ray_head)


@pytest.fixture(scope="session")
def smoke_grid(shared_ray_head, tmp_path_factory) -> types.SimpleNamespace:
    """The README's quick start `python sweeps/noise_grid.py --smoke-test`, run once per session as written, in a
    scratch folder (its storage is `./runs`), on the shared Ray: tests/sweeps/test_sweeps.py checks its trials and
    tests/sweeps/test_docs_commands.py analyses them, without a second run of the same 12 trials. Just before it,
    the same command with `--estimate --json` (tests/sweeps/test_estimate_sweeps.py sets it against the run).

    Returns:
        `command` (the text run), `folder`, `experiment` (folder/runs/noise_grid), `proc` (its
        CompletedProcess, returncode unchecked: each test asserts it, with the output), `elapsed_s`
        (its wall time, start to exit) and `estimated` (the estimate's CompletedProcess).
    """
    command = "python sweeps/noise_grid.py --smoke-test"
    folder = tmp_path_factory.mktemp("quick_start")
    root = Path(__file__).resolve().parents[1]
    argv = shlex.split(command)
    env = {**shared_ray_head, "PYTHONPATH": str(root), "RAY_DEDUP_LOGS": "0"}
    run = functools.partial(subprocess.run, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    estimated = run([sys.executable, str(root / argv[1]), *argv[2:], "--estimate", "--json"])
    started = time.monotonic()
    proc = run([sys.executable, str(root / argv[1]), *argv[2:]])
    elapsed_s = time.monotonic() - started
    experiment = folder / "runs" / "noise_grid"
    return types.SimpleNamespace(
        command=command, folder=folder, experiment=experiment, proc=proc, elapsed_s=elapsed_s, estimated=estimated
    )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The session's S3 server on loopback (moto, `tests/s3_server.py`); yields its endpoint URL."""
    from tests.s3_server import moto_server

    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_ray(s3_server, tmp_path_factory):
    """A `ray start --head` as `shared_ray_head`, whose workers reach the session's S3 server (its AWS_*
    environment); yields the environment that joins it (`RAY_ADDRESS` is its `HOST:PORT`)."""
    from tests.ray_cluster import shared_head
    from tests.s3_server import aws_env

    with shared_head(tmp_path_factory.mktemp("s3_ray"), aws_env(s3_server)) as env:
        yield env


@pytest.fixture(scope="session")
def two_raylet_cluster(s3_server, tmp_path_factory):
    """The session's two-raylet cluster (`tests/ray_cluster.py`'s `TwoRaylets`): a head and a second node on
    127.0.0.2, 1 CPU each, token authentication from their HOME, their workers reaching the session's S3
    server. Use `two_raylets`, which starts the second node again after a test killed it."""
    from tests.ray_cluster import TwoRaylets, token_env
    from tests.s3_server import aws_env

    folder = tmp_path_factory.mktemp("two_raylets")
    env = {**token_env(folder / "home"), **aws_env(s3_server), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cluster = TwoRaylets(folder, env, worker_ip="127.0.0.2")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def two_raylets(two_raylet_cluster):
    """The session's two-raylet cluster with both nodes up (`TwoRaylets`: `.address`, `.env`, `.nodes`,
    `.worker_ip`); a test may kill the second node's raylet."""
    two_raylet_cluster.second_node_up()
    return two_raylet_cluster


# The docs' commands (tests/unit/test_docs_commands.py parses them, tests/sweeps/test_docs_commands.py runs some)
@pytest.fixture
def python_on_path(tmp_path, monkeypatch):
    """`python` on PATH is this interpreter: the docs' `-- python train.py` must find a program, also in CI."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


@pytest.fixture
def scratch(tmp_path, python_on_path, monkeypatch):
    """A folder standing in for a user's project: train.py printing the docs' metric shapes, configs/fast.yaml."""
    work = tmp_path / "project"
    (work / "configs").mkdir(parents=True)
    (work / "configs" / "fast.yaml").write_text("lr: 0.1\n")
    (work / "train.py").write_text(
        "import sys\n"
        "print(f'config {sys.argv[1]}')\n"
        "for epoch in (1, 2):\n"
        "    print(f'epoch={epoch} loss={1 / epoch:.2f} val_acc={0.5 + epoch / 10:.2f}')\n"
        "print('* accuracy: 97.0%')\n"
    )
    monkeypatch.chdir(work)
    return work
