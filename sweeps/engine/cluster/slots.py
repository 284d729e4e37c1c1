"""How many trials of a sweep can run at once, before it runs: on the cluster it will join
(`cluster_slots`, for `--estimate`) or on this machine without starting Ray (`local_slots`, for
`--dry-run`'s estimate from a finished experiment)."""

from __future__ import annotations

import os
import time


def cluster_slots(
    cpus_per_trial: float, gpus_per_trial: float | str | None, max_concurrent: int | None, address: str | None
) -> tuple[int, str, float | None, float]:
    """(Trials that can run at once: min(CPUs / cpus_per_trial, GPUs / gpus_per_trial, max_concurrent),
    at least 1; the reason in words; the seconds joining the cluster took, or None for a local Ray;
    the GPUs per trial: --gpus-per-trial, else (and for `auto`) 0.25 with GPUs, 0 without).

    The sweep's cluster (`cluster_to_join`: --address, RAY_ADDRESS, or the one `ray start` runs here)
    is joined for its resources and left; without one, this machine's CPUs and GPUs (NVML, or
    RAYSWEEP_LOGICAL_GPUS), as a local Ray would have them.
    """
    from sweeps.engine.cluster.ray_start import cluster_to_join
    from sweeps.engine.run_flags import GPU_SHARE

    joined = cluster_to_join(address)
    ray_s = None
    if joined:
        import ray

        started = time.monotonic()
        ray.init(address=joined, log_to_driver=False)
        ray_s = time.monotonic() - started
        cpus, gpu_count = (ray.cluster_resources().get(k, 0) for k in ("CPU", "GPU"))
        ray.shutdown()
    else:
        from sweeps.engine.cluster.gpus import read_gpus

        cpus, gpu_count = os.cpu_count() or 1, len(read_gpus() or [])
    share = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else (GPU_SHARE if gpu_count else 0.0)
    counts = {f"{cpus:g} CPUs / {cpus_per_trial:g}": int(cpus // cpus_per_trial)}
    if share:
        counts[f"{gpu_count:g} GPUs / {share:g}"] = int(gpu_count / share + 1e-9)
    if max_concurrent:
        counts["--max-concurrent"] = max_concurrent
    limit = min(counts, key=counts.get)
    where = f"{limit}, {'the cluster at ' + joined if joined else 'this machine'}"
    return max(1, counts[limit]), where, ray_s, share


def local_slots(
    cpus_per_trial: float, gpus_per_trial: float | str | None, max_concurrent: int | None, address: str | None
) -> tuple[int, str]:
    """(Trials that can run at once on this machine: min(CPUs / cpus_per_trial, GPUs /
    gpus_per_trial, max_concurrent), at least 1; the reason in words). CPUs from `os.cpu_count`,
    GPUs from NVML, without starting Ray; with `address` (a cluster) this machine's count is a
    lower bound, and the words say so."""
    from sweeps.engine.run_flags import GPU_SHARE
    from sweeps.engine.sweep_records.provenance_capture import local_gpus

    cpus = os.cpu_count() or 1
    gpu_count = len(local_gpus()[0])
    share = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else (GPU_SHARE if gpu_count else 0.0)
    counts = {f"{cpus} CPUs / {cpus_per_trial:g}": int(cpus // cpus_per_trial)}
    if share:
        counts[f"{gpu_count} GPUs / {share:g}"] = int(gpu_count // share) if share < 1 else gpu_count // int(share)
    if max_concurrent:
        counts["--max-concurrent"] = max_concurrent
    limit = min(counts, key=counts.get)
    where = "this machine" if address in (None, "local") else "this machine only; a cluster has more"
    return max(1, counts[limit]), f"{limit}, {where}"
