"""The fixtures every folder may use: an in-process Ray (4 logical GPUs), the session's shared `ray start --head`
that sweep subprocesses join (`sweep_env`), Ray's authentication mode restored after a test, `python` on PATH and
a stand-in user project for the docs' commands, a `--notify` receiver. A folder's own conftest.py holds what only
its tests use (tests/README.md).

Each session fixture is started once per pytest process: under pytest-xdist (`make test` runs two workers) once
per worker, each with its own ports, temp dirs and Ray temp dir (`RAY_TMPDIR`). The tests that share one session's
state are kept on one worker (`--dist loadgroup`, groups set in `pytest_collection_modifyitems`), which also marks
every test outside tests/unit/ `slow` and refuses a unit test that asks for Ray.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from trainables import ray_private

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
    # Started once per worker that asks: apart, each worker would start its own (issue 53).
    "eight_slot_head": "eight_slots",  # the 8-slot `ray start --head` of tests/clusters/test_gate_slots.py
    "plain": "plain_tune",  # tests/analysis/test_analysis_tune.py's Tune run (a module fixture)
}


TESTS = Path(__file__).resolve().parent
UNIT = TESTS / "unit"  # no Ray, no sweep subprocess: `make test-fast`
RAY_FIXTURES = {  # what starts or joins a Ray (the folders' conftest.py): never asked for under tests/unit/
    "ray_gpus",
    "shared_ray_head",
    "sweep_env",
    "smoke_grid",
    "eight_slot_head",
    "s3_ray",
    "two_raylet_cluster",
    "two_raylets",
}


def end_to_end(path) -> bool:
    """Whether the test file at `path` is in an end-to-end folder of this suite (tests/, outside tests/unit/)."""
    parents = Path(path).resolve().parents
    return TESTS in parents and UNIT not in parents


def unit_lane_errors(items) -> list[str]:
    """`nodeid: why` for each test under tests/unit/ that asks for a Ray fixture (`RAY_FIXTURES`) or is marked
    `slow`: the unit lane runs neither Ray nor a sweep."""
    errors = []
    for item in items:
        if UNIT not in Path(item.path).resolve().parents:
            continue
        if ray := sorted(RAY_FIXTURES & set(item.fixturenames)):
            errors.append(f"{item.nodeid}: asks for {', '.join(ray)}")
        if item.get_closest_marker("slow"):
            errors.append(f"{item.nodeid}: marked slow")
    return errors


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    if errors := unit_lane_errors(items):
        raise pytest.UsageError(
            "tests/unit/ runs without Ray (tests/README.md); move these to an end-to-end folder:\n  "
            + "\n  ".join(errors)
        )
    for item in items:
        if end_to_end(item.path):
            item.add_marker(pytest.mark.slow)  # `-m "not slow"` is the unit lane
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


@pytest.fixture(scope="session")
def ray_gpus():
    """Ray with 2 CPUs and 4 logical GPUs: Ray sets CUDA_VISIBLE_DEVICES as on a real 4-GPU box."""
    import ray

    # a loaded machine can miss Ray's fixed 30 s wait for the raylet to register (ray/_private/node.py): once
    for attempt in (1, 2):
        if ray.is_initialized():
            break
        try:
            ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, log_to_driver=False)
            ray_private.stop_log_monitor()  # no driver asks for workers' output; it would tail their logs all session
        except Exception as error:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(error):
                raise
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def shared_ray_head(tmp_path_factory):
    """The session's shared `ray start --head` (`shared_head`); yields the environment that joins it."""
    from tests.helpers.ray_cluster import shared_head

    with shared_head(tmp_path_factory.mktemp("ray_head")) as env:
        yield env


@pytest.fixture
def sweep_env(shared_ray_head) -> dict:
    """The environment of a sweep subprocess that joins the session's shared Ray (`shared_ray_head`): pass it
    as `subprocess.run(..., env=sweep_env)`. A copy: a test may add to it."""
    return dict(shared_ray_head)


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


@pytest.fixture
def ray_auth_restored():
    """Undo what a test's connection checks did to this process's Ray authentication mode.

    `sweeps.engine.cluster.ray_start.use_token_if_available` sets RAY_AUTH_MODE=token and reloads Ray's cached
    config, as a sweep's driver should; in the test process that would outlive the test and make
    a later local `ray.init` use another token than its cluster's.
    """
    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "HOME")
    saved = {k: os.environ.get(k) for k in names}
    yield
    for key, value in saved.items():  # monkeypatch may have restored them already
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        ray_private.reset_auth_config()  # the mode as the restored environment says
    except ImportError:
        return


@pytest.fixture
def receiver():
    """An HTTP server on loopback keeping every JSON body POSTed to it (`--notify`'s json:// target): `.url`,
    `.messages` (tests/helpers/research_record.py's `Receiver`)."""
    from tests.helpers.research_record import Receiver

    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def _no_driver_record_left_over():
    """A sweep's driver record lives in module state (`sweeps.engine.run.sweep_end._DRIVER`, set by
    `watch_driver`); cleared after each test, so no test reads another's (a sweep run in-process left a record
    that a unit test's fake scheduler stops were then written into: a chance CI failure, issue 53)."""
    yield
    module = sys.modules.get("sweeps.engine.run.sweep_end")
    if module is not None:
        module._DRIVER.clear()
