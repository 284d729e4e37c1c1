"""Whether a restarted trial had already ended: the driver records Tune's end of each trial in its folder at once
(`trial_end.json`, `records.write_trial_end`), but `--resume` restores Tune's experiment state, saved every few
seconds; a trial that ended after the last save is restarted from the checkpoint that state names (on object
storage not its newest one) and would train again, its history then holding those epochs twice. The driver
records the end after the trial's last report has been logged (and, on object storage, its files copied): a
driver killed in between leaves no record, and the history's row of the last epoch's checkpoint says it instead
(`final_epoch_recorded`)."""

from __future__ import annotations

import warnings

from trainables.experiment import records, storage


def ended_before_restart(trial_name: str) -> bool:
    """Whether the running (restarted) trial's folder on storage holds its own end record (`trial_end.json` with
    this trial's id): it ended before this start, and ends again at once. Says so in the trial's log (one line,
    naming `trial_name`). False outside a Tune trial, without a record, or with another trial's record."""
    folder = storage.trial_storage_uri()
    end = records.read_trial_end(folder) if folder else None
    if end is None or end.get("trial_id") != _running_trial_id():
        return False
    print(f"{trial_name}: ended before this restart (its trial_end.json): nothing is run again", flush=True)
    return True


def final_epoch_recorded(trial_name: str, planned_epochs: int) -> bool:
    """Whether the running (restarted) trial's history on its storage (`result.json`) holds its own row reporting
    the checkpoint of its last epoch (`epoch` >= `planned_epochs`; the built-in trainable checkpoints its last
    epoch always): it trained to its end before the driver was killed, and ends again at once. Seen on object
    storage, where Tune gives a restarted trial only the checkpoint of its last saved state: twice in one day's
    CI runs, a trial killed between its last logged row and its `trial_end.json` trained epochs 9-12 again.
    Says so in the trial's log (one line, naming `trial_name`). False outside a Tune trial or without such a row.

    Args:
        trial_name: the trial's name, for the log line; planned_epochs: the epochs its config trains.
    """
    from trainables.checkpoints import reported_checkpoints

    folder = storage.trial_storage_uri()
    if folder is None:
        return False
    fs, path, _ = storage.filesystem_of(folder)
    trial_id = _running_trial_id()
    rows = reported_checkpoints(fs, path).values()
    last = [r for r in rows if r.get("trial_id") == trial_id and _number(r.get("epoch")) >= planned_epochs]
    if not last:
        return False
    print(
        f"{trial_name}: its history holds its last epoch's checkpoint (epoch {last[-1]['epoch']}): "
        "nothing is run again",
        flush=True,
    )
    return True


def _running_trial_id() -> str:
    """Tune's id of the running trial (Tune warns that the context is deprecated outside Train: silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from ray import tune

        return tune.get_context().get_trial_id()


def _number(value) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else -1
