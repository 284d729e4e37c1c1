"""What `--estimate` measures on this machine, now: the first cell timed epoch by epoch, and how fast
the machine runs the sweep's own fixed costs (imports, Ray, worker start-up) at its present load.

A command's cell runs as `--check` runs it (`command_sweep/command_check.py:time_command`); a cell of
the built-in trainable runs `trainables.train.train_epochs` in this process, on the data the sweep
loads once, each epoch's checkpoint saved as a trial saves it. Neither starts Ray.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
import time

from analysis.wall_time import TrialCost

SPEED_PROBE = "import ray.tune"  # what every sweep's driver and trial workers import first
WARM_START_LIMIT_S = 10.0  # the built-in cell is started again, for its first epoch, when epochs are shorter


@dataclasses.dataclass(frozen=True)
class CellTiming:
    """One cell, timed from its start (seconds)."""

    epoch_ends: list[float]  # to the end of each epoch it ran (a metrics row of its step)
    ran_s: float  # until it ended or was stopped
    snapshot_s: float = 0.0  # a command's: the sweep's copy of the code (once per sweep)
    fill_s: float = 0.0  # a command's: the trial's copy of it, its working folder (once per trial)
    epochs_total: int | None = None  # the epochs it says it runs (`epoch 3/50`), None when it did not say
    exit_code: int | None = None  # None: stopped once its epochs were timed; else it ended by itself
    warm_first_s: float | None = None  # the built-in trainable's: to the first epoch's end again, in the same process

    @property
    def cost(self) -> TrialCost | None:
        """Its start-up and epoch seconds (`TrialCost.from_stamps`; the start-up of a warm start when
        timed: a trial worker pays its first-time set-up once, not per trial), None without an epoch."""
        cost = TrialCost.from_stamps(self.epoch_ends[0], self.epoch_ends) if self.epoch_ends else None
        if cost is None or self.warm_first_s is None:
            return cost
        return TrialCost(max(0.0, self.warm_first_s - cost.epoch_s), cost.epoch_s)

    @property
    def worker_s(self) -> float:
        """What the first start cost more than a warm one: once per trial worker (torch's first-time set-up)."""
        return max(0.0, self.epoch_ends[0] - self.warm_first_s) if self.warm_first_s and self.epoch_ends else 0.0

    @property
    def epochs_timed(self) -> int:
        """Epochs timed after the first (the first one's end also ends the start-up)."""
        return max(0, len(self.epoch_ends) - 1)


def time_builtin(config: dict, data: dict, epochs: int, limit_s: float, cpus: float = 1.0) -> CellTiming:
    """Train `config` with `trainables.train.train_epochs` until `epochs` epochs after its first have
    ended, at most `limit_s` seconds, or its last epoch; each epoch's checkpoint state is serialised
    (`torch.save`) as the trial saves it. With epochs under `WARM_START_LIMIT_S`, its first epoch is
    trained once more: a reused trial worker starts its next trial warm (`CellTiming.warm_first_s`).

    Args:
        config: the cell's trial config; data: `trainables.data.load_data`'s dict for it.
        cpus: --cpus-per-trial: torch's threads, as Ray gives a trial's worker (`OMP_NUM_THREADS`); all
            of a loaded machine's cores would make each epoch spin, not run.
    Returns:
        The `CellTiming` (`exit_code` 0 when it trained all its epochs).
    """
    import torch

    from trainables.config import parse_config
    from trainables.train import train_epochs

    cfg = parse_config(config)
    ends: list[float] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(cpus)))
    started = time.monotonic()
    try:
        for _, state in train_epochs(cfg, data):
            torch.save(state, io.BytesIO())
            ends.append(time.monotonic() - started)
            if len(ends) > epochs or ends[-1] >= limit_s:
                break
        ran_s, warm = time.monotonic() - started, None
        if len(ends) > 1 and ends[-1] - ends[-2] < WARM_START_LIMIT_S:  # a second start, in the warm process
            again = time.monotonic()
            next(iter(train_epochs(cfg, data)))
            warm = time.monotonic() - again
    finally:
        torch.set_num_threads(threads)
    return CellTiming(ends, ran_s, exit_code=0 if len(ends) == cfg.epochs else None, warm_first_s=warm)


def speed_probe() -> float:
    """Seconds a fresh Python takes to `import ray.tune` here, now: the unit of the sweep's fixed
    costs, which are mostly such imports and process start-ups (`sweeps/engine/estimate/prediction.py:FIXED_COSTS`)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", SPEED_PROBE], check=True, capture_output=True, timeout=600)
    return time.monotonic() - started
