"""Choosing and packing GPUs for a sweep, before Ray starts: selection, busy GPUs, packing, storage.

Plain functions; placement itself stays Ray's. After `sweeps.engine.flags.parse_gpu_flags` (the flags,
before Ray), `local_gpus.check_local_gpus` refuses a local sweep's GPU flags that the GPUs present cannot meet,
before anything is written; the launcher calls, in order: `choose_local_gpus` (GPU readings -> the GPUs Ray may use,
exported as CUDA_VISIBLE_DEVICES before `ray.init`), then, with Ray up, `auto_gpus_per_trial`,
`check_gpu_request` and `check_shared_storage`; after `Tuner.fit`, `oom_trials` and
`next_fraction_after_oom` drive the re-queue of trials that ran out of GPU memory.

Every NVML reading is a plain dict {"index", "name", "memory_total", "memory_free" (bytes),
"utilization" (percent)}, so the logic is tested with recorded readings on machines without GPUs.
GPUs are never invented: `--gpus` must name devices NVML (or torch) sees. Tests that need GPUs
on a machine without them ask for logical ones with RAYSWEEP_LOGICAL_GPUS=N (`read_gpus`).
"""

from __future__ import annotations

import glob
import math
import os
import sys
from pathlib import Path

from sweeps.engine.flags import UsageError
from trainables.gpu_oom import is_gpu_oom

BUSY_MIN_FREE_FRACTION = 0.5  # a GPU with less than half its memory free is busy (someone else's job)
BUSY_MAX_UTILIZATION = 50.0  # ... or one more than 50 % utilised
MAX_TRIALS_PER_GPU = 8  # `auto` packs at most 1/8 GPU per trial
PROBE_MARGIN = 0.25  # `auto`: a trial's cap must exceed the probe's peak by 25 % (longer runs, eval spikes)
LOGICAL_GPUS_ENV = "RAYSWEEP_LOGICAL_GPUS"  # for tests: N idle logical GPUs instead of the devices present
NETWORK_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "fuse.sshfs",
    "fuse.juicefs",
    "fuse.s3fs",
    "fuse.gcsfuse",
    "fuse.mountpoint-s3",
    "9p",
    "wekafs",
)
# A GPU driver's device files on Linux: NVIDIA's, ROCm's (AMD: torch.cuda through HIP), WSL2's
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def read_nvml() -> list[dict] | None:
    """One reading per GPU through NVML (`nvidia-ml-py`); None without the library, driver or GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        readings = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            readings.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total": int(memory.total),
                    "memory_free": int(memory.free),
                    "utilization": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                }
            )
        return readings
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


def read_torch() -> list[dict] | None:
    """One reading per CUDA device torch sees, when NVML is missing: memory and load unknown (None).

    `torch.cuda.device_count()` does not initialise CUDA in this process (it asks NVML or the
    driver), so the driver keeps no GPU memory. On Linux without a GPU driver's device files
    (`GPU_DEVICE_FILES`) torch can see no device: [] without importing it (1.3 s of a command
    sweep's start-up, whose driver never trains). None when torch cannot be imported.
    """
    if sys.platform.startswith("linux") and not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES):
        return []
    try:
        import torch
    except ImportError:
        return None
    return [
        {
            "index": i,
            "name": "CUDA device (no NVML: load unknown)",
            "memory_total": None,
            "memory_free": None,
            "utilization": None,
        }
        for i in range(torch.cuda.device_count())
    ]


def logical_readings(count: str) -> list[dict]:
    """`count` idle logical GPUs (RAYSWEEP_LOGICAL_GPUS): Ray hands them out like real ones, nothing runs on them.

    Raises:
        UsageError: `count` is not a whole number >= 1.
    """
    if not count.isdigit() or int(count) < 1:
        raise UsageError(f"{LOGICAL_GPUS_ENV}={count!r} must be a whole number >= 1 (logical GPUs, for tests)")
    return [
        {
            "index": i,
            "name": f"logical GPU ({LOGICAL_GPUS_ENV})",
            "memory_total": 0,
            "memory_free": 0,
            "utilization": 0.0,
        }
        for i in range(int(count))
    ]


def read_gpus() -> list[dict] | None:
    """The GPUs of this machine: logical ones when RAYSWEEP_LOGICAL_GPUS is set, else NVML's, else torch's.

    Returns:
        Readings as `read_nvml` (torch's have None for memory and load); None when neither NVML
        nor torch can tell.
    Raises:
        UsageError: a bad RAYSWEEP_LOGICAL_GPUS.
    """
    if os.environ.get(LOGICAL_GPUS_ENV):
        return logical_readings(os.environ[LOGICAL_GPUS_ENV])
    readings = read_nvml()
    return readings if readings is not None else read_torch()


def busy_reason(
    reading: dict, min_free_fraction: float = BUSY_MIN_FREE_FRACTION, max_utilization: float = BUSY_MAX_UTILIZATION
) -> str | None:
    """Why a GPU counts as busy ("3.1 of 80 GiB free", "97 % utilised"), or None when it is free or unknown."""
    reasons = []
    if reading["memory_free"] is not None and reading["memory_free"] < min_free_fraction * reading["memory_total"]:
        reasons.append(f"{reading['memory_free'] / 2**30:.1f} of {reading['memory_total'] / 2**30:.0f} GiB free")
    if reading["utilization"] is not None and reading["utilization"] > max_utilization:
        reasons.append(f"{reading['utilization']:.0f} % utilised")
    return ", ".join(reasons) or None


def select_gpus(readings: list[dict] | None, selection: list[int] | str | None) -> tuple[list[int] | None, list[str]]:
    """The GPUs a local sweep may use, and messages saying which were left out and why.

    Args:
        readings: from `read_gpus()` (or recorded ones); None when neither NVML nor torch can
            tell which GPUs exist.
        selection: None (every GPU that is not busy), "all" (every GPU), or indices from --gpus.
    Returns:
        (indices, messages): indices None means "leave it to Ray" (nothing could be read and no
        --gpus); [] means no GPUs (CPU trials).
    Raises:
        UsageError: --gpus names a GPU this machine lacks (or any GPU on a machine without one, or
            where no GPU can be detected), or every selected GPU is busy.
    """
    if readings is None:
        if selection is not None:
            raise UsageError(
                f"--gpus={_flag(selection)}: no GPU can be detected here (neither NVML nor torch sees one); "
                f"drop --gpus (tests: {LOGICAL_GPUS_ENV}=N gives N logical GPUs)"
            )
        return None, []
    present = [r["index"] for r in readings]
    if selection is not None and not present:
        raise UsageError(
            f"--gpus={_flag(selection)}: this machine has no GPU (NVML and torch see none); drop --gpus "
            f"for CPU trials (tests: {LOGICAL_GPUS_ENV}=N gives N logical GPUs)"
        )
    if isinstance(selection, list):
        missing = [i for i in selection if i not in present]
        if missing:
            raise UsageError(
                f"--gpus: GPU {missing[0]} does not exist; this machine has GPU(s) {', '.join(map(str, present))}"
            )
    if selection == "all":
        return present, []
    wanted = [r for r in readings if selection is None or r["index"] in selection]
    messages, chosen = [], []
    for r in wanted:
        reason = busy_reason(r)
        if reason:
            messages.append(f"leaving out busy GPU {r['index']} ({r['name']}): {reason}; --gpus all uses it anyway")
        else:
            chosen.append(r["index"])
    if wanted and not chosen:
        raise UsageError(
            f"every selected GPU is busy ({'; '.join(messages)}); pass --gpus all to use them anyway, "
            "or --gpus-per-trial 0 for CPU trials"
        )
    return chosen, messages


def _flag(selection: list[int] | str) -> str:
    return selection if isinstance(selection, str) else ",".join(map(str, selection))


def choose_local_gpus(
    selection: list[int] | str | None, address: str | None, readings: list[dict] | None = None
) -> int | None:
    """Pick the GPUs of a local sweep and export them as CUDA_VISIBLE_DEVICES before `ray.init`.

    Ray detects the GPUs it may use from CUDA_VISIBLE_DEVICES at start-up and hands each trial
    its share of exactly those (the trial sees the real indices, e.g. CUDA_VISIBLE_DEVICES=2).
    Returns:
        The number of GPUs to give `ray.init(num_gpus=...)`, or None to let Ray detect them
        (a cluster via --address, RAY_ADDRESS or one `ray start` runs on this machine, unless
        `address` is `local`; or no GPU information and no --gpus).
    Raises:
        UsageError: from `select_gpus` and `read_gpus`.
    """
    import ray

    from sweeps.engine.cluster.ray_start import running_local_cluster

    if address != "local" and (address or os.environ.get("RAY_ADDRESS")):
        return None
    if address != "local" and not ray.is_initialized() and running_local_cluster():
        if selection is not None:
            print(
                "--gpus ignored: joining the cluster `ray start` runs on this machine (its GPUs); "
                "--address local starts a private Ray",
                flush=True,
            )
        return None
    readings = read_gpus() if readings is None else readings
    chosen, messages = select_gpus(readings, selection)  # a GPU that does not exist is refused in any case
    if ray.is_initialized():  # a notebook or test started Ray: its GPUs are fixed
        if selection is not None:
            print(f"--gpus={selection} ignored: Ray is already running with its own GPUs", flush=True)
        return None
    for message in messages:
        print(message, flush=True)
    if chosen is None or not readings:  # nothing detected, or no GPU at all: nothing to hide from Ray
        return None
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in chosen)
    if chosen:
        print(f"GPUs for this sweep: {os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
    return len(chosen)


def pack_fraction(peak_bytes: int, total_bytes: int, headroom: float) -> tuple[float, str]:
    """The densest packing 1/k (k <= MAX_TRIALS_PER_GPU) whose memory cap holds the probe's peak.

    A trial given 1/k GPU may allocate `1/k * (1 - headroom)` of the device (`memory_fraction_for`);
    it must hold `peak_bytes * (1 + PROBE_MARGIN)`.
    Returns:
        (fraction, why): e.g. (0.25, "peak 1.9 GiB of 80 GiB: 1/4 GPU caps a trial at 18 GiB >= 2.4 GiB needed").
    Raises:
        UsageError: even a whole GPU is too small.
    """
    from trainables.gpu_share import memory_fraction_for

    need = peak_bytes * (1 + PROBE_MARGIN)
    gib = 2**30
    for k in range(MAX_TRIALS_PER_GPU, 0, -1):
        cap = total_bytes * (memory_fraction_for(1 / k, headroom) or 1.0)
        if cap >= need:
            return 1 / k, (
                f"probe peak {peak_bytes / gib:.2f} GiB on a {total_bytes / gib:.0f} GiB GPU: 1/{k} GPU "
                f"caps a trial at {cap / gib:.2f} GiB >= {need / gib:.2f} GiB needed (peak + {PROBE_MARGIN:.0%})"
            )
    raise UsageError(
        f"the probe peaked at {peak_bytes / gib:.2f} GiB but a GPU holds {total_bytes / gib:.0f} GiB; "
        "use a smaller --batch-size/model or --gpus-per-trial 2 (data-parallel)"
    )


def auto_gpus_per_trial(cluster_gpus: float, probe, headroom: float) -> tuple[float, str]:
    """`--gpus-per-trial auto`: CPU trials without GPUs, else the packing the probe's peak allows.

    Args:
        cluster_gpus: `ray.cluster_resources().get("GPU", 0)`.
        probe: a zero-argument function returning `trainables.gpu.peak_memory_of_probe`'s dict
            (or None when it saw no CUDA device); called only when the cluster has GPUs.
        headroom: `TrainConfig.gpu_memory_headroom`.
    Returns:
        (gpus_per_trial, why), e.g. (0.25, "probe peak 1.90 GiB on a 80 GiB GPU: 1/4 GPU caps ...").
    """
    if cluster_gpus <= 0:
        return 0.0, "no GPUs in the cluster: CPU trials"
    measured = probe()
    if measured is None:
        return 0.25, "the probe saw no CUDA device (logical GPUs only?): the default 0.25 GPU per trial"
    return pack_fraction(measured["peak_bytes"], measured["total_bytes"], headroom)


def probe_on_gpu(cfg, data: dict, cpus: float) -> dict | None:
    """Run `trainables.gpu.peak_memory_of_probe` as a Ray task holding one whole GPU; its dict or None."""
    import ray

    from trainables.gpu import peak_memory_of_probe
    from trainables.train import train_epochs

    task = ray.remote(num_gpus=1, num_cpus=cpus)(peak_memory_of_probe)
    return ray.get(task.remote(train_epochs, cfg, data))


def filesystem_type(path: str, mounts: str | None = None) -> str:
    """File-system type of the mount holding `path`, from /proc/mounts ("ext4", "nfs4", ...; "" if unknown)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    resolved = str(Path(path).expanduser().resolve())
    best, fstype = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return fstype


def check_shared_storage(storage_path: str, num_nodes: int, trusted: bool = False, mounts: str | None = None) -> None:
    """A cluster of more than one node needs storage every node reaches: a URI or a network mount.

    Args:
        storage_path: --storage-path, resolved.
        num_nodes: live nodes of the cluster.
        trusted: --storage-is-shared (the user vouches for it; e.g. one machine's Ray test cluster).
        mounts: the text of /proc/mounts (tests pass recorded ones).
    Raises:
        UsageError: a multi-node cluster and a path on a local file system (named with its type).
    """
    if num_nodes <= 1 or trusted or "://" in str(storage_path):
        return
    fstype = filesystem_type(str(storage_path), mounts)
    if fstype in NETWORK_FILESYSTEMS:
        return
    raise UsageError(
        f"--storage-path={storage_path} is on a local file system ({fstype or 'unknown type'}) but the cluster has "
        f"{num_nodes} nodes: give shared storage every node reaches (an NFS mount or s3://bucket/prefix), "
        "or pass --storage-is-shared if it is shared"
    )


def oom_trials(results) -> list[dict]:
    """Configs of the trials in a `ResultGrid` that failed with a GPU out-of-memory error."""
    return [r.config for r in results if r.error is not None and is_gpu_oom(r.error)]


def requeued_trial_paths(rounds: list) -> set[str]:
    """Trial folders of the GPU out-of-memory failures that a later round of
    `sweeps/engine/run/launch.py:rerun_oom_trials` re-ran."""
    return {r.path for grid in rounds[:-1] for r in grid if r.error is not None and is_gpu_oom(r.error)}


def next_fraction_after_oom(gpus_per_trial: float) -> float | None:
    """The share to re-queue an out-of-memory trial with: doubled, up to one whole GPU.

    Returns:
        0.25 -> 0.5 -> 1.0, 0.3 -> 0.6 -> 1.0; None when the trial already had a whole GPU or more
        (more memory than that needs --gpus-per-trial 2, data-parallel, which changes the run).
    """
    if gpus_per_trial <= 0 or gpus_per_trial >= 1:
        return None
    return min(1.0, math.ldexp(gpus_per_trial, 1))
