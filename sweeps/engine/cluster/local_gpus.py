"""The GPUs a sweep on a private Ray of this machine would have, read without torch or Ray (milliseconds),
so that GPU flags they cannot meet are refused right after the flags are parsed, before anything runs or is
written (`check_flags`, first in each sweep script's `main`). A sweep that joins a cluster is checked against
the cluster once joined (`ray_start.check_resources`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sweeps.engine.cluster.gpus import LOGICAL_GPUS_ENV, logical_readings, read_nvml, select_gpus
from sweeps.engine.flags import UsageError


def light_readings() -> list[dict] | None:
    """The GPUs of this machine without torch or Ray, in milliseconds: logical ones (RAYSWEEP_LOGICAL_GPUS),
    else NVML's, else the NVIDIA driver's list (/proc/driver/nvidia/gpus; memory and load unknown);
    [] on Linux without an NVIDIA driver (no /proc/driver/nvidia, no WSL /dev/dxg: CUDA sees no GPU either,
    and NVML is not loaded); None where only torch could tell (an AMD GPU's /dev/kfd, another system).

    Raises:
        UsageError: a bad RAYSWEEP_LOGICAL_GPUS.
    """
    if os.environ.get(LOGICAL_GPUS_ENV):
        return logical_readings(os.environ[LOGICAL_GPUS_ENV])
    driver = Path("/proc/driver/nvidia/gpus")
    if sys.platform.startswith("linux") and not driver.parent.exists() and not Path("/dev/dxg").exists():
        return None if Path("/dev/kfd").exists() else []
    readings = read_nvml()
    if readings is not None:
        return readings
    if driver.is_dir():
        unknown = {"name": "NVIDIA GPU (no NVML: load unknown)", "memory_total": None, "memory_free": None}
        return [{"index": i, **unknown, "utilization": None} for i, _ in enumerate(sorted(driver.iterdir()))]
    return None


def check_local_gpus(selection: list[int] | str | None, share: float | str | None, address: str | None) -> None:
    """Refuse, before anything runs or is written, GPU flags that a sweep on a private Ray of this machine
    cannot meet: --gpus naming a GPU it lacks (`select_gpus`), --gpus-per-trial above the GPUs present.
    A sweep joining a cluster (`address`, RAY_ADDRESS, or a `ray start` of this machine, found by Ray's
    `ray_current_cluster` file) is checked against the cluster once it is joined (`ray_start.check_resources`),
    as is a machine whose GPUs only torch can count (`light_readings` None); a Ray this process started
    already (a notebook's, a test's) keeps its own GPUs.

    Args:
        selection, share: --gpus and --gpus-per-trial as `flags.parse_gpu_flags` returns them.
        address: --address (None: RAY_ADDRESS, or Ray's own choice; `local`: a private Ray).
    Raises:
        UsageError: naming the flag, its value and the GPUs present.
    """
    if address != "local" and (address or os.environ.get("RAY_ADDRESS") or _ray_start_here()):
        return
    ray = sys.modules.get("ray")  # never imported here: a Ray this process runs was imported by its starter
    if ray is not None and ray.is_initialized():
        return
    readings = light_readings()
    if readings is None:
        return
    select_gpus(readings, selection)  # a GPU that does not exist, none at all, or every one busy
    count = len(readings)
    if isinstance(share, float) and share > count:
        raise UsageError(
            f"--gpus-per-trial={share:g}: this machine has "
            + (
                f"{count} GPU{'s' if count > 1 else ''}; use at most {count}"
                if count
                else "no GPU; use 0 for CPU trials"
            )
        )


def _ray_start_here() -> bool:
    """Whether a `ray start` of this machine may be running: Ray's `ray_current_cluster` file, which a
    `ray.init()` without an address joins, is in one of the temporary folders Ray may use."""
    folders = {os.environ.get("RAY_TMPDIR"), os.environ.get("TMPDIR"), "/tmp"} - {None, ""}
    return any(Path(folder, "ray", "ray_current_cluster").exists() for folder in folders)


def check_flags(args) -> None:
    """`check_local_gpus` of a sweep script's checked flags (`run_flags.check_run_args`), but for --dry-run,
    which runs nothing: a GPU machine's command may be previewed anywhere.

    Raises:
        UsageError: from `check_local_gpus`.
    """
    if not getattr(args, "dry_run", False):
        check_local_gpus(args.gpus, args.gpus_per_trial, args.address)


def trials_use_cuda(gpus_per_trial: float | str | None, address: str | None) -> bool:
    """Whether the sweep's trials will train on CUDA, before Ray starts (a trial's identity reads it:
    `trainables.config.identity`, `amp=auto` is `off` without CUDA). `gpus_per_trial` 0: no; logical GPUs
    (RAYSWEEP_LOGICAL_GPUS) carry no CUDA: no; a share given: yes; none given: this machine has an NVIDIA GPU
    (on a remote cluster, not known here: no)."""
    if gpus_per_trial == 0 or os.environ.get(LOGICAL_GPUS_ENV):
        return False
    if gpus_per_trial is not None:
        return True
    return not (address and address != "local") and bool(light_readings())
