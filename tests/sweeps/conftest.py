"""The sweeps folder's own fixture: the README's quick start, run once per session on the shared Ray head."""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smoke_grid(shared_ray_head, tmp_path_factory) -> types.SimpleNamespace:
    """The README's quick start `python sweeps/noise_grid.py --smoke-test`, run once per session as written, in a
    scratch folder (its storage is `./runs`), on the shared Ray: tests/sweeps/test_sweeps.py checks its trials and
    tests/sweeps/test_docs_commands.py analyses them, without a second run of the same 12 trials. Just before it,
    the same command with `--estimate --json` (tests/sweeps/test_estimate_sweeps.py checks the run keeps it).

    Returns:
        `command` (the text run), `folder`, `experiment` (folder/runs/noise_grid), `proc` (its
        CompletedProcess, returncode unchecked: each test asserts it, with the output), `elapsed_s`
        (its wall time, start to exit) and `estimated` (the estimate's CompletedProcess).
    """
    command = "python sweeps/noise_grid.py --smoke-test"
    folder = tmp_path_factory.mktemp("quick_start")
    root = Path(__file__).resolve().parents[2]
    argv = shlex.split(command)
    env = {**shared_ray_head, "PYTHONPATH": str(root), "RAY_DEDUP_LOGS": "0"}
    run = functools.partial(subprocess.run, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    estimated = run([sys.executable, str(root / argv[1]), *argv[2:], "--estimate", "--json"])
    started = time.monotonic()
    proc = run([sys.executable, str(root / argv[1]), *argv[2:]])
    elapsed_s = time.monotonic() - started
    experiment = folder / "runs" / "noise_grid"
    return types.SimpleNamespace(
        command=command, folder=folder, experiment=experiment, proc=proc, elapsed_s=elapsed_s, estimated=estimated
    )
