"""Shared fixtures: a tiny trial config, and one Ray instance (4 logical GPUs) for the session."""

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
