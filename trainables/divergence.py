"""Divergence: a trial whose loss or gradient norm turns NaN/inf stops as `diverged`, not as a crash.

`train_epochs` flags each optimizer step finite or not on the device (`finite`) and reads the flags
through a `StepWatch`, which never makes the CPU wait for the GPU mid-epoch; on the first
non-finite step, `forensics` describes the model: which parameters and gradients hold NaN or inf
(name, shape, counts), the step, the last finite loss. The trainable writes it to
`<trial>/divergence.json` (`write_dump`) and ends with one last report, `diverged_metrics`, that
carries `diverged: True` and no `val/acc`: Tune's schedulers (ASHA, median stopping, PBT) skip a
result that lacks their metric, and the sweep leaves diverged trials out of its best-run table.
This replaces the per-process NaN debug output of the hand-run workflow (seeds/002), per trial.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.experiment import records

if TYPE_CHECKING:  # torch is imported where a tensor is checked: the command-trial runtime and its driver
    import torch  # use this module's records only, and never load torch (tests/unit/test_import_hygiene.py)


def finite(loss_sum: torch.Tensor, grad_norm: torch.Tensor, grads_may_overflow: bool = False) -> torch.Tensor:
    """A bool scalar tensor on their device, True while training is healthy: the running loss sum
    and the step's gradient norm are finite. Computed on the device: no host sync.

    Args:
        loss_sum: scalar tensor, the epoch's summed loss so far (NaN in any micro-batch makes it NaN).
        grad_norm: scalar tensor, the global gradient norm of this step (before clipping).
        grads_may_overflow: fp16 with a GradScaler: inf gradients are expected now and then (the scaler
            skips that step and lowers its scale), so only the loss is checked.
    """
    import torch

    if grads_may_overflow:
        return torch.isfinite(loss_sum)
    return torch.isfinite(loss_sum) & torch.isfinite(grad_norm)


class StepWatch:
    """The steps' `finite` flags, read without making the CPU wait for the GPU.

    Reading a CUDA tensor's value (`bool(flag)`) waits until the GPU has run every queued kernel: once
    per step, that drains the GPU's queue each step (it idles while the CPU queues the next step).
    On CUDA each flag is therefore copied to pinned host memory behind an event and read once the GPU
    has got there, which is at most `max_lag` steps later (the CPU then waits for the oldest); `flush`
    reads the rest at the epoch's end. So a step that turns NaN/inf is caught within `max_lag` steps, and
    `forensics` then describes the model after those updates (the step, its loss and gradient norm and the
    last finite loss are the bad step's own). On the CPU every flag is read at once: the bad step is caught
    before its update, as a per-step check does.
    """

    def __init__(self, device: torch.device, max_lag: int = 2):
        self.cuda = device.type == "cuda"
        self.max_lag = max_lag
        self.pending = collections.deque()  # (flag on the host, its event or None, step, loss, grad_norm)
        self.last_finite_loss = None  # a tensor: the loss of the last step read as finite

    def push(self, step: int, flag: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor) -> dict | None:
        """Add step `step`'s flag (from `finite`); returns `forensics`' keyword arguments of the first
        non-finite step read so far (step, loss, grad_norm, last_finite_loss), else None."""
        event = None
        if self.cuda:
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(flag, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            flag = host
        self.pending.append((flag, event, step, loss, grad_norm))
        return self._read(lambda: len(self.pending) > self.max_lag)

    def flush(self) -> dict | None:
        """Read every flag still pending (waiting for the GPU); as `push`."""
        return self._read(lambda: True)

    def _read(self, must_wait) -> dict | None:
        while self.pending:
            flag, event, step, loss, grad_norm = self.pending[0]
            if event is not None and not event.query():
                if not must_wait():
                    return None
                event.synchronize()
            self.pending.popleft()
            if not bool(flag):
                last = self.last_finite_loss
                return {
                    "step": step,
                    "loss": loss,
                    "grad_norm": grad_norm,
                    "last_finite_loss": None if last is None else last.item(),
                }
            self.last_finite_loss = loss
        return None


def forensics(
    model: torch.nn.Module,
    *,
    epoch: int,
    step: int,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    last_finite_loss: float | None,
) -> dict:
    """Describe a model at the first non-finite step: what is NaN/inf, where, and how many values.

    Args:
        model: the model, gradients still in `.grad` (called before `optimizer.step`).
        epoch: 1-based epoch of the step; step: 1-based optimizer step counted from the start of training.
        loss: the step's loss (last micro-batch); grad_norm: its global gradient norm.
        last_finite_loss: loss of the last step whose loss was finite (None: none was).
    Returns:
        JSON-ready dict: epoch, step, loss, grad_norm, last_finite_loss, and `parameters` / `gradients`:
        lists of {name, shape, numel, nan, inf} for each tensor holding a non-finite value.
    """
    import torch

    def non_finite(named_tensors) -> list[dict]:
        found = []
        for name, t in named_tensors:
            t = t.detach().float()
            nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
            if nan or inf:
                found.append({"name": name, "shape": list(t.shape), "numel": t.numel(), "nan": nan, "inf": inf})
        return found

    params = list(model.named_parameters())
    return {
        "epoch": epoch,
        "step": step,
        "loss": _number(loss.item()),
        "grad_norm": _number(grad_norm.item()),
        "last_finite_loss": last_finite_loss,
        "parameters": non_finite(params),
        "gradients": non_finite((n, p.grad) for n, p in params if p.grad is not None),
        "num_parameters": len(params),
    }


def diverged_metrics(dump: dict) -> dict:
    """The last report of a diverged trial: `diverged: True` and where, without the sweep metric."""
    return {
        "epoch": dump["epoch"],
        "diverged": True,
        "diverged/step": dump["step"],
        "diverged/last_finite_loss": dump["last_finite_loss"],
        "diverged/non_finite_params": len(dump["parameters"]),
        "diverged/non_finite_grads": len(dump["gradients"]),
    }


def write_dump(trial_dir: Path | str, dump: dict) -> Path:
    """Write `dump` to `<trial_dir>/divergence.json` (plain JSON: no pickle, safe to open anywhere)."""
    return Path(records.write_divergence(trial_dir, dump))


def _number(x: float) -> float | str:
    """JSON has no NaN/inf: write them as the strings 'nan', 'inf', '-inf'."""
    return x if math.isfinite(x) else str(x)
