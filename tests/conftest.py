"""Shared fixtures: a tiny trial config, an in-process Ray (4 logical GPUs), a `ray start --head` for sweeps,
and the README's smoke grid run once on it."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


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
    on a GPU box (the failure gate's start at 8 slots, tests/test_gate_slots.py); yields the environment
    that joins it. Started only by the tests that ask for it."""
    from tests.ray_cluster import shared_head

    with shared_head(tmp_path_factory.mktemp("ray_8_slots"), num_cpus=8, num_gpus=4) as env:
        yield env


@pytest.fixture
def sweep_env(shared_ray_head) -> dict:
    """The environment of a sweep subprocess that joins the session's shared Ray (`shared_ray_head`): pass it
    as `subprocess.run(..., env=sweep_env)`. A copy: a test may add to it."""
    return dict(shared_ray_head)


@pytest.fixture(scope="session")
def smoke_grid(shared_ray_head, tmp_path_factory) -> types.SimpleNamespace:
    """The README's quick start `python sweeps/noise_grid.py --smoke-test`, run once per session as written, in a
    scratch folder (its storage is `./runs`), on the shared Ray: tests/test_sweeps.py checks its trials and
    tests/test_docs_commands.py analyses them, without a second run of the same 12 trials. Just before it,
    the same command with `--estimate --json` (tests/test_estimate_sweeps.py sets it against the run).

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
