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


# a shape raysweep does not read (issue 54: 300 such trials each ran to the end and failed alike)
SHAPE_NOT_READ = 'print("epoch 1 val_acc 0.5", flush=True)\n'
FAILING = {  # the script, the stop's reason, its error, its last lines and its hint
    "crash at start": (
        MISSING_DATA,
        "its first 3 trial attempts failed before reporting any metric",
        "failed before reporting any metric, with the same error: FileNotFoundError",
        "    => loading data",
        "'../imagenet_synth_missing/train/index.csv' is relative to the trial's working folder",
    ),
    "shape not read": (
        SHAPE_NOT_READ,
        "its first 3 trials ended without reporting val_acc, for the same reason",
        "ended without the sweep's metric, the same way: command exited 0 but reported no metric",
        "lines with numbers not read as metrics: `epoch 1 val_acc 0.5`",
        "raysweep reads the printed line shapes of docs/output-shapes.md",
    ),
}


@pytest.mark.parametrize("failing", FAILING)
def test_a_script_failing_the_same_way_in_every_trial_starts_three_times_and_explains_itself_once(
    failing, tmp_path, sweep_env
):
    text, stop, error, lines, hint_start = FAILING[failing]
    script = tmp_path / "script.py"
    script.write_text(text)
    seeds = "seed=" + ",".join(map(str, range(8)))
    argv = ("--axis", seeds, "--metric", "val_acc", "--", PY, str(script), "--seed", "{seed}")
    proc = run_sweep(tmp_path, *argv, env=sweep_env)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert sum(attempts(tmp_path / "runs" / "command").values()) <= 3, attempts(tmp_path / "runs" / "command")
    assert f"stopping the sweep: {stop} (--max-initial-failures 3)" in out, out
    explained = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(explained) == 1, out  # the error once, not per trial
    assert error in explained[0], explained
    assert failing != "crash at start" or "../imagenet_synth_missing/train/index.csv" in explained[0]
    hints = [line for line in out.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1 and hints[0].startswith(f"hint: {hint_start}"), hints
    assert failing != "crash at start" or ("/work" in hints[0] and "--in-place" in hints[0]), hints
    assert failing != "shape not read" or "--metric-pattern" in hints[0], hints
    assert out.count(lines) == 1, out  # the script's last lines, or what its output held, once
    assert "--retry-errored" not in out and "Traceback" not in proc.stderr  # no retry hint, no Ray tracebacks
    # no trial finished: those that failed are errored (no metric), the others never ran, alike everywhere
    final = next(line for line in out.splitlines() if "sweep interrupted: 8 trials: " in line)
    shape = (
        r" 0 finished, (\d) errored(?: \((\d) no metric\))?, 0 diverged(?:, (\d) interrupted)?(?:, (\d) not run)? \|"
    )
    counts = re.search(shape, final)
    assert counts, final
    errored, no_metric, interrupted, not_run = (int(n or 0) for n in counts.groups())
    assert errored + interrupted + not_run == 8 and no_metric == (errored if failing == "shape not read" else 0), final
    assert failing != "shape not read" or errored == 3, final  # each command started ended alike
    said = [f"{errored} errored" + (f" ({no_metric} no metric)" if no_metric else "")] if errored else []
    said += [f"{n} {word}" for n, word in ((interrupted, "interrupted"), (not_run, "not run")) if n]
    assert re.search(rf"^interrupted: 0 of 8 trials finished, {re.escape(', '.join(said))} \({stop}", out, re.M), out
    status = subprocess.run(
        [PY, "-m", "analysis", str(tmp_path / "runs" / "command"), "--status", "--json"],
        **{"cwd": ROOT, "capture_output": True, "text": True, "timeout": 300},
    )
    document = json.loads(status.stdout)["counts"]
    assert (document["finished"], document["errored"], document["no_metric"]) == (0, errored, no_metric), document
    assert (document["interrupted"], document["not_run"]) == (interrupted, not_run), document


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


def test_the_failure_gate_lives_on_the_drivers_node(ray_gpus, monkeypatch):
    """A lost worker node must not take the sweep's gate with it (issue 55): `open_gate` pins the actor to the
    node of the process that opens it (the driver), not soft: a driver on a node Ray does not know (a stand-in
    for any other node, on this one-node Ray) gets a gate that is never placed elsewhere."""
    from types import SimpleNamespace

    import ray

    from trainables.command import failure_gate

    gate = failure_gate.open_gate(3)
    try:
        node = ray.get(gate.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=60)
        assert node == ray.get_runtime_context().get_node_id()
        assert ray.get(gate.enter.remote("t1/a"), timeout=60) == "go"
    finally:
        ray.kill(gate)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "ab" * 28))
    gate = failure_gate.open_gate(3)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(gate.enter.remote("t1/b"), timeout=60)
