"""Which Ray a sweep uses, said in its first lines: a `ray start` cluster on this machine is joined,
`--address local` starts a private Ray anyway."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import ray_cluster

pytestmark = pytest.mark.usefixtures("ray_auth_restored")

ROOT = Path(__file__).resolve().parents[2]


def ray_line(output: str) -> str:
    return next(
        line for line in output.splitlines() if re.match(r"(started a local Ray|joined the running cluster) ", line)
    )


@pytest.mark.slow
def test_a_local_ray_start_cluster_is_joined_and_address_local_starts_a_private_ray(tmp_path, sweep_env):
    """The session's shared `ray start --head` (tests/conftest.py), as a user on this machine has it: its token in
    ~/.ray/auth_token, RAY_ADDRESS and RAY_AUTH_MODE unset."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    shutil.copy(sweep_env["RAY_AUTH_TOKEN_PATH"], home / ".ray" / "auth_token")
    unset = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    env = {k: v for k, v in sweep_env.items() if k not in unset} | {"HOME": str(home), "PYTHONUNBUFFERED": "1"}
    head_temp_dir = ray_cluster.temp_dir_of(sweep_env["RAY_ADDRESS"])
    # The sweep looks for `ray start`'s record where Ray does (<RAY_TMPDIR>/ray/ray_current_cluster): a
    # private RAY_TMPDIR holding this head's record, so other Rays on this machine are not involved.
    tmp = Path(tempfile.mkdtemp(prefix="rs-tmp-"))
    try:
        (tmp / "ray").mkdir()
        shutil.copy(head_temp_dir / "ray_current_cluster", tmp / "ray" / "ray_current_cluster")
        gcs = (tmp / "ray" / "ray_current_cluster").read_text().strip()
        env = {**env, "RAY_TMPDIR": str(tmp)}
        argv = [
            sys.executable,
            "sweeps/noise_grid.py",
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.2",
            "--epochs",
            "1",
            "--gpus-per-trial",
            "0",
            "--storage-path",
            str(tmp_path / "runs"),
            "--quiet",
            "--no-report",
        ]
        joined = subprocess.run(
            [*argv, "--name", "joined"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert joined.returncode == 0, joined.stdout[-3000:] + joined.stderr[-3000:]
        line = ray_line(joined.stdout)
        assert re.match(
            rf"joined the running cluster at {re.escape(gcs)} with \d+ CPUs? and 0 GPUs \(1 node\); ", line
        ), line
        private = subprocess.run(
            [*argv, "--name", "private", "--address", "local"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert private.returncode == 0, private.stdout[-3000:] + private.stderr[-3000:]
        line = ray_line(private.stdout)
        assert re.match(
            r"started a local Ray with \d+ CPUs? and 0 GPUs in \d+\.\d s; dashboard: http://127\.0\.0\.1:\d+$", line
        ), line
        assert "joined" not in private.stdout
        # Quiet console: our line instead of Tune's configuration box and its TensorBoard hint into Ray's
        # temp folder, and no token-auth WARNING (the token exists: nothing to say about it).
        both = private.stdout + private.stderr
        experiment = tmp_path / "runs" / "private"
        assert f"results and TensorBoard files: {experiment} (tensorboard --logdir {experiment})" in private.stdout
        assert "Configuration for experiment" not in both and "To visualize your results with TensorBoard" not in both
        assert "Token authentication" not in both and "token authentication is on" not in both
        assert list(experiment.glob("*/events.out.tfevents.*"))  # where the line says
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_new_local_token_is_one_informative_line(tmp_path):
    """No token yet, RAY_AUTH_MODE unset (a new user): Ray's WARNING and INFO lines about token
    authentication become one line of ours."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    }
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    code = (
        "from sweeps.engine.cluster.ray_start import init_ray; import ray; "
        "init_ray('local', '127.0.0.1'); ray.shutdown()"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "token" in line.lower()]
    assert lines == [
        f"token authentication is on (Ray's default for a local Ray): a new token was saved to "
        f"{tmp_path / 'home' / '.ray' / 'auth_token'}"
    ], lines
