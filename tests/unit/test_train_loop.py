"""The built-in training loop's device paths, on CPU: the same results as before the GPU work for a fixed
seed, data placed where batches are read, step flags read without a host sync, the autocast choice.
(On a CUDA machine, tests/unit/test_gpu_device.py runs the GPU side.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainables import divergence, train_epochs
from trainables.data import place_data
from trainables.train import autocast_dtype

# Metrics of these configs before the loop moved its data to the device (commit a6d7db5, torch 2.13 CPU,
# one thread): batch order, initialisation and maths are unchanged, so they must still come out.
PINNED = {
    "mlp": (
        {"model": "mlp", "epochs": 2, "batch_size": 128, "seed": 3, "noise_rate": 0.2},
        [
            {"train/loss": 2.2548276259, "train/acc": 0.2325962326, "val/loss": 2.0373350073, "val/acc": 0.8472222222},
            {"train/loss": 1.8806334299, "train/acc": 0.6355446355, "val/loss": 1.5577174999, "val/acc": 0.875},
        ],
        [0.8277777778, 0.8416666667],
    ),
    "cnn": (
        {
            "model": "cnn",
            "epochs": 1,
            "batch_size": 64,
            "seed": 1,
            "noise_type": "asym",
            "noise_rate": 0.3,
            "grad_accum_steps": 2,
        },
        [{"train/loss": 2.0626871545, "train/acc": 0.2825552826, "val/loss": 1.5598646093, "val/acc": 0.5231481481}],
        [0.5083333333],
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_cpu_results_for_a_fixed_seed_are_those_before_the_device_loop(name, monkeypatch):
    config, expected, test_acc = PINNED[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the recorded run's; other CPUs may differ in the last bits: losses to 1e-4
    try:
        rows = [m for m, _ in train_epochs({"dataset": "digits", "lr": 0.05, **config})]
    finally:
        torch.set_num_threads(threads)
    assert len(rows) == len(expected)
    for row, want, acc in zip(rows, expected, test_acc):
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-4, abs=1 / 400), key  # 1/400: under one val sample
        assert row["test/acc"] == pytest.approx(acc, abs=1 / 400)
        assert "cuda/peak_memory_bytes" not in row


def test_data_stays_shared_on_the_cpu_and_is_placed_once_per_data_set(monkeypatch):
    rng = np.random.default_rng(0)
    data = {k: rng.random((40, 1, 8, 8), dtype=np.float32) for k in ("x_train", "x_val", "x_test")}
    data |= {k: rng.integers(0, 3, 40) for k in ("y_val", "y_test")}
    data["x_train"].flags.writeable = False  # as Ray's object store hands it over
    placed = place_data(data, torch.device("cpu"))
    assert placed["x_train"].data_ptr() == data["x_train"].ctypes.data  # no copy on the CPU
    assert placed["y_val"].dtype == torch.int64 and placed["x_val"].shape == (40, 1, 8, 8)
    assert place_data(data, torch.device("cpu")) is placed  # the seeds of one trial share one placement
    assert place_data({**data, "x_val": data["x_val"].copy()}, torch.device("cpu")) is not placed


def test_data_larger_than_its_share_of_the_gpu_stays_in_host_memory(monkeypatch):
    from trainables import data as data_module

    monkeypatch.setattr(data_module, "_allocatable_bytes", lambda device: 1000.0)  # a 250-byte share
    data = {k: np.zeros((10, 8), dtype=np.float32) for k in ("x_train", "x_val", "x_test")}  # 960 bytes
    data |= {k: np.zeros(10, dtype=np.int64) for k in ("y_val", "y_test")}
    placed = place_data(data, torch.device("cuda"))  # no CUDA here: only the host path can run
    assert {t.device.type for t in placed.values()} == {"cpu"}


def test_the_gpu_share_of_a_device_without_an_index_is_read_on_the_current_device(monkeypatch):
    """`torch.device("cuda")`, as the trainable places a trial, has no index; torch's per-process memory fraction
    takes an index only (the real H200 run of `make gpu-check` failed every built-in trial there, 2026-11-29)."""
    from types import SimpleNamespace

    from trainables import data as data_module

    def fraction(device):  # torch's rule: an int, or a torch.device with an index
        if not isinstance(device, int):
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        return {2: 0.25, 1: 0.5}[device]

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=1000 * (i + 1)))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", fraction)
    assert data_module._allocatable_bytes(torch.device("cuda")) == 3000 * 0.25  # the current device, 2
    assert data_module._allocatable_bytes(torch.device("cuda", 1)) == 2000 * 0.5


class FakeEvent:
    """A CUDA event the test completes: `query` says whether the GPU got there."""

    def __init__(self):
        self.done, self.waited = False, False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = self.waited = True


def test_step_flags_are_read_when_the_gpu_got_there_at_most_max_lag_steps_late():
    watch = divergence.StepWatch(torch.device("cpu"), max_lag=2)
    events = [FakeEvent() for _ in range(3)]
    losses = [torch.tensor(0.5), torch.tensor(float("nan")), torch.tensor(float("nan"))]
    for step, (flag, event) in enumerate(zip((True, False, False), events), start=1):
        watch.pending.append((torch.tensor(flag), event, step, losses[step - 1], torch.tensor(1.0)))
        if step == 2:  # two steps queued: the GPU is not waited for
            assert watch._read(lambda: len(watch.pending) > watch.max_lag) is None
            assert not any(e.waited for e in events)
    assert watch._read(lambda: len(watch.pending) > watch.max_lag) is None  # three: the oldest (finite) waited for
    assert [e.waited for e in events] == [True, False, False] and watch.last_finite_loss is losses[0]
    bad = watch.flush()  # the epoch's end reads the rest
    assert bad["step"] == 2 and bad["loss"] is losses[1] and bad["last_finite_loss"] == 0.5


def test_on_the_cpu_a_non_finite_step_is_caught_before_its_update():
    watch = divergence.StepWatch(torch.device("cpu"))
    one = torch.tensor(1.0)
    assert watch.push(1, divergence.finite(torch.tensor(3.0), one), torch.tensor(3.0), one) is None
    bad = watch.push(2, divergence.finite(torch.tensor(float("inf")), one), torch.tensor(float("inf")), one)
    assert bad["step"] == 2 and bad["last_finite_loss"] == 3.0 and not watch.pending
    assert bool(divergence.finite(one, torch.tensor(float("nan")), grads_may_overflow=True))  # fp16: loss only


def test_autocast_is_bf16_by_default_on_a_gpu_that_computes_it(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert autocast_dtype("auto", cpu) is None and autocast_dtype("bf16", cpu) is None  # CUDA only
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: not including_emulation)
    assert autocast_dtype("auto", cuda) is torch.bfloat16  # Ampere or newer
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert autocast_dtype("auto", cuda) is None  # a V100 or T4: fp32
    assert autocast_dtype("off", cuda) is None and autocast_dtype("fp16", cuda) is torch.float16
