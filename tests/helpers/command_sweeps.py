"""`python sweeps/run_command.py` as a user types it, from the repository root, and the scripts a few tests write.

`run_sweep` takes the session's shared Ray (conftest's `sweep_env`) as `env`; without it, a private Ray (the unit
tests' `--check` and usage errors start none)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SWEEP_TIMEOUT_S = 400  # a sweep on the shared 2-core machine: Ray start-up (~10 s) and a few 1-s trials


def run_sweep(
    tmp_path: Path, *argv: str, check: bool = False, env: dict | None = None, cwd: Path = ROOT, report: bool = False
) -> subprocess.CompletedProcess:
    """`python sweeps/run_command.py ARGV` from `cwd` (the repository root: its snapshot is the repository's),
    storage under tmp_path, CPU trials; `env`: the session's shared Ray (conftest's `sweep_env`), else a private Ray.
    `report`: write the report folder (default --no-report: its plots cost seconds a sweep, and only the tests
    that read the report ask for it)."""
    flags = ["--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--quiet"]
    flags += [] if report else ["--no-report"]
    split = argv.index("--")
    env = env or {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "", "RAYSWEEP_LOGICAL_GPUS": ""}
    proc = subprocess.run(
        [PY, str(ROOT / "sweeps" / "run_command.py"), *argv[:split], *(flags if not check else []), *argv[split:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
    )
    return proc


# pytorch/examples imagenet with its data beside the repo: `FileNotFoundError: '../imagenet_synth/train'`
MISSING_DATA = """
import argparse, sys
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int)
args = parser.parse_args()
print(args, flush=True)  # a config dump, as many scripts print before the first epoch
print("=> loading data", file=sys.stderr, flush=True)
open("../imagenet_synth_missing/train/index.csv").read()
"""
