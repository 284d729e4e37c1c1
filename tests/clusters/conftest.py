"""The clusters folder's own fixtures: a second `ray start --head` of 8 slots (for its one module), moto's S3
server with a head whose workers reach it, and a two-raylet cluster (for the session). Each starts on the first
test that asks for it, once per pytest worker; the S3 server's users share one worker, the 8-slot head's too
(tests/conftest.py's `SESSION_GROUPS`)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def eight_slot_head(tmp_path_factory):
    """A second `ray start --head`, with 8 logical CPUs and 4 logical GPUs: 8 slots at 0.5 GPU per trial, as
    on a GPU box (the failure gate's start at 8 slots, tests/clusters/test_gate_slots.py); yields the environment
    that joins it. Started only by the tests that ask for it, all in that module and run one after another on
    one pytest worker (`SESSION_GROUPS`): stopped after them, not kept idle until the session ends."""
    from tests.helpers.ray_cluster import shared_head

    with shared_head(tmp_path_factory.mktemp("ray_8_slots"), num_cpus=8, num_gpus=4) as env:
        yield env


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The session's S3 server on loopback (moto, `tests/helpers/s3_server.py`); yields its endpoint URL."""
    from tests.helpers.s3_server import moto_server

    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_ray(s3_server, tmp_path_factory):
    """A `ray start --head` as `shared_ray_head`, whose workers reach the session's S3 server (its AWS_*
    environment); yields the environment that joins it (`RAY_ADDRESS` is its `HOST:PORT`)."""
    from tests.helpers.ray_cluster import shared_head
    from tests.helpers.s3_server import aws_env

    with shared_head(tmp_path_factory.mktemp("s3_ray"), aws_env(s3_server)) as env:
        yield env


@pytest.fixture(scope="session")
def two_raylet_cluster(s3_server, tmp_path_factory):
    """The session's two-raylet cluster (`tests/helpers/ray_cluster.py`'s `TwoRaylets`): a head and a second node on
    127.0.0.2, 1 CPU each, token authentication from their HOME, their workers reaching the session's S3
    server. Use `two_raylets`, which starts the second node again after a test killed it."""
    from tests.helpers.ray_cluster import TwoRaylets, token_env
    from tests.helpers.s3_server import aws_env

    folder = tmp_path_factory.mktemp("two_raylets")
    env = {**token_env(folder / "home"), **aws_env(s3_server), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
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
