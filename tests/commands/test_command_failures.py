"""How a command sweep fails and stops, through `python sweeps/run_command.py` as a user types it, on the
session's shared Ray (conftest's `sweep_env`): a failure that repeats explains itself once; a stop never
tears the file the script is writing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.command_sweeps import MISSING_DATA, run_sweep
from trainables.command.failure_gate import WORKER_ENDED
from trainables.command.sources import ATTEMPT_LINE
from trainables.command.startup import FAULT_ENV

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
SAVE_MIB = 96

# pytorch/examples imagenet: the eval line, then `torch.save(checkpoint.pth.tar)` of the model it holds, at once;
# here the line holds a NaN.
NAN_THEN_SAVE = f"""
import torch
weights = torch.ones({SAVE_MIB} * {MIB} // 4)
print("epoch=1 val_acc=nan", flush=True)
torch.save({{"weights": weights}}, "checkpoint.pth.tar")
print("saved", flush=True)
"""


def test_a_nan_line_then_a_large_save_leaves_every_saved_file_whole(tmp_path, sweep_env):
    script = tmp_path / "nan_then_save.py"
    script.write_text(NAN_THEN_SAVE)
    proc = run_sweep(
        tmp_path, "--axis", "seed=0,1", "--metric", "val_acc", "--", PY, str(script), "{seed}", env=sweep_env
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # diverged trials: not ranked
    assert proc.stdout.count("diverged (not ranked)") == 2, proc.stdout[-3000:]
    final = next(line for line in proc.stdout.splitlines() if "sweep finished: " in line)
    assert "0 finished, 0 errored, 2 diverged | best val_acc - |" in final  # no best run where the table has none
    saved = sorted((tmp_path / "runs" / "command").glob("*/work/checkpoint.pth.tar"))
    assert len(saved) == 2, proc.stdout[-3000:]
    for path in saved:
        assert torch.load(path)["weights"].numel() == SAVE_MIB * MIB // 4, path


# a failure after a metric: a crash in epoch 2
CRASH_AFTER_A_METRIC = """
import sys
print("epoch=1 val_acc=0.5", flush=True)
sys.exit("CUDA error: an illegal memory access was encountered")
"""


def attempts(experiment) -> dict[str, int]:
    """How many times each trial's command started (`command_stdout.txt` marks each start)."""
    return {p.parent.name: p.read_text().count(ATTEMPT_LINE) for p in experiment.glob("*/command_stdout.txt")}


def test_a_script_failing_the_same_way_in_every_trial_starts_three_times_and_explains_itself_once(tmp_path, sweep_env):
    script = tmp_path / "missing_data.py"
    script.write_text(MISSING_DATA)
    seeds = "seed=" + ",".join(map(str, range(6)))
    proc = run_sweep(tmp_path, "--axis", seeds, "--", PY, str(script), "--seed", "{seed}", env=sweep_env)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert sum(attempts(tmp_path / "runs" / "command").values()) <= 3, attempts(tmp_path / "runs" / "command")
    assert "stopping the sweep: its first 3 trial attempts failed before reporting any metric" in out, out
    explained = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(explained) == 1, out  # the error once, not per trial
    assert "failed before reporting any metric, with the same error: FileNotFoundError" in explained[0]
    assert "../imagenet_synth_missing/train/index.csv" in explained[0]
    hint = next(line for line in out.splitlines() if line.startswith("hint: "))
    assert "'../imagenet_synth_missing/train/index.csv' is relative to the trial's working folder" in hint, hint
    assert "/work" in hint and "--in-place" in hint, hint
    assert "    => loading data" in out  # the script's last stderr lines
    assert "--retry-errored" not in out and "Traceback" not in proc.stderr  # no retry hint, no Ray tracebacks
    # no trial finished: those that crashed are errored, the others never ran their command, alike everywhere
    final = next(line for line in out.splitlines() if "sweep interrupted: 6 trials: " in line)
    counts = re.search(r" 0 finished, (\d) errored, 0 diverged(?:, (\d) interrupted)?(?:, (\d) not run)? \|", final)
    assert counts and sum(int(n or 0) for n in counts.groups()) == 6, final
    said = ", ".join(f"{n} {word}" for n, word in zip(counts.groups(), ("errored", "interrupted", "not run")) if n)
    assert re.search(rf"^interrupted: 0 of 6 trials finished, {said} \(its first 3 trial attempts failed", out, re.M)
    status = subprocess.run(
        [PY, "-m", "analysis", str(tmp_path / "runs" / "command"), "--status", "--json"],
        **{"cwd": ROOT, "capture_output": True, "text": True, "timeout": 300},
    )
    document = json.loads(status.stdout)["counts"]
    assert (document["finished"], document["errored"], document["interrupted"], document["not_run"]) == (
        0,
        *(int(n or 0) for n in counts.groups()),
    ), document


def test_a_failure_after_a_metric_keeps_its_retries_and_the_retry_errored_hint(tmp_path, sweep_env):
    script = tmp_path / "crash_after_a_metric.py"
    script.write_text(CRASH_AFTER_A_METRIC)
    proc = run_sweep(tmp_path, "--max-failures", "1", "--", PY, str(script), env=sweep_env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list(attempts(tmp_path / "runs" / "command").values()) == [2]  # retried once, as --max-failures says
    assert "1 trial(s) ended in error; `--resume --retry-errored` continues them" in proc.stdout, proc.stdout
    assert "before reporting any metric" not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["work folder:fail", "snapshot:kill"])
def test_a_trial_failing_or_killed_before_its_command_starts_ends_the_sweep_with_its_cause_once(
    fault, tmp_path, sweep_env
):
    """Each way a trial can end between its turn at the failure gate and its command's start releases its ticket
    and counts as a start (issue 46): the sweep stops after 3 of them, instead of waiting for ever. Every step
    is driven in tests/unit/test_command_startup.py; here one step that raises and one that kills the worker."""
    script = tmp_path / "never_runs.py"
    script.write_text("print('epoch=1 val_acc=0.5')\n")
    env = {**sweep_env, FAULT_ENV: fault}
    proc = run_sweep(tmp_path, "--axis", "seed=0,1", "--", PY, script.name, "--seed", "{seed}", env=env, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert attempts(tmp_path / "runs" / "command") == {}  # no command ever started
    stop = [line for line in out.splitlines() if line.startswith("stopping the sweep: its first 3 trial attempts")]
    assert len(stop) == 1, out
    if fault.endswith(":fail"):
        explained = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(explained) == 1 and f"InjectedFault: {FAULT_ENV}={fault}" in explained[0], out  # once
        assert "  failed before its command started, at its work folder" in out
    else:
        assert stop[0].endswith(f"3 of them: {WORKER_ENDED} (killed?)"), stop  # the cause, once
