"""How a fractional command trial shares its GPU: a memory cap its PyTorch obeys, and NVIDIA MPS (`--mps`).

Ray's `{"gpu": 0.25}` only schedules: four trials land on one GPU, and an unmodified script may still take
the whole card. So, for a trial given 0 < g < 1 GPU:

- **the memory cap** (on unless `--no-memory-cap`): `process.command_env` puts `gpu_cap/` first on the
  command's PYTHONPATH; its `sitecustomize.py` calls `torch.cuda.set_per_process_memory_fraction(g * 0.9)`
  when CUDA starts in the script's Python, and says so on stderr (the trial's log);
- **MPS** (`--mps`, where `nvidia-cuda-mps-control` exists): the sweep runs one MPS control daemon per GPU
  (`sweeps/engine/cluster/mps_daemons.py`), each in its own folder under the sweep's MPS folder
  (`mps_gpu_folder`); `mps_env` points the command at its GPU's daemon with NVIDIA's client variables:
  `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (g as a percentage of the GPU's threads) and, unless
  `--no-memory-cap`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (`0=<MiB>M`: the same cap, for any CUDA process,
  not only PyTorch). NVIDIA MPS docs, "Appendix: Tools and Interface Reference", environment variables.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from trainables.config import TrainConfig
from trainables.experiment import records
from trainables.gpu_share import memory_fraction_for

CAP_HOOK_DIR = Path(__file__).with_name("gpu_cap")  # its sitecustomize.py caps the command's torch at CUDA start
MPS_CONTROL = "nvidia-cuda-mps-control"  # NVIDIA's MPS control daemon, shipped with the driver
MPS_DEVICE_FILE = "device.json"  # in a GPU's MPS folder: {"index", "memory_total"} (bytes), written by the sweep
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class GpuSharing:
    """The sweep's choices for fractional command trials (`sweeps/run_command.py`'s flags)."""

    memory_cap: bool = True  # the cap at CUDA start (and MPS's memory limit); False: --no-memory-cap
    mps_dir: str | None = None  # --mps: the sweep's MPS folder, one `gpu<index>` folder per daemon; None: no MPS


def mps_gpu_folder(mps_dir: str | Path, gpu: str) -> Path:
    """The folder of GPU `gpu`'s MPS control daemon: `pipe/` (CUDA_MPS_PIPE_DIRECTORY), `log/`
    (CUDA_MPS_LOG_DIRECTORY) and `MPS_DEVICE_FILE`."""
    return Path(mps_dir) / f"gpu{gpu}"


def cap_line(env: dict) -> str | None:
    """The trial's log line saying the command's PyTorch is capped at CUDA start, or None when it is not."""
    fraction = env.get("RAYSWEEP_GPU_MEMORY_FRACTION")
    if fraction is None or str(CAP_HOOK_DIR) not in env.get("PYTHONPATH", "").split(os.pathsep):
        return None
    return (
        f"GPU memory cap {fraction} of the device, set in the command's PyTorch when CUDA starts there "
        "(a line on its stderr confirms it; --no-memory-cap turns it off)"
    )


def mps_env(env: dict, gpus: float, sharing: GpuSharing) -> str | None:
    """Make the command an MPS client of its GPU's daemon (in place); returns the trial's log line, or None
    when MPS is off or the trial is not fractional.

    Args:
        env: the command's environment (`process.command_env`), with Ray's CUDA_VISIBLE_DEVICES.
        gpus: the trial's GPU share.
        sharing: the sweep's `GpuSharing`.
    The daemon of GPU i runs with CUDA_VISIBLE_DEVICES=i and shows its clients that GPU alone, as device 0;
    so the client's CUDA_VISIBLE_DEVICES is removed (NVIDIA: "should not be set in the client's
    environment") and the pinned memory limit names device 0. A trial on a node without that daemon
    (another node of a cluster) runs without MPS, and its log says so.
    """
    if sharing.mps_dir is None or not 0 < gpus < 1:
        return None
    gpu = env.get("CUDA_VISIBLE_DEVICES", "")
    folder = mps_gpu_folder(sharing.mps_dir, gpu)
    device = records.read_record(str(folder / MPS_DEVICE_FILE))  # written once the daemon runs
    if device is None:
        return f"--mps: no MPS daemon of this sweep for GPU {gpu or '(none)'} on this node: running without MPS"
    env.pop("CUDA_VISIBLE_DEVICES")
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(folder / "pipe")
    env["CUDA_MPS_LOG_DIRECTORY"] = str(folder / "log")
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(100 * gpus)))
    said = f"--mps: an MPS client of GPU {gpu}'s daemon, {env['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE']}% of its threads"
    fraction = memory_fraction_for(gpus, TrainConfig.gpu_memory_headroom)
    if sharing.memory_cap and device.get("memory_total"):
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={int(fraction * device['memory_total'] / MIB)}M"
        said += f", device memory limit {env['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'][2:]}iB"
    return said
