"""The research record (docs/research-record.md): provenance per run, --notify messages, --dry-run's estimate."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reading.load import load_trials
from sweeps.engine.estimate import history_estimate
from tests.helpers.research_record import SCRIPT, closed_port_url, git_repo

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# --- slow: sweeps of a command in a git repository, as a user runs them ------------------------


def run_sweep(cwd: Path, storage: Path, env: dict, *argv: str) -> subprocess.CompletedProcess:
    """`python sweeps/run_command.py ARGV` from `cwd`, CPU trials, on the session's shared Ray (`env`:
    conftest's `sweep_env`)."""
    own, command = list(argv[: argv.index("--")]), list(argv[argv.index("--") :])
    flags = ["--storage-path", str(storage), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--quiet"]
    return subprocess.run(
        [PY, str(ROOT / "sweeps/run_command.py"), *own, *flags, *command],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.mark.slow
def test_sweep_records_provenance_notifies_once_and_dry_run_estimates_its_wall_time(tmp_path, receiver, sweep_env):
    repo, runs = git_repo(tmp_path / "repo"), tmp_path / "runs"
    sweep = ["--axis", "lr=1,2,3,4", "--notify", receiver.url, "--", PY, "train.py", "{lr}"]
    proc = run_sweep(repo, runs, sweep_env, *sweep)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # provenance: the commit and the uncommitted diff, printed by --provenance
    shown = subprocess.run(
        [PY, "-m", "analysis", str(runs / "command"), "--provenance"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert shown.returncode == 0, shown.stderr
    assert f"commit {head} (branch main)" in shown.stdout and "+# lr warm-up tried" in shown.stdout
    assert "untracked files: notes.py" in shown.stdout
    assert "## Provenance" in (runs / "command" / "report" / "report.md").read_text()

    # one message for the finished sweep, naming it, its counts and its best configuration
    assert len(receiver.messages) == 1, receiver.messages
    message = receiver.messages[0]
    assert message["title"] == "sweep command finished" and "4 finished, 0 errored" in message["message"]
    assert "best: lr=4" in message["message"]

    # --dry-run of the same command: the sweep's own record replayed, each trial's seconds on the dry run's
    # slots plus the overhead the sweep recorded (how close that comes to a new run is a benchmark's figure)
    dry = run_sweep(repo, runs, sweep_env, "--dry-run", *sweep)
    assert dry.returncode == 0, dry.stderr
    estimated = float(re.search(r"expected wall time: (\d+) s", dry.stdout).group(1))
    slot_count = int(re.search(r"with (\d+) trials at once", dry.stdout).group(1))
    trials = load_trials(runs / "command")
    overhead = history_estimate.sweep_wall_s(str(runs / "command")) - history_estimate.makespan(
        list(trials["duration_s"]), history_estimate.concurrency(trials)
    )
    assert overhead > 0  # Ray joined, imports, the report
    assert estimated == pytest.approx(
        overhead + history_estimate.makespan(list(trials["duration_s"]), slot_count), abs=0.51
    )
    assert len(receiver.messages) == 1  # a dry run tells nobody

    # a second run after another change says which file changed, and records itself
    (repo / "train.py").write_text(SCRIPT + "# warm-up removed\n")
    again = run_sweep(repo, runs, sweep_env, "--axis", "lr=1,2,3,4,5", "--", PY, "train.py", "{lr}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "code changed since the previous run: train.py" in again.stdout
    assert len(list((runs / "command" / "provenance").glob("run-*.json"))) == 2


@pytest.mark.slow
def test_a_failed_sweep_sends_one_message_and_an_undeliverable_url_only_warns(tmp_path, receiver, sweep_env):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "fail.py").write_text("print('epoch=1 val_acc=0.1', flush=True)\nraise SystemExit(1)\n")
    dead = closed_port_url()
    proc = run_sweep(
        folder, tmp_path / "runs", sweep_env, "--max-failures", "0", "--notify", receiver.url, "--notify", dead, "--",
        PY, "fail.py",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(receiver.messages) == 1, receiver.messages
    assert receiver.messages[0]["title"] == "sweep command ended with errors (exit code 1)"
    assert "0 finished, 1 errored" in receiver.messages[0]["message"]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: --notify")]
    assert len(warnings) == 1 and dead in warnings[0]
