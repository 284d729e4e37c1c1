"""The documented SLURM recipe (docs/slurm.sbatch, the file itself) run with `sbatch --wait` on a real
one-node SLURM (tests/helpers/slurm_cluster.py), shortened to a smoke grid by its own arguments.

Where SLURM cannot run (no root, packages missing) the test skips and says why; in CI (`CI=true`,
where .ci/run installs slurm-wlm and munge) it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import slurm_cluster
from tests.helpers.processes import wait_for
from tests.helpers.ray_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "slurm.sbatch"


@pytest.fixture
def slurm(tmp_path):
    """A one-node SLURM with this machine's CPUs, or a skip (a failure in CI) saying why there is none."""
    reason = slurm_cluster.missing_reason()
    if reason and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the SLURM test: {reason}")
    if reason:
        pytest.skip(reason)
    with slurm_cluster.one_node_slurm(tmp_path / "slurm", cpus=os.cpu_count() or 2) as env:
        yield env


@pytest.mark.slow
def test_documented_sbatch_recipe_runs_a_smoke_grid_and_its_ray_ends_with_the_job(slurm, tmp_path):
    """sbatch --wait of docs/slurm.sbatch: a Ray head in an srun step, the grid's driver joined to it, the
    trials' results in $HOME/runs, and no process of the job left once sbatch returns. The smallest grid that shows
    it: 1 trial of 1 epoch (a second trial proved nothing more and cost its CPU on a 2-core machine)."""
    home, submit = tmp_path / "home", tmp_path / "submit"
    submit.mkdir()
    home.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="rs-ray-")  # short (Unix socket paths) and this test's own ray_current_cluster
    env = {
        **{k: v for k, v in slurm.items() if not k.startswith(("RAY_", "SLURM_JOB"))},
        "SLURM_CONF": slurm["SLURM_CONF"],
        "HOME": str(home),  # the recipe's token (~/.ray/auth_token) and storage ($HOME/runs)
        "RAY_TMPDIR": ray_tmp,
        "RAY_PORT": str(free_port()),
        "RAY_DASHBOARD_PORT": str(free_port()),  # 8265 may be another Ray's dashboard on this machine
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{slurm['PATH']}",  # `ray` and `raysweep` of this venv
    }
    cpus = os.cpu_count() or 2
    log = submit / "job.out"
    job = None
    try:
        proc = subprocess.run(
            [slurm_cluster.program("sbatch"), "--parsable", "--wait", "--nodes=1", f"--cpus-per-task={cpus}"]
            + ["--gpus-per-task=0", f"--output={log}", str(RECIPE), "--smoke-test", "--seeds", "1"]
            + ["--noise-types", "sym", "--noise-rates", "0.5", "--epochs", "1", "--quiet"],  # 1 trial
            cwd=submit,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
        )
        job = proc.stdout.strip().split(";")[0]
        output = log.read_text() if log.exists() else ""
        assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{output[-4000:]}"
        assert "joined the running cluster at" in output, output[-3000:]  # the recipe's head, not a private Ray
        experiment = home / "runs" / "noise_grid"
        rows = [json.loads(line) for line in (experiment / "sym_0.5_seed0" / "result.json").read_text().splitlines()]
        assert [row["training_iteration"] for row in rows] == [1]
        assert 0 < rows[-1]["val/acc"] <= 1
        assert "sweep finished: 1 trials: 0 running, 0 pending, 1 finished, 0 errored" in output, output[-3000:]
        wait_for(lambda: not slurm_cluster.job_processes(job), 60, f"job {job}'s processes to end")
    finally:
        for pid in slurm_cluster.job_processes(job) if job else []:  # only after a failure: the job's own, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
