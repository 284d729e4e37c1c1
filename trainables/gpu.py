"""GPU use inside one trial: a memory cap for fractional GPUs, NVML utilisation, OOM marking.

Ray Tune's fractional GPUs (`{"gpu": 0.25}`) are a scheduling label only: nothing stops a trial
from taking the whole card and crashing its neighbours (ray-project/ray#10640). A trial given
g < 1 GPU therefore caps its own CUDA caching allocator at `g * (1 - headroom)` of the device
with `torch.cuda.set_per_process_memory_fraction`. A trial that still runs out of memory raises
`GpuOutOfMemory`, which the sweep recognises and re-queues with a larger fraction
(`sweeps/engine/cluster/gpus.py:next_fraction_after_oom`). The share itself, its memory fraction and how
an out-of-memory error is recognised need no torch: `trainables/gpu_share.py`.

Every function here is a no-op or returns None on a machine without CUDA or without NVML.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from trainables.experiment import records
from trainables.gpu_share import GpuOutOfMemory, memory_fraction_for


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
    """A function returning the GPU utilisation (percent, 0-100) of `device` through NVML.

    The device is found by UUID, so the NVML index order (PCI bus) and CUDA's order may differ.
    Returns:
        The reader, or None without CUDA, without `nvidia-ml-py`, or when NVML fails to start.
    """
    if not torch.cuda.is_available():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device or torch.cuda.current_device()).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        return None
    return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


@contextmanager
def sample_gpu_utilization(read: Callable[[], float] | None, every_s: float = 1.0) -> Iterator[list[float]]:
    """Call `read()` every `every_s` seconds in a background thread, collecting the readings.

    Args:
        read: e.g. `nvml_utilization_reader()`; None yields an empty list and starts no thread.
    Yields:
        The list the readings (percent) are appended to; read it at any time for a running mean.
    """
    samples: list[float] = []
    if read is None:
        yield samples
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                samples.append(read())
            except Exception:  # a transient NVML error must not kill the trial
                pass
            stop.wait(every_s)

    thread = threading.Thread(target=loop, name="gpu-utilization", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=2 * every_s)


def gpu_metrics(gpus_per_trial: float, memory_fraction: float | None, utilization: list[float]) -> dict:
    """Per-epoch GPU metrics: `gpu/fraction` (the trial's share), `gpu/memory_cap` (the allocator
    cap as a share of the device, 0 when uncapped), `gpu/utilization_mean` (percent, NVML, only
    when sampled)."""
    metrics = {"gpu/fraction": gpus_per_trial, "gpu/memory_cap": memory_fraction or 0.0}
    if utilization:
        metrics["gpu/utilization_mean"] = sum(utilization) / len(utilization)
    return metrics


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
