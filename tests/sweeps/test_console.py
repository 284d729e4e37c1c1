"""The `raysweep` console command (sweeps/cli.py) and what a trial gets from the launching shell
(sweeps/engine/cluster/job_env.py): its subcommands on the scripts' own parsers, `--help` before the heavy
imports, the shell's environment carried to the trials, and a user's repository with its own `analysis/`,
`sweeps/`, `trainables/` packages; end to end from a wheel installed into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repos import clashing_repo

ROOT = Path(__file__).resolve().parents[2]


TRAIN_PY = """\
import argparse, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.add_argument("--seed", type=int)
args = parser.parse_args()
shell = {
    "data": float(open(os.path.join(os.environ["DATA_DIR"], "value.txt")).read()),  # exported after `ray start`
    "key_len": len(os.environ.get("MY_API_KEY", "")),  # a secret: its length only, never its value
    "venv_python": int(sys.prefix == os.environ["EXPECTED_PREFIX"]),  # `python` as this shell's PATH finds it
    "host_carried": int(os.environ.get("HOSTNAME") == "launching-host"),  # identifies the machine: not carried
}
for epoch in (1, 2):
    print(f"epoch={epoch} val_acc={args.lr * 10 + args.seed / 100 + epoch / 1000:.4f}",
          " ".join(f"{k}={v}" for k, v in shell.items()))
"""


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with only the wheel built from this checkout installed (`pip wheel` of a copy
    of the source; --no-deps). Its dependencies are this environment's, seen through a `.pth` line (the suite
    downloads nothing); a real install from an index is the README's `pip install`."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("sweeps", "trainables", "analysis"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", folder, source], check=True, timeout=300)
    (wheel,) = folder.glob("raysweep-*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    subprocess.run([*pip, "--python", venv / "bin" / "python", "install", "--no-deps", wheel], check=True, timeout=300)
    deps = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (next((venv / "lib").glob("python3*")) / "site-packages" / "test_deps.pth").write_text("\n".join(deps) + "\n")
    return venv


@pytest.mark.slow
def test_wheel_installed_raysweep_runs_from_a_clashing_repo_with_the_shells_environment(
    wheel_venv, sweep_env, tmp_path
):
    """From a repository whose own `sweeps/` (failing to import), `trainables/` and `analysis/` exist, with the wheel's
    `raysweep` and its environment's `python` on PATH: `raysweep run` on the session's `ray start` cluster (started
    before DATA_DIR and MY_API_KEY were exported here) gives every trial its right values and this shell's
    variables; the experiment's records hold no secret; `raysweep analyze --json` and `status` work from there.
    77-120 s at load 23-40 on 2 cores (the wheel build: about 30 s more, in its fixture)."""
    repo = clashing_repo(tmp_path / "repo")
    (repo / "train.py").write_text(TRAIN_PY)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "value.txt").write_text("7")
    secret = secrets.token_hex(16)
    env = {k: v for k, v in sweep_env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # only the wheel's code
    env.update(
        PATH=f"{wheel_venv / 'bin'}{os.pathsep}{env['PATH']}",
        DATA_DIR=str(tmp_path / "data"),
        MY_API_KEY=secret,
        EXPECTED_PREFIX=str(wheel_venv),
        HOSTNAME="launching-host",
    )
    raysweep = str(wheel_venv / "bin" / "raysweep")
    assert subprocess.run([raysweep, "--help"], cwd=repo, env=env, capture_output=True, timeout=60).returncode == 0
    sweep = subprocess.run(
        [raysweep, "run", "--axis", "lr=0.01,0.02", "--seeds", "1", "--metric", "val_acc", "--quiet"]
        + ["--", "python", "train.py", "--lr", "{lr}", "--seed", "{seed}"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert f"(python = {wheel_venv / 'bin' / 'python'})" in sweep.stdout  # the launch line names the interpreter
    assert "joined the running cluster" in sweep.stdout
    experiment = repo / "runs" / "command"
    for lr in (0.01, 0.02):
        rows = [json.loads(line) for line in (experiment / f"lr{lr}_seed0" / "result.json").open()]
        assert [row["val_acc"] for row in rows] == [round(lr * 10 + e / 1000, 4) for e in (1, 2)]
        assert {(r["data"], r["key_len"], r["venv_python"], r["host_carried"]) for r in rows} == {(7, 32, 1, 0)}
    holding = [p for p in experiment.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not holding, f"the secret is in the experiment's records: {holding}"

    summary = subprocess.run(
        [raysweep, "analyze", "runs/command", "--json"], cwd=repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert summary.returncode == 0, summary.stderr[-3000:]
    means = {cell["key"]["lr"]: cell["mean"] for cell in json.loads(summary.stdout)["cells"]}
    assert means == pytest.approx({0.01: 0.102, 0.02: 0.202})
    status = subprocess.run(
        [raysweep, "status", "runs/command"], cwd=repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0 and "2 finished, 0 errored" in status.stdout, status.stdout + status.stderr
