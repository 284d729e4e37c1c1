"""F6 searches: lr_search (TPE + ASHA, seeds, resume, the memory cap of a fractional GPU), the seed-mean trainable."""

import json
import os
import re
import signal
import threading
import types
from pathlib import Path

import pytest

from sweeps import lr_search
from sweeps.engine.flags import UsageError
from tests.helpers.processes import wait_until


def trial_results(experiment: Path) -> dict[str, list[dict]]:
    """Trial folder name -> its result rows."""
    return {
        p.name: [json.loads(line) for line in (p / "result.json").read_text().splitlines() if line.strip()]
        for p in sorted(experiment.iterdir())
        if (p / "params.json").exists()
    }


def search_argv(tmp_path, *extra, epochs: int = 3, gpus: str = "0") -> list[str]:
    return [
        "--num-samples",
        "6",
        "--epochs",
        str(epochs),
        "--grace-period",
        "1",
        "--reduction-factor",
        "2",
        "--batch-sizes",
        "256",
        "--gpus-per-trial",
        gpus,
        "--cpus-per-trial",
        "1",
        "--max-concurrent",
        "2",
        "--no-report",
        "--storage-path",
        str(tmp_path),
        *extra,
    ]


def with_mocked_cuda(calls: Path):
    """The search's trial function, seeing a CUDA device in trainables.gpu only (the model still trains on CPU):
    each `torch.cuda.set_per_process_memory_fraction` call is appended to `calls`."""

    def trial_function(config, data=None, seeds=None):
        import torch as real_torch

        import trainables.gpu as gpu
        import trainables.trial as trial

        def record(fraction, device):
            with open(calls, "a") as f:
                f.write(f"{fraction}\n")

        gpu.torch = types.SimpleNamespace(
            device=real_torch.device,
            cuda=types.SimpleNamespace(
                is_available=lambda: True,
                current_device=lambda: 0,
                get_device_properties=lambda device: types.SimpleNamespace(uuid="GPU-mocked", total_memory=2**34),
                set_per_process_memory_fraction=record,
                OutOfMemoryError=real_torch.cuda.OutOfMemoryError,
            ),
        )
        try:
            trial.train_classifier(config, data, seeds)
        finally:
            gpu.torch = real_torch

    return trial_function


# --- the search, with Ray --------------------------------------------------------------------------


@pytest.mark.slow
def test_interrupted_search_on_half_gpus_resumes_without_repeating_trials_and_caps_each_trials_memory(
    ray_gpus, tmp_path, monkeypatch, capsys
):
    """6 trials of 0.5 logical GPU, two at a time, interrupted once 3 have started and resumed: no trial or epoch
    runs twice, the searcher keeps its state; each trial calls torch.cuda.set_per_process_memory_fraction(0.45)
    (its share less 10 % headroom) on a CUDA mocked in trainables.gpu only; ASHA stops some trials early."""
    calls = tmp_path / "cap_calls"
    monkeypatch.setattr("trainables.trial.train_classifier", with_mocked_cuda(calls))  # what the search imports
    experiment = tmp_path / "resumed"
    argv = search_argv(tmp_path, "--name", "resumed", "--repeat", "2", epochs=3, gpus="0.5")

    def interrupt_after_three_trials_exist():  # as Ctrl+C would: Tune saves its state and returns
        three = lambda: len([p for p in experiment.iterdir() if (p / "params.json").exists()]) >= 3  # noqa: E731
        if wait_until(three, 300, every_s=0.2):
            os.kill(os.getpid(), signal.SIGUSR1)

    watcher = threading.Thread(target=interrupt_after_three_trials_exist, daemon=True)
    watcher.start()
    assert lr_search.main(argv) == 0
    watcher.join()
    before = trial_results(experiment)
    assert 3 <= len(before) <= 6, sorted(before)  # on a fast machine all six may have started
    # Finished as the saved experiment state records it: what Tune's restore promises not to rerun. (A
    # trial that finished in the instant between Tune's last state snapshot and the interrupt is rerun.)
    import analysis

    terminated = set(
        analysis.load_trials(experiment).query("status == 'TERMINATED'")["trial_dir"].map(lambda d: Path(d).name)
    )
    finished_before = {n: len(rows) for n, rows in before.items() if rows and rows[-1].get("done") and n in terminated}

    with pytest.raises(UsageError, match="already holds a search"):
        lr_search.main(argv)
    with pytest.raises(UsageError, match="noise_rate=0.4 differs"):
        lr_search.main([*argv, "--resume", "--noise-rate", "0.4"])

    capsys.readouterr()
    assert lr_search.main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    after = trial_results(experiment)
    assert len(after) == 6
    assert set(before) <= set(after)
    numbers = sorted(int(n.split("_")[2]) for n in after)
    assert numbers == [1, 2, 3, 4, 5, 6]
    # A searcher that lost its state would, with the same TPE seed, propose the first configs again.
    lrs = [rows[-1]["config"]["lr"] for rows in after.values()]
    assert len(set(lrs)) == 6
    for name, count in finished_before.items():  # finished trials were not run again
        assert len(after[name]) == count, name
    for rows in after.values():
        assert rows[-1]["num_seeds"] == 2
        epochs = [r["epoch"] for r in rows]
        # No epoch trained twice (resumed from the newest checkpoint on disk) and none skipped after the
        # first one reported. Interrupted mid-epoch, a trial can have persisted its epoch-1 checkpoint
        # before its epoch-1 result reached Tune: that one row is lost, not retrained (so epochs[0] <= 2).
        assert epochs == list(range(epochs[0], epochs[-1] + 1)) and epochs[0] <= 2, (rows[-1]["trial_id"], epochs)

    # The half GPU: one memory cap per trial start (a trial resumed after the interrupt sets its own again).
    caps = [float(x) for x in calls.read_text().split()]
    assert len(caps) >= 6 and all(cap == pytest.approx(0.45) for cap in caps), caps
    for name, rows in after.items():
        assert rows[-1]["gpu/fraction"] == 0.5 and rows[-1]["gpu/memory_cap"] == pytest.approx(0.45)
        assert "INFO | [GPU " in (experiment / name / "stdout").read_text()  # the log line, with its GPU id
        assert re.fullmatch(r"lr_search_0000[1-6]_(ce|gce|sce)_lr[0-9.e+-]+", name), name
    # ASHA's STOP at max_t ends a trial that ran all its epochs: finished, not pruned
    epochs_run = {name: rows[-1]["epoch"] for name, rows in after.items()}
    pruned = sum(e < 3 for e in epochs_run.values())  # 3 epochs: rungs at 1 and 2, so a search with none pruned is rare
    assert 0 < pruned < 6, f"ASHA stopped none or all: {epochs_run}"
    assert f"6 trials: {6 - pruned} finished, {pruned} pruned" in out, out[-3000:]
    configs = [rows[-1]["config"] for rows in after.values()]
    assert all("gce_q" in c for c in configs if c["loss"] == "gce")
    assert all("gce_q" not in c for c in configs if c["loss"] != "gce")  # conditional space
