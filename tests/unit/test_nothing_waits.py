"""Nothing waits for ever (issue 55 item 5): a stopped trial's actor is not kept for reuse, a local
Ray that fails to start is retried once and then one line, a stop ends the whole process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from ray.tune import TuneConfig
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from sweeps.engine.cluster import ray_start
from sweeps.engine.flags import UsageError
from sweeps.engine.run.launch import sweep_tune_config
from trainables.command.watchdog import end_group


def test_no_actor_reuse_with_a_scheduler_that_stops_trials():
    """ASHA's stop leaves the thread running past Tune's 2 s reset timeout: reuse would hold the CPUs."""
    assert sweep_tune_config(TuneConfig(scheduler=ASHAScheduler())).reuse_actors is False
    assert sweep_tune_config(TuneConfig()).reuse_actors is True
    assert sweep_tune_config(TuneConfig(scheduler=FIFOScheduler())).reuse_actors is True


def test_a_local_ray_that_fails_to_start_is_tried_again(monkeypatch, capsys):
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise TimeoutError("Timed out after 30 seconds waiting for the raylet\nmore\nlines")
        return "context"

    monkeypatch.setattr(ray_start.ray, "init", init)
    monkeypatch.setattr(ray_start.ray, "shutdown", lambda: None)
    assert ray_start.start_local_ray(address="local") == "context"
    assert len(calls) == 2
    assert "trying once more" in capsys.readouterr().out


def test_a_local_ray_that_fails_twice_is_one_line(monkeypatch):
    def init(**kwargs):
        raise RuntimeError("Failed to start the GCS\nTraceback line\nanother")

    monkeypatch.setattr(ray_start.ray, "init", init)
    monkeypatch.setattr(ray_start.ray, "shutdown", lambda: None)
    with pytest.raises(UsageError) as error:
        ray_start.start_local_ray(address="local")
    assert str(error.value) == "the local Ray did not start, twice: RuntimeError: Failed to start the GCS"


def test_a_stop_ends_the_processes_that_left_the_group():
    """A launcher's rank in a session of its own (ppid: a member of the group) ends with the group."""
    script = (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        "time.sleep(120)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    children = []
    while time.monotonic() < deadline and not children:
        children = psutil.Process(leader.pid).children()
        time.sleep(0.05)
    assert children, "the rank did not start"
    rank = children[0]
    assert os.getpgid(rank.pid) != leader.pid
    try:
        end_group(leader.pid, grace_period_s=5, reap=leader.poll)
        leader.wait(timeout=10)
        alive = psutil.wait_procs([rank], timeout=10)[1]
        assert not alive, f"rank {rank.pid} outlived the stop"
    finally:
        for process in (leader, rank):
            if (process.poll() is None) if isinstance(process, subprocess.Popen) else process.is_running():
                process.kill()
