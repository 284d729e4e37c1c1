"""Divergence: a trial whose loss or gradient norm turns NaN/inf stops as `diverged`, not as a crash.

`train_epochs` calls `is_finite` once per optimizer step (one host-device sync) and, on the first
non-finite step, `forensics` describes the model: which parameters and gradients hold NaN or inf
(name, shape, counts), the step, the last finite loss. The trainable writes it to
`<trial>/divergence.json` (`write_dump`) and ends with one last report, `diverged_metrics`, that
carries `diverged: True` and no `val/acc`: Tune's schedulers (ASHA, median stopping, PBT) skip a
result that lacks their metric, and the sweep leaves diverged trials out of its best-run table.
This replaces the per-process NaN debug output of the hand-run workflow (seeds/002), per trial.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.experiment import records

if TYPE_CHECKING:  # torch is imported where a tensor is checked: the command-trial runtime and its driver
    import torch  # use this module's records only, and never load torch (tests/unit/test_import_hygiene.py)


def is_finite(loss_sum: torch.Tensor, grad_norm: torch.Tensor, grads_may_overflow: bool = False) -> bool:
    """True while training is healthy: the running loss sum and the step's gradient norm are finite.

    Args:
        loss_sum: scalar tensor, the epoch's summed loss so far (NaN in any micro-batch makes it NaN).
        grad_norm: scalar tensor, the global gradient norm of this step (before clipping).
        grads_may_overflow: fp16 with a GradScaler: inf gradients are expected now and then (the scaler
            skips that step and lowers its scale), so only the loss is checked.
    """
    import torch

    if grads_may_overflow:
        return bool(torch.isfinite(loss_sum))
    return bool(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))


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
