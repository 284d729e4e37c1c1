"""The wall-time model of a sweep, one for `--estimate`, `--dry-run` and the live ETA (`analysis/progress.py`).

A trial takes `startup_s + epochs x epoch_s` (`TrialCost`); the sweep places its trials on `slots`
slots longest first, each on the first slot that frees up (Graham's LPT list scheduling, 1969, as
`sweeps/engine/grid/plan.py` orders a grid's cells), so its trials end after `makespan`; around that
come the fixed costs of the sweep process (imports, Ray's start-up, the report: `sweep_seconds`).
Where the figures come from differs: `--estimate` times the first cell, `--dry-run` reads a finished
experiment's trials, the ETA reads the epochs of the running sweep. No Ray, pandas or torch here.
"""

from __future__ import annotations

import dataclasses
import heapq
import statistics


@dataclasses.dataclass(frozen=True)
class TrialCost:
    """What one trial costs, in seconds of one slot."""

    startup_s: float  # from the trial's start to its first epoch's start: process, imports, data, model
    epoch_s: float  # one epoch (a step of `--step-key`), its report included

    def seconds(self, epochs: float) -> float:
        """Seconds of a trial of `epochs` epochs."""
        return self.startup_s + epochs * self.epoch_s

    @classmethod
    def from_stamps(cls, first_s: float, epoch_ends: list[float]) -> TrialCost | None:
        """The cost of a trial timed epoch by epoch.

        Args:
            first_s: seconds from the trial's start to its first epoch's end (its start-up plus one epoch).
            epoch_ends: seconds from the trial's start to each epoch's end, the first one included.
        Returns:
            `epoch_s` the median gap between epoch ends and `startup_s` = `first_s - epoch_s` (at
            least 0); with a single epoch timed, start-up and epoch cannot be told apart: `epoch_s` =
            `first_s`, start-up 0 (an upper bound for every later epoch). None without any epoch.
        """
        if not epoch_ends:
            return None
        gaps = [b - a for a, b in zip(epoch_ends, epoch_ends[1:])]
        epoch_s = statistics.median(gaps) if gaps else first_s
        return cls(max(0.0, first_s - epoch_s), epoch_s)


def makespan(durations: list[float], slots: int, busy: list[float] = ()) -> float:
    """Seconds until every trial of `durations` (seconds) has ended on `slots` slots.

    Trials start longest first, each on the slot that frees up first (Graham's LPT list scheduling,
    1969). `busy`: seconds each already running trial still needs; each holds a slot until then.
    A running trial beyond `slots` (the slot count was a guess) gets a slot of its own.
    """
    ends = sorted([*busy, *[0.0] * max(0, max(1, slots) - len(busy))])
    heapq.heapify(ends)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(ends, ends[0] + d)
    return max(ends, default=0.0)


def sweep_seconds(trial_seconds: list[float], slots: int, fixed_s: float, per_trial_s: float) -> float:
    """Wall seconds of a sweep: its fixed costs (`fixed_s`: process start to the first trial, and the
    end: table, report, exit) plus the makespan of its trials, each `per_trial_s` longer (the
    scheduler's hand-over between trials on a slot)."""
    return fixed_s + makespan([s + per_trial_s for s in trial_seconds], slots)
