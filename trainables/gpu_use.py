"""What a trial reports of its GPU, without torch: where it runs, and its use read through NVML (nvidia-ml-py).

Every trial records its GPU ids at its start (`record_placement`: `placement.json`), so the progress line
and `--status` name its GPU before its first result. Both trainables sample NVML once a second in a
background thread (`sample_gpu_utilization`) and merge `gpu_metrics` into each result:
- the built-in trainable reads its own device's utilisation (`utilization_reader`; `trainables/gpu.py`
  finds the device's UUID through torch);
- a command trial reads its command's process tree (`process_tree_reader`, `trainables/command/runner.py`):
  the GPU memory NVML lists for the tree's pids (`usedGpuMemory`, what `nvidia-smi` shows: the CUDA
  context and the caching allocator's reserve included, so above torch's `max_memory_allocated`) and
  the utilisation of the devices those processes use.
This module imports no torch: a command trial's runner and a sweep's driver read it without loading torch.

NVML names a process by its pid in the host's PID namespace: in a container that does not share the
host's PIDs no pid matches, and no memory is reported rather than a wrong figure. Without NVML (no
driver, no GPU, `nvidia-ml-py` missing) every reader is None and nothing is sampled.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from trainables.experiment import records


@dataclasses.dataclass(frozen=True)
class TreeReading:
    """One NVML reading of a command's process tree."""

    memory_bytes: int | None  # usedGpuMemory summed over the tree's processes and devices; None: NVML lists none
    utilization: float | None  # mean utilisation (percent) of the devices they use (none yet: the visible ones)


def record_placement(trial_folder, gpus: float) -> str:
    """Write where the running trial is (`placement.json` in `trial_folder`): the GPU ids Ray gave it
    (its `CUDA_VISIBLE_DEVICES`, "" on CPU), its GPU share, host and pid. The driver's progress line and
    `--status` name its GPU from its start, before its first result holds `gpu_ids`. Returns the GPU ids."""
    gpu_ids = os.environ.get("CUDA_VISIBLE_DEVICES", "") if gpus > 0 else ""
    records.write_placement(
        trial_folder, {"gpu_ids": gpu_ids, "gpus": gpus, "host": socket.gethostname(), "pid": os.getpid()}
    )
    return gpu_ids


def utilization_reader(uuid: str) -> Callable[[], float] | None:
    """A function returning the utilisation (percent, 0-100) of the device with this UUID (`GPU-...`,
    the prefix added when missing); None without NVML or when no device has it."""
    nvml = _nvml()
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # no NVML (None has no attribute), or no such device
        return None
    return lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def process_tree_reader(pid: int, visible_devices: str) -> Callable[[], TreeReading] | None:
    """A function reading the GPU use of process `pid` and all its descendants (`TreeReading`).

    Args:
        pid: the root of the tree (a command trial's process group leader).
        visible_devices: its `CUDA_VISIBLE_DEVICES` (NVML indices or `GPU-` UUIDs): the devices whose
            utilisation is read until the tree's processes show up on one (CUDA's default order, fastest
            first, is NVML's PCI order on a machine of one GPU model).
    Returns:
        The reader, or None without NVML or without a visible device.
    """
    import psutil

    visible = [d.strip() for d in visible_devices.split(",") if d.strip()]
    nvml = _nvml() if visible else None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:  # no NVML (None has no attribute), or it failed
        return None
    fallback = [h for h in (_handle(nvml, handles, d) for d in visible) if h is not None]

    def read() -> TreeReading:
        try:
            root = psutil.Process(pid)
            pids = {pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.Error:
            pids = {pid}
        memory, used = 0, []
        for handle in handles:
            mine = [p for p in _processes(nvml, handle) if p.pid in pids]
            if mine:
                used.append(handle)
                memory += sum(p.usedGpuMemory or 0 for p in mine)
        devices = used or fallback
        rates = [float(nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in devices]
        return TreeReading(memory if used else None, sum(rates) / len(rates) if rates else None)

    return read


@contextmanager
def sample_gpu_utilization(read: Callable | None, every_s: float = 1.0) -> Iterator[list]:
    """Call `read()` every `every_s` seconds in a background thread, collecting the readings.

    Args:
        read: e.g. `utilization_reader(uuid)` (percent) or `process_tree_reader(...)` (`TreeReading`);
            None yields an empty list and starts no thread.
    Yields:
        The list the readings are appended to; read it at any time for a running mean or peak.
    """
    samples: list = []
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


def gpu_metrics(gpus_per_trial: float, memory_fraction: float | None, utilization: list) -> dict:
    """Per-result GPU metrics: `gpu/fraction` (the trial's share), `gpu/memory_cap` (the allocator cap
    as a share of the device, 0 when uncapped), `gpu/utilization_mean` (percent, NVML, only when
    sampled); from `TreeReading`s also `gpu/peak_memory_bytes` (the command's process tree, NVML,
    only once NVML listed one of its processes)."""
    metrics = {"gpu/fraction": gpus_per_trial, "gpu/memory_cap": memory_fraction or 0.0}
    trees = [r for r in utilization if isinstance(r, TreeReading)]
    rates = [r.utilization if isinstance(r, TreeReading) else r for r in utilization]
    rates = [r for r in rates if r is not None]
    if rates:
        metrics["gpu/utilization_mean"] = sum(rates) / len(rates)
    memory = [r.memory_bytes for r in trees if r.memory_bytes is not None]
    if memory:
        metrics["gpu/peak_memory_bytes"] = max(memory)
    return metrics


def gpu_report(gpu_ids: str, gpus: float, samples: list) -> Callable[[], dict]:
    """What each result of a command trial on a GPU adds, as the built-in trainable's results hold it: `gpu_ids`
    (Ray's `CUDA_VISIBLE_DEVICES`), then `gpu_metrics` of the `TreeReading` samples of its command's process
    tree so far (share, utilisation, peak memory; `gpu/memory_cap` 0: a cap is the command's own). A function,
    called per result; `dict` (nothing) on CPU."""
    if not gpu_ids:
        return dict
    return lambda: {"gpu_ids": gpu_ids, **gpu_metrics(gpus, None, samples)}


def _nvml():
    """`pynvml`, initialised (NVML counts its users: each call may init again); None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def _handle(nvml, handles: list, device: str):
    """The NVML handle of one `CUDA_VISIBLE_DEVICES` entry (an index or a `GPU-` UUID), else None."""
    if device.isdigit():
        return handles[int(device)] if int(device) < len(handles) else None
    try:
        return nvml.nvmlDeviceGetHandleByUUID(device)
    except Exception:
        return None


def _processes(nvml, handle) -> list:
    """NVML's compute and graphics processes on a device ([] when it cannot tell)."""
    found = []
    for listing in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            found += listing(handle)
        except Exception:  # not supported on this device / driver
            pass
    return found
