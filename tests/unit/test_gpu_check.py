"""`make gpu-check` (benchmarks/gpu_check.py) on a machine without a GPU, and its table and readers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_gpu_it_says_so_and_exits_0():
    makefile = (ROOT / "Makefile").read_text()
    assert "gpu-check: install" in makefile and "$(PY) benchmarks/gpu_check.py" in makefile
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gpu-check: no CUDA GPU on this machine (torch sees none): nothing checked"


def test_table_fails_on_a_failed_check_and_not_on_a_pending_one(tmp_path):
    checks = [
        gpu_check.Check("smoke grid", "pass", "12/12 trials", 41.0),
        gpu_check.Check("OOM re-queue, command", "pending", "not on this branch"),
        gpu_check.Check("pytest -m gpu", "FAIL", "1 failed, 3 passed", 20.0),
    ]
    lines = gpu_check.format_table("NVIDIA H200, torch 2.11", checks).splitlines()
    assert lines[0] == "gpu-check on NVIDIA H200, torch 2.11"
    assert lines[2].split()[:3] == ["smoke", "grid", "pass"] and lines[2].endswith("41  12/12 trials")
    assert lines[-1] == "2/3 checks passed or pending; failed: pytest -m gpu"


def test_trial_rows_read_each_trials_history(tmp_path):
    for name, epochs in (("a", [1, 2]), ("b", [1])):
        (tmp_path / name).mkdir()
        rows = "".join(json.dumps({"epoch": e, "gpu_ids": "0"}) + "\n" for e in epochs)
        (tmp_path / name / "result.json").write_text(rows)
    (tmp_path / "not_a_trial").mkdir()
    assert {k: [r["epoch"] for r in v] for k, v in gpu_check.trial_rows(tmp_path).items()} == {"a": [1, 2], "b": [1]}
    done = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\n  x\nValueError: bad\n")
    assert gpu_check.failed(done) == "exit 1: Traceback / x / ValueError: bad"
