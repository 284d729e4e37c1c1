"""Whether a restarted trial had already ended: the driver records Tune's end of each trial in its folder at once
(`trial_end.json`, `records.write_trial_end`), but `--resume` restores Tune's experiment state, saved every few
seconds; a trial that ended after the last save is restarted from the checkpoint that state names (on object
storage not its newest one) and would train again, its history then holding those epochs twice."""

from __future__ import annotations

import warnings

from trainables.experiment import records, storage


def ended_before_restart(trial_name: str) -> bool:
    """Whether the running (restarted) trial's folder on storage holds its own end record (`trial_end.json` with
    this trial's id): it ended before this start, and ends again at once. Says so in the trial's log (one line,
    naming `trial_name`). False outside a Tune trial, without a record, or with another trial's record."""
    folder = storage.trial_storage_uri()
    end = records.read_trial_end(folder) if folder else None
    if end is None:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from ray import tune

        trial_id = tune.get_context().get_trial_id()
    if end.get("trial_id") != trial_id:
        return False
    print(f"{trial_name}: ended before this restart (its trial_end.json): nothing is run again", flush=True)
    return True
