"""The GPU paths on a real CUDA device: the built-in loop's data on the GPU without a host sync per step,
the auto probe, and the cap hook on a real PyTorch script. Marked `gpu`: skipped where torch sees no CUDA
GPU (tests/conftest.py); `make gpu-check` runs them (benchmarks/gpu_check.py)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from trainables import load_data, parse_config, train_epochs
from trainables.command.process import command_env
from trainables.data import place_data
from trainables.gpu import peak_memory_of_probe

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def digits() -> dict:
    return load_data(parse_config({"dataset": "digits"}))


def host_syncs(config: dict, data: dict) -> tuple[int, list]:
    """Host-device synchronisations (torch's sync debug mode warns at each) while training `config`."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = [m for m, _ in train_epochs(config, data)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught), rows


def test_training_keeps_the_data_on_the_gpu_and_syncs_per_epoch_not_per_step(digits):
    assert all(t.is_cuda for t in place_data(digits, torch.device("cuda")).values())
    base = {"dataset": "digits", "model": "cnn", "epochs": 2}
    many, rows = host_syncs({**base, "batch_size": 16}, digits)  # 77 steps per epoch
    few, _ = host_syncs({**base, "batch_size": 256}, digits)  # 5 steps per epoch
    assert many <= few + 4, f"{many} syncs at 77 steps per epoch, {few} at 5: a sync per step"
    assert rows[-1]["val/acc"] > 0.5 and rows[-1]["cuda/peak_memory_bytes"] > 0


def test_channels_last_and_bf16_where_supported_train_as_well(digits):
    rows = [m for m, _ in train_epochs({"dataset": "digits", "model": "cnn", "epochs": 3, "batch_size": 64}, digits)]
    fp32 = [m for m, _ in train_epochs({"dataset": "digits", "model": "cnn", "epochs": 3, "amp": "off"}, digits)]
    assert rows[-1]["val/acc"] > 0.8 and fp32[-1]["val/acc"] > 0.8
    assert not any(m.get("diverged") for m in rows + fp32)


def test_the_auto_probe_measures_the_peak_on_the_gpu(digits):
    cfg = parse_config({"dataset": "digits", "model": "cnn", "batch_size": 64})
    probe = peak_memory_of_probe(train_epochs, cfg, digits)
    assert 0 < probe["peak_bytes"] < probe["total_bytes"] and probe["device"]


def test_the_cap_hook_caps_an_unmodified_script(tmp_path):
    env = command_env({}, tmp_path, "t0", tmp_path / "metrics.jsonl", 0.1)  # cap 0.09 of the device
    script = """
import os, torch
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # set after `import torch`, as some scripts do
x = torch.ones(1, device="cuda")  # CUDA starts: the cap applies
total = torch.cuda.get_device_properties(0).total_memory
try:
    torch.empty(int(0.2 * total), dtype=torch.uint8, device="cuda")
    print("allocated 20 %")
except torch.cuda.OutOfMemoryError:
    print("out of memory at 20 %")
"""
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "out of memory at 20 %"
    assert "raysweep: GPU memory capped at 0.09 of each visible device" in done.stderr
