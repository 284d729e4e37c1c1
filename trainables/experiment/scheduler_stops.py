"""Which of a scheduler's stops pruned a trial: one rule for the driver's last line and `--status`.

Tune stops a trial on the result where its scheduler (ASHA) decided STOP, and the driver records that step
(`driver.json`'s `scheduler_stops`). A command trial's script may have run on to its end meanwhile: its rows
after the stop are kept in `late_rows.json` (`records.write_late_rows`), not `cut` when it exited by itself.
Such a trial ran all its epochs, so it is finished, not pruned, as the history that adds those rows counts it
(`analysis/reading/trial_outcomes.py:_ran`). The driver (`sweeps/engine/run/sweep_end.py`) and `--status`
(`analysis/status.py`) take those trials out of the stops here. No Ray, torch or pandas here.
"""

from __future__ import annotations

from trainables.experiment.records import LATE_ROWS_FILE, Folder, read_record, record_path


def ran_on_after_stop(trial: Folder, last_step) -> bool:
    """Whether a command trial that Tune stopped had run on past `last_step` (the `epoch` of its last report)
    and exited by itself (its `late_rows.json` not `cut`, with a row after that step); False without such a
    record or without a numeric `last_step`."""
    record = read_record(record_path(trial, LATE_ROWS_FILE)) or {}
    rows = record.get("rows")
    if record.get("cut", True) or not isinstance(last_step, (int, float)) or not isinstance(rows, list):
        return False
    steps = [row.get("epoch") for row in rows if isinstance(row, dict)]
    return any(isinstance(step, (int, float)) and step > last_step for step in steps)


def pruning_stops(stops: dict, trials: dict) -> dict:
    """The scheduler's stops that pruned a trial: `stops` ({trial_id: iteration of the STOP}) less the trials
    that ran on to their end after it (`ran_on_after_stop`).

    Args:
        trials: {trial_id: (its folder, a path or URI; the `epoch` of its last report, or None)}; a stopped
            trial missing here keeps its stop.
    Returns:
        a new dict: `stops` without the trials that ran on.
    """
    return {
        trial_id: at
        for trial_id, at in stops.items()
        if trial_id not in trials or not ran_on_after_stop(*trials[trial_id])
    }
