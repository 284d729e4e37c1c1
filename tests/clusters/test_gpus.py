"""GPU selection, memory caps, packing, OOM re-queue, DDP trials and clusters, tested on CPU.

No GPU here: NVML readings are recorded values (an 8-GPU box with two cards in use), CUDA
out-of-memory errors are injected, and Ray's logical GPUs stand in for devices.
"""

import json
import re
import sys
from pathlib import Path

import pytest

from sweeps import noise_grid
from trainables.experiment import records

ROOT = Path(__file__).resolve().parents[2]


# --- with Ray --------------------------------------------------------------------------------


@pytest.mark.slow
def test_oom_trials_are_requeued_with_twice_the_gpu(ray_gpus, tmp_path, monkeypatch, capsys):
    """A trial given 0.25 GPU hits an injected CUDA OOM; the sweep re-runs it at 0.5 and it finishes: the
    table and the report count the re-run.

    One trial only: Tune first retries it at 0.25 (`FailureConfig.max_failures=2`, each retry fails at
    once on the OOM marker), and every attempt costs an actor start on 2 busy cores."""

    def oom_below_half_gpu(config, data=None):
        import torch as t

        import trainables.train as train
        import trainables.trial as trial
        from trainables.gpu_share import trial_gpu_fraction

        real = train.train_epochs  # the trial imports it from trainables.train when it starts

        def train_epochs(*args, **kwargs):
            if trial_gpu_fraction() < 0.5:
                raise t.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
            yield from real(*args, **kwargs)

        train.train_epochs = train_epochs
        try:
            trial.train_classifier(config, data)
        finally:
            train.train_epochs = real

    monkeypatch.setattr("trainables.trial.train_classifier", oom_below_half_gpu)  # what the sweep imports
    code = noise_grid.main(
        [
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.2",
            "--epochs",
            "1",
            "--gpus-per-trial",
            "0.25",
            "--cpus-per-trial",
            "0.5",
            "--storage-path",
            str(tmp_path),
            "--name",
            "oom",
        ]
    )
    assert code == 0
    first = sorted(p for p in (tmp_path / "oom").iterdir() if p.is_dir() and (p / "params.json").exists())
    assert [p.name for p in first] == ["sym_0.2_seed0"]
    for trial in first:
        assert records.read_oom_marker(trial)["gpus_per_trial"] == 0.25
    retried = sorted(p for p in (tmp_path / "oom_oom_gpu0.5").iterdir() if (p / "result.json").exists())
    assert [p.name for p in retried] == ["sym_0.2_seed0"]
    for trial in retried:
        result = json.loads((trial / "result.json").read_text().splitlines()[-1])
        assert result["gpu/fraction"] == 0.5 and result["gpu/memory_cap"] == 0.0 and result["epoch"] == 1
    out = capsys.readouterr().out
    assert "failed trials (left out of the cells): 0 errored" in out and "no report" not in out, out[-3000:]
    assert (
        "re-run after running out of GPU memory: 1 trial(s)" in (tmp_path / "oom" / "report" / "report.md").read_text()
    )
    assert f"results: {tmp_path / 'oom'}, {tmp_path / 'oom_oom_gpu0.5'} |" in out


@pytest.mark.slow
def test_command_trials_name_their_gpu_and_one_out_of_memory_at_a_quarter_is_requeued(ray_gpus, tmp_path, capsys):
    """4 command trials at 0.25 logical GPU: every row names the GPU Ray gave, the progress line says `GPU n`.
    The script prints PyTorch's CUDA out-of-memory error below a 0.4 memory cap: all 4 at 0.25 (not a repeated
    failure: the gate does not stop the sweep), then they train at 0.5 after one re-queue: 4/4 done in the
    table, the report, `status`, `--json` and `python -m analysis EXP --json`."""
    from analysis.__main__ import main as analysis_main
    from analysis.status import read_status
    from analysis.tables.json_output import status_document
    from sweeps import run_command

    script = [sys.executable, str(ROOT / "tests" / "scripts" / "timed_epochs.py"), "--seed", "{seed}"]
    script += ["--startup", "0", "--epochs", "2", "--epoch-s", "0.2", "--oom-below", "0.4"]
    flags = ["--seeds", "4", "--gpus-per-trial", "0.25", "--cpus-per-trial", "0.5", "--progress-every", "0.2"]
    assert run_command.main([*flags, "--storage-path", str(tmp_path), "--name", "cmd", "--", *script]) == 0
    out = capsys.readouterr().out
    assert "4 trial(s) ran out of GPU memory: re-queued with 0.5 GPU each" in out, out[-3000:]
    assert "stopping the sweep" not in out and re.search(r"^  seed\d\s+epoch .*  GPU [0-3]$", out, re.M), out[-3000:]
    first, rerun = tmp_path / "cmd", tmp_path / "cmd_oom_gpu0.5"
    for trial in (p for p in first.iterdir() if (p / "params.json").exists()):
        assert records.read_oom_marker(trial)["gpus_per_trial"] == 0.25
        assert [r["gpu_ids"] for r in map(json.loads, (trial / "result.json").read_text().splitlines())] in (
            ["0"],
            ["1"],
            ["2"],
            ["3"],
        )
    reruns = [p for p in rerun.iterdir() if (p / "result.json").exists()]
    assert len(reruns) == 4
    for trial in reruns:
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        assert [r["epoch"] for r in rows] == [1, 2] and all(
            r["gpu_ids"] in "0123" and r["gpu/fraction"] == 0.5 for r in rows
        )
    assert "failed trials (left out of the cells): 0 errored" in out and f"results: {first}, {rerun} |" in out
    assert "re-run after running out of GPU memory: 4 trial(s)" in (first / "report" / "report.md").read_text()
    counts = status_document(read_status(first))["counts"]
    assert (counts["total"], counts["finished"], counts["errored"]) == (4, 4, 0)
    assert analysis_main([str(first), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trials"]["finished"] == 4


@pytest.mark.slow
def test_two_gpu_trial_trains_data_parallel_with_gloo(ray_gpus, tmp_path):
    """--gpus-per-trial 2: one Tune trial, a TorchTrainer of 2 workers (gloo on CPU), rank 0 checkpoints."""
    code = noise_grid.main(
        [
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.2",
            "--epochs",
            "2",
            "--gpus-per-trial",
            "2",
            "--cpus-per-trial",
            "0.5",
            "--no-report",
            "--storage-path",
            str(tmp_path),
            "--name",
            "ddp",
        ]
    )
    assert code == 0
    trial = tmp_path / "ddp" / "sym_0.2_seed0"
    results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert [r["epoch"] for r in results] == [1, 2]
    single_gpu_names = {
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
        "test/loss",
        "test/acc",
        "lr",
        "grad_norm",
        "noise/flip_rate",
        "gpu_ids",
        "gpu/fraction",
    }
    assert single_gpu_names <= set(results[-1])
    assert results[-1]["ddp/world_size"] == 2
    assert results[-1]["val/acc"] > 0.5  # it learns: digits, 2 epochs
    checkpoints = sorted(p for p in (trial / "ddp").glob("checkpoint_*") if p.is_dir())  # rank 0 only: one file each
    assert checkpoints and all([f.name for f in c.iterdir()] == ["checkpoint.pt"] for c in checkpoints)
