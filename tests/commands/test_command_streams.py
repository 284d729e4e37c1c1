"""Metrics on stderr and the common output shapes, through `sweeps/run_command.py` as a user types it:
`--check` (no Ray) and one sweep (slow)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.command_sweeps import PY, run_sweep
from tests.helpers.trial_results import history, trials

LOGGING = [PY, "tests/scripts/logging_style.py", "--lr", "{lr}", "--epochs", "3"]


@pytest.mark.slow
def test_logging_script_swept_with_no_wrapper(tmp_path, sweep_env):
    """Two trials of a script that logs only through `logging` (stderr): every epoch is read, and the
    trial's `command_stdout.txt` keeps the stderr lines (marked) for a retry or --resume to read back."""
    proc = run_sweep(tmp_path, "--axis", "lr=0.1,0.2", "--metric", "eval_acc", "--", *LOGGING, env=sweep_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command")
    assert len(found) == 2
    for trial in found.values():
        rows = history(trial)
        lr = rows["config/lr"].iloc[0] if "config/lr" in rows else float(re.search(r"lr_?([\d.]+)", trial.name)[1])
        assert rows["epoch"].tolist() == [1, 2, 3]
        assert rows["eval_acc"].tolist() == pytest.approx([round(0.5 + 0.1 * e + lr, 3) for e in (1, 2, 3)])
        log = (trial / "command_stdout.txt").read_text()
        assert "# raysweep stderr | " in log and "'eval_acc'" in log
