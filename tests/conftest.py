"""Shared fixtures: a tiny trial config, an in-process Ray (4 logical GPUs), a `ray start --head` for sweeps."""

from __future__ import annotations

import os

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


@pytest.fixture
def sweep_env(shared_ray_head) -> dict:
    """The environment of a sweep subprocess that joins the session's shared Ray (`shared_ray_head`): pass it
    as `subprocess.run(..., env=sweep_env)`. A copy: a test may add to it."""
    return dict(shared_ray_head)
