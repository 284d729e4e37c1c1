"""Per-trial log lines: which trial, on which GPU(s), in which process, at which epoch.

The seed scripts logged `GPU0:INFO | [GPU 0] Step [0/100] | Loss ... | LR ... | Grad Norm ... | ETA ...`
from one process per GPU. Under Ray Tune a process may host several trials in turn and a GPU
may hold several trials at once, so each line names the trial as well:

    sym_0.5_seed0:INFO | [GPU 0 | pid 4242] Epoch [3/30] | Loss 1.2345 | Val Acc 0.8843 | LR 1.00e-02
      | Grad Norm 1.3167 | ETA 0:00:41   (one line in the log)

Lines go to the process's stdout at the time `trial_logger` is called; inside a trial that is
Tune's tee into the trial folder's `stdout` file (`RunConfig(log_to_file=True)`).
"""

from __future__ import annotations

import logging
import os
import sys
import time


def trial_logger(trial_name: str) -> logging.Logger:
    """The `raysweep.trial` logger, writing `<trial>:LEVEL | [GPU <ids> | pid <pid>] ...` to stdout.

    GPU ids are those Ray gave the process (`CUDA_VISIBLE_DEVICES`); `CPU` when it has none.
    Calling it again (the next trial in a reused worker) replaces the previous trial's handler.
    """
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    where = f"GPU {gpus}" if gpus else "CPU"
    logger = logging.getLogger("raysweep.trial")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout)  # bound now: Tune's per-trial tee, not the worker's stdout
    name = trial_name.replace("%", "%%")
    handler.setFormatter(logging.Formatter(f"{name}:%(levelname)s | [{where} | pid %(process)d] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # Ray's own handlers would print it a second time
    return logger


def log_epoch(logger: logging.Logger, metrics: dict, epochs: int, started: float, first_epoch: int = 0) -> None:
    """Log one epoch's main metrics and the trial's ETA.

    Args:
        metrics: the epoch's metrics from `train_epochs` (epoch, train/loss, val/acc, lr, grad_norm).
        epochs: epochs the trial runs in all.
        started: `time.perf_counter()` when this run of the trial began.
        first_epoch: epochs already done when it began (a resumed trial), for the ETA.
    """
    done = metrics["epoch"] - first_epoch
    seconds_left = (time.perf_counter() - started) / max(done, 1) * (epochs - metrics["epoch"])
    eta = f"{int(seconds_left // 3600)}:{int(seconds_left % 3600 // 60):02d}:{int(seconds_left % 60):02d}"
    logger.info(
        f"Epoch [{metrics['epoch']}/{epochs}] | Loss {metrics['train/loss']:.4f} | Val Acc {metrics['val/acc']:.4f} | "
        f"LR {metrics['lr']:.2e} | Grad Norm {metrics['grad_norm']:.4f} | ETA {eta}"
    )
