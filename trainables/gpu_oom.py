"""What a GPU out-of-memory failure is, for every kind of trial, without torch.

A trial that ran out of GPU memory at its share is re-queued by the sweep with twice the share
(`sweeps/engine/run/launch.py:rerun_oom_trials`), never counted as a plain error. Its error says so by
its class: `GpuOutOfMemory`, raised by the built-in trainable for torch's `OutOfMemoryError`
(`trainables/gpu.py:mark_gpu_oom`) and, as `CommandOutOfMemory`, by a command trial whose output
showed a CUDA out-of-memory error (`is_oom_line`, `trainables/command/failure.py`). The driver
recognises it in Tune's results (`is_gpu_oom`) without importing torch.
"""

from __future__ import annotations

import re

# What PyTorch (`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`; older releases
# `torch.cuda.OutOfMemoryError`, `RuntimeError: CUDA out of memory`), JAX/XLA (`RESOURCE_EXHAUSTED: Out of
# memory while trying to allocate ...`) and TensorFlow (`OOM when allocating tensor`) print when the device is full.
_OOM_LINE = re.compile(
    r"torch(?:\.cuda)?\.OutOfMemoryError|CUDA out of memory|CUDA error: out of memory"
    r"|RESOURCE_EXHAUSTED\b.*\bout of memory|OOM when allocating tensor",
    re.IGNORECASE,
)

_OOM_CLASS_NAMED = re.compile(r"\b(?:Gpu|Command)OutOfMemory\b")


class GpuOutOfMemory(RuntimeError):
    """The trial ran out of GPU memory at its GPU share; the sweep re-queues it with more."""


def is_oom_line(line: str) -> bool:
    """Whether a line a command printed reports that CUDA (PyTorch, JAX/XLA) ran out of device memory."""
    return bool(_OOM_LINE.search(line))


def is_gpu_oom(error: BaseException | str | None) -> bool:
    """Whether a trial error (as Tune's `Result.error` holds it, often wrapped by Ray; a str for a trial Tune
    failed itself, e.g. "Could not re-use actor") was a GPU OOM:
    a `GpuOutOfMemory`, torch's `OutOfMemoryError` (by its class, torch not imported), or an error
    whose text names `GpuOutOfMemory` or its subclass `CommandOutOfMemory` (a traceback Ray turned into text)."""
    while error is not None:
        torch_oom = any(c.__name__ == "OutOfMemoryError" and c.__module__ == "torch" for c in type(error).__mro__)
        if isinstance(error, GpuOutOfMemory) or torch_oom or _OOM_CLASS_NAMED.search(str(error)):
            return True
        error = getattr(error, "__cause__", None)
    return False
