"""Whether a trial was stopped by the sweep's scheduler (ASHA's early stop), read from what Tune logged.

A trial is "stopped" only when the scheduler stopped it; a trial that ended by itself (the built-in
trainable after its epochs, a command's script that exited) is finished, whatever its epoch count,
and a trial that errored or was interrupted is neither. Tune marks the result on which a scheduler
decided STOP with `done: true` before it logs it (`TuneController._process_trial_result`, Ray 2.x);
a function trainable that returns ends with Tune's copy of its last result, which is not logged
again, so its last logged row keeps `done: false`. A STOP on the trial's last epoch (ASHA's stop at
`max_t`, or its top rung at `max_t`) ends a trial that ran all its epochs: finished, not stopped.
"""

from __future__ import annotations

from typing import Mapping

STOPPED = "stopped"  # the trial table's column of `stopped_by_scheduler` (`analysis.figures.search.top_trials`)


def stopped_by_scheduler(last_logged: Mapping, epochs: int | None) -> bool:
    """Whether the scheduler stopped the trial before it ended by itself.

    Args:
        last_logged: the last row of the trial's own history as Tune logged it (result.json,
            progress.csv, `Result.metrics_dataframe`), not `Result.metrics`: Tune sets `done` there
            for every ended trial.
        epochs: the epochs (`training_iteration`s) a trial runs when known: the trainable's, a
            command's `--epochs N` (ASHA's `max_t`); None: unknown, so any stop by the scheduler counts.
    Returns:
        True when the row is marked `done` (a STOP decision) and, with `epochs` known, fewer than
        `epochs` iterations ran.
    """
    if str(last_logged.get("done")) != "True":  # a bool from JSON, numpy's from a DataFrame row
        return False
    return epochs is None or float(last_logged.get("training_iteration") or 0) < epochs
