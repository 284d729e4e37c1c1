"""A command trial's working folder is the launch folder's copy in the launch folder's place
(`trainables/command/workdir.py`): relative paths through `..` read and write what they would from the
launch folder, inside the repository and beside it. Repo-like layouts under tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import wait_until
from tests.helpers.repos import make_layout

ROOT = Path(__file__).resolve().parents[2]


def git_status(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout


@pytest.mark.slow
def test_four_trials_read_through_dotdot_keep_their_own_checkpoints_and_leave_the_repo_clean(tmp_path, sweep_env):
    """... and a folder beside the launch folder removed after launch fails none of them (issue 46)."""
    launch = make_layout(tmp_path)
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "sweeps" / "run_command.py"), "--axis", "lr=0.1,0.2", "--seeds", "2"]
    argv += ["--metric", "val_acc", "--storage-path", str(out), "--gpus-per-trial", "0", "--cpus-per-trial", "0.25"]
    argv += ["--quiet", "--no-report", "--", sys.executable, "main.py", "--lr", "{lr}", "--seed", "{seed}"]
    (launch.parent / "other_programs_tmp").mkdir()  # a folder beside the launch folder that no trial reads
    env = {**sweep_env, "PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(argv, cwd=launch, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: list((out / "command" / "code").glob("*/raysweep_code.json")), 300, every_s=0.2)
    (launch.parent / "other_programs_tmp").rmdir()  # gone after launch, before the trials set up
    stdout, stderr = sweep.communicate(timeout=600)
    proc = subprocess.CompletedProcess(argv, sweep.returncode, stdout, stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # every trial ran its command
    line = next(x for x in proc.stdout.splitlines() if x.startswith("code snapshot taken"))
    assert f"own copy of {launch.resolve()}" in line and f"from {tmp_path.resolve()} down to" in line
    trials = sorted(p for p in (out / "command").iterdir() if (p / "result.json").exists())
    assert len(trials) == 4
    for trial in trials:
        config = json.loads((trial / "params.json").read_text())
        assert json.loads((trial / "work" / "checkpoint.json").read_text()) == config
        rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines()]
        expected = config["lr"] + config["seed"] / 100 + 2 / 1000 + 3 + 1
        assert rows[-1]["val_acc"] == pytest.approx(expected)
    assert git_status(launch.parent) == "" and not list(launch.parent.rglob("checkpoint.json"))
