"""`--mps`: one NVIDIA MPS control daemon per GPU for a sweep's fractional command trials.

Why: a fractional trial's memory cap (`trainables/command/gpu_cap/`) binds PyTorch only, and trials sharing a
GPU by time-slicing run one context at a time. Under MPS the trials' kernels run side by side, and NVIDIA's
client variables cap any CUDA process's threads and memory (`trainables/command/gpu_sharing.py:mps_env`).

Each daemon is `nvidia-cuda-mps-control -f` (foreground, so the pid started is the daemon's), started with
CUDA_VISIBLE_DEVICES=<its GPU> and its own CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY under a
temporary folder private to this sweep (`mps_gpu_folder`), so it never meets a system-wide daemon or
another sweep's; it is stopped by `quit` on its own pipe, then by pid (its process group) if it lingers,
and the folder removed. Daemons run on this machine: trials on other nodes of a cluster run without MPS,
and their logs say so. NVIDIA MPS docs: "Appendix: Tools and Interface Reference".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator

from sweeps.engine.flags import UsageError
from trainables.command.gpu_sharing import MPS_CONTROL, MPS_DEVICE_FILE, mps_gpu_folder
from trainables.experiment import records

START_WAIT_S = 10.0  # the longest wait for a daemon's control pipe
STOP_WAIT_S = 10.0  # the longest wait for a daemon to quit before SIGTERM, then SIGKILL, to its group


def check_mps(requested: bool) -> None:
    """Refuse --mps where NVIDIA MPS is not installed, before Ray starts.

    Raises:
        UsageError: `nvidia-cuda-mps-control` is not on PATH.
    """
    if requested and shutil.which(MPS_CONTROL) is None:
        raise UsageError(
            f"--mps needs NVIDIA MPS, but {MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver); "
            "drop --mps to share GPUs by time-slicing, memory still capped"
        )


@contextlib.contextmanager
def mps_folder(requested: bool) -> Iterator[str | None]:
    """A temporary folder for the sweep's daemons (None without --mps), removed at the end."""
    if not requested:
        yield None
        return
    root = tempfile.mkdtemp(prefix="raysweep-mps-")  # short: the pipes are Unix sockets (107-byte paths)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def mps_daemons(root: str | None, gpus_per_trial: float, gpu_ids: list[str], memory: dict) -> Iterator[list]:
    """Run one MPS control daemon per GPU of `gpu_ids` while the sweep runs (nothing without `root`, or
    when the trials are not fractional).

    Args:
        root: `mps_folder`'s folder.
        gpus_per_trial: the sweep's GPU share per trial.
        gpu_ids: the GPUs of this machine the trials use, as CUDA_VISIBLE_DEVICES names them.
        memory: GPU id -> its memory in bytes (NVML), for the clients' memory limit; a missing id: no limit.
    Yields:
        [(gpu id, `subprocess.Popen` of its daemon)].
    Raises:
        UsageError: a daemon exited at once, with its output (the daemons started are stopped).
    """
    daemons: list = []
    try:
        if root is not None and 0 < gpus_per_trial < 1:
            for gpu in gpu_ids:
                daemons.append((gpu, start_daemon(root, gpu, memory.get(gpu))))
            print(
                f"--mps: MPS control daemons {', '.join(f'GPU {g} pid {p.pid}' for g, p in daemons)}; "
                f"pipes and logs under {root}",
                flush=True,
            )
        elif root is not None:
            print(f"--mps: {gpus_per_trial:g} GPU per trial is not a fraction: no MPS", flush=True)
        yield daemons
    finally:
        for gpu, proc in daemons:
            stop_daemon(root, gpu, proc)


def daemon_env(root: str, gpu: str) -> dict:
    """The environment of GPU `gpu`'s daemon (and of `quit` sent to it)."""
    folder = mps_gpu_folder(root, gpu)
    return {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": gpu,
        "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"),
    }


def start_daemon(root: str, gpu: str, memory_total: int | None) -> subprocess.Popen:
    """Start GPU `gpu`'s daemon in the foreground, in its own process group; wait up to `START_WAIT_S` for
    its control pipe; then write `MPS_DEVICE_FILE`, which tells the trials the daemon is there.

    Raises:
        UsageError: the daemon exited, naming its exit code and output.
    """
    folder = mps_gpu_folder(root, gpu)
    for sub in ("pipe", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    with open(folder / "control.out", "ab") as out:  # the daemon's own output: a log
        proc = subprocess.Popen(
            [MPS_CONTROL, "-f"],
            env=daemon_env(root, gpu),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_WAIT_S
    while proc.poll() is None and not (folder / "pipe" / "control").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is not None:
        said = (folder / "control.out").read_text(errors="replace").strip()[-500:]
        raise UsageError(f"--mps: {MPS_CONTROL} for GPU {gpu} exited with code {proc.returncode}: {said}")
    records.write_record(str(folder / MPS_DEVICE_FILE), {"index": gpu, "memory_total": memory_total})
    return proc


def stop_daemon(root: str, gpu: str, proc: subprocess.Popen) -> None:
    """Stop GPU `gpu`'s daemon: `quit` on its pipe (it ends its MPS servers), then, if it still runs after
    `STOP_WAIT_S`, SIGTERM and SIGKILL to its process group (`proc.pid`, which it leads)."""
    (mps_gpu_folder(root, gpu) / MPS_DEVICE_FILE).unlink(missing_ok=True)
    if proc.poll() is None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [MPS_CONTROL], input=b"quit\n", env=daemon_env(root, gpu), capture_output=True, timeout=STOP_WAIT_S
            )
    for signum in (None, signal.SIGTERM, signal.SIGKILL):
        if signum is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)
        try:
            proc.wait(timeout=STOP_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            continue


def sweep_gpus() -> tuple[list[str], dict]:
    """The GPUs of this machine a local sweep uses (CUDA_VISIBLE_DEVICES as `choose_local_gpus` exported
    it, else every GPU NVML sees) and their memory in bytes (NVML; {} without it)."""
    from sweeps.engine.cluster.gpus import read_nvml

    readings = read_nvml() or []
    memory = {str(r["index"]): r["memory_total"] for r in readings}
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [g.strip() for g in chosen.split(",") if g.strip()] if chosen is not None else list(memory)
    return ids, memory
