"""The research record (docs/research-record.md): provenance per run, --notify messages, --dry-run's estimate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reading.load import load_trials
from sweeps.engine.estimate import history_estimate
from tests.helpers.ray_cluster import files_holding, temp_dir_of
from tests.helpers.research_record import SCRIPT, closed_port_url, git_repo
from trainables.experiment.redaction import redact_url

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
    """Also secrets stay secret (issue 55): the --notify URL's password and the shell's AWS_SECRET_ACCESS_KEY
    are in no file of the experiment or of the joined Ray's temp folder (its logs), nor in the output."""
    repo, runs = git_repo(tmp_path / "repo"), tmp_path / "runs"
    password, aws_secret = "n0tify-pa55w0rd", "aws-s3cr3t-k3y-0123"
    with_password = receiver.url.replace("json://", "json://someone:" + password + "@")
    sweep = ["--axis", "lr=1,2,3,4", "--notify", with_password, "--", PY, "train.py", "{lr}"]
    proc = run_sweep(repo, runs, {**sweep_env, "AWS_SECRET_ACCESS_KEY": aws_secret}, *sweep)
    assert proc.returncode == 0, proc.stderr[-3000:]
    leaks = files_holding([runs, temp_dir_of(sweep_env["RAY_ADDRESS"])], [password, aws_secret])
    assert leaks == {} and password not in proc.stdout + proc.stderr, leaks
    info = json.loads((runs / "command" / "raysweep.json").read_text())
    assert info["argv"][info["argv"].index("--notify") + 1] == "json://127.0.0.1"  # scheme and host

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


CRASH = """import sys
raise RuntimeError(f"no data for seed {sys.argv[1]}")
"""


def analysis_json(experiment: Path, *flags: str) -> tuple[int, dict]:
    """(exit code, JSON document) of `python -m analysis EXPERIMENT FLAGS --json`."""
    proc = subprocess.run(
        [PY, "-m", "analysis", str(experiment), *flags, "--json"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_a_script_that_raises_at_start_is_counted_alike_everywhere_and_told_once(tmp_path, receiver, sweep_env):
    """4 trials of a script that raises at start: the failure gate (3) stops the sweep. Its final line,
    `--status` (text and JSON), `--json` and the one --notify message (an undeliverable URL: one warning line)
    all say 0 finished, 3 errored, 1 not run; the message says what stopped it and the exception's line."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "crash.py").write_text(CRASH)
    dead = closed_port_url()
    proc = run_sweep(
        folder, tmp_path / "runs", sweep_env, "--axis", "seed=0,1,2,3", "--notify", receiver.url, "--notify", dead,
        "--", PY, "crash.py", "{seed}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = "0 finished, 3 errored, 1 not run"
    last = proc.stdout.rstrip().splitlines()[-1]
    assert last.startswith("interrupted: 0 of 4 trials finished, 3 errored, 1 not run (its first 3 trial"), last
    assert "--resume" not in last  # a new launch: fix the script, then run the same command (its hint says)
    experiment = tmp_path / "runs" / "command"
    status = subprocess.run(
        [PY, "-m", "analysis", str(experiment), "--status"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert f"4 trials: 0 running, 0 pending, {said.replace('3 errored', '3 errored, 0 diverged')}" in status.stdout
    counts = {"finished": 0, "pruned": 0, "errored": 3, "interrupted": 0, "not_run": 1}
    code, document = analysis_json(experiment, "--status")
    assert {k: document["counts"][k] for k in counts} == counts and document["ended_by"] == "failure gate"
    code, document = analysis_json(experiment)
    assert code == 1 and {k: document["trials"][k] for k in counts} == counts and document["problem"]
    assert len(receiver.messages) == 1, receiver.messages
    message = receiver.messages[0]
    assert message["title"] == "sweep command stopped by its failure gate (exit code 1)"
    lines = message["message"].splitlines()
    assert lines[0] == said and lines[1].startswith("stopped early: its first 3 trial attempts failed")
    assert re.fullmatch(r"first error: trial seed\d: RuntimeError: no data for seed \d", lines[2]), lines
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: --notify")]
    assert len(warnings) == 1 and redact_url(dead) in warnings[0] and dead not in warnings[0]
