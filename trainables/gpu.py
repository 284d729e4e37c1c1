"""GPU use inside one trial, with torch: a memory cap for fractional GPUs, OOM marking, the `auto` probe.

Ray Tune's fractional GPUs (`{"gpu": 0.25}`) are a scheduling label only: nothing stops a trial
from taking the whole card and crashing its neighbours (ray-project/ray#10640). A trial given
g < 1 GPU therefore caps its own CUDA caching allocator at `g * (1 - headroom)` of the device
with `torch.cuda.set_per_process_memory_fraction`. A trial that still runs out of memory raises
`GpuOutOfMemory` (`trainables/gpu_oom.py`), which the sweep recognises and re-queues with a larger
fraction (`sweeps/engine/cluster/gpus.py:next_fraction_after_oom`). What needs no torch is apart, for command
trials and the driver: the share and its memory fraction (`trainables/gpu_share.py`), NVML readings and the
per-epoch GPU metrics (`trainables/gpu_use.py`).

Every function here is a no-op or returns None on a machine without CUDA or without NVML.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from trainables.experiment import records
from trainables.gpu_oom import GpuOutOfMemory
from trainables.gpu_share import memory_fraction_for
from trainables.gpu_use import utilization_reader


def cap_gpu_memory(gpus_per_trial: float, headroom: float, device: torch.device | None = None) -> float | None:
    """Cap this process's CUDA allocator at its share of the device (see `memory_fraction_for`).

    Returns:
        The fraction set, or None when nothing was capped (no CUDA, CPU trial, a whole GPU or more).
    """
    fraction = memory_fraction_for(gpus_per_trial, headroom)
    if fraction is None or not torch.cuda.is_available():
        return None
    torch.cuda.set_per_process_memory_fraction(fraction, device or torch.device("cuda", torch.cuda.current_device()))
    return fraction


@contextmanager
def mark_gpu_oom(gpus_per_trial: float, trial_dir: Path | None) -> Iterator[None]:
    """Turn `torch.cuda.OutOfMemoryError` into `GpuOutOfMemory`, leaving a marker in `trial_dir`.

    When Tune retries the trial (`FailureConfig.max_failures`) at the same fraction, the marker
    makes it fail again at once instead of training up to the same out-of-memory point; the
    sweep then re-queues it with a larger fraction.
    Raises:
        GpuOutOfMemory: naming the fraction and the original CUDA message.
    """
    earlier = (records.read_oom_marker(trial_dir) or {}) if trial_dir else {}
    if earlier.get("gpus_per_trial") == gpus_per_trial:
        marker = records.record_path(trial_dir, records.OOM_MARKER)
        raise GpuOutOfMemory(f"ran out of GPU memory earlier at {gpus_per_trial:g} GPU (see {marker})")
    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        message = str(e).splitlines()[0] if str(e) else "CUDA out of memory"
        if trial_dir:
            records.write_oom_marker(trial_dir, {"gpus_per_trial": gpus_per_trial, "error": message})
        raise GpuOutOfMemory(f"ran out of GPU memory at {gpus_per_trial:g} GPU: {message}") from e


def nvml_utilization_reader(device: torch.device | None = None) -> Callable[[], float] | None:
    """A function returning the GPU utilisation (percent, 0-100) of `device` through NVML
    (`trainables/gpu_use.py:utilization_reader`).

    The device is found by UUID, so the NVML index order (PCI bus) and CUDA's order may differ.
    Returns:
        The reader, or None without CUDA, without `nvidia-ml-py`, or when NVML fails to start.
    """
    if not torch.cuda.is_available():
        return None
    return utilization_reader(str(torch.cuda.get_device_properties(device or torch.cuda.current_device()).uuid))


def peak_memory_of_probe(train_epochs, cfg, data: dict) -> dict | None:
    """Run one tiny epoch (two batches, short val/test) on the GPU and measure its peak memory.

    Args:
        train_epochs: `trainables.train.train_epochs` (passed in to keep imports one-way).
        cfg: the `TrainConfig` of the sweep (its model, batch size, AMP decide the footprint).
        data: the sweep's data dict; only its first samples are used.
    Returns:
        {"peak_bytes", "total_bytes", "device"} or None without CUDA.
    """
    if not torch.cuda.is_available():
        return None
    n = 2 * cfg.batch_size
    small = {
        **data,
        "x_train": data["x_train"][:n],
        "y_train": data["y_train"][:n],
        "x_val": data["x_val"][:1024],
        "y_val": data["y_val"][:1024],
        "x_test": data["x_test"][:1024],
        "y_test": data["y_test"][:1024],
    }
    torch.cuda.reset_peak_memory_stats()
    for _ in train_epochs(cfg.__class__(**{**cfg.__dict__, "epochs": 1}), small):
        pass
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "peak_bytes": int(torch.cuda.max_memory_allocated()),
        "total_bytes": int(props.total_memory),
        "device": props.name,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
