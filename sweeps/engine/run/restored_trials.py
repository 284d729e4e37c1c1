"""The trials a resumed sweep's `Tuner.restore` reads, for a searcher to bring its own saved state in step.

Tune saves a sweep's experiment state (`experiment_state-<session>.json`, every trial's status, config and
last result) and each searcher's state (`searcher-state-*.pkl`, `search_gen_state-*.pkl`) in one driver
folder, then copies that folder to storage file by file in a background thread
(`_ExperimentCheckpointManager.sync_up_experiment_state`, a threaded `pyarrow.fs.copy_files`; Ray 2.60).
A driver killed during a copy leaves storage with the files of two different saves: a searcher that
remembers a trial as running which the experiment state has as finished waits for it forever, and one that
never heard of a trial the state holds hands out its config again. Before `restore` Tune downloads all of
them into one folder (`sync_down_experiment_state`), so a searcher's `restore(path)` finds the state Tune
resumes beside `path`.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys

LIVE = ("PENDING", "RUNNING", "PAUSED")  # what `Tuner.restore(resume_unfinished=True)` runs again, same id


@dataclasses.dataclass(frozen=True)
class RestoredTrial:
    """One trial of the experiment state: Tune's `trial_id`, `status` (PENDING, RUNNING, PAUSED, TERMINATED
    or ERROR), its `config` and its `last_result` (an empty dict before its first report)."""

    trial_id: str
    status: str
    config: dict
    last_result: dict


def restored_trials(folder: str) -> list[RestoredTrial] | None:
    """The trials of the newest `experiment_state-*.json` in `folder`, the file `Tuner.restore` resumes (the
    greatest name, as `ray.tune.execution.experiment_state._find_newest_experiment_checkpoint`), read as
    `TuneController._restore_trials` reads them (`Trial.from_json_state`, then its run metadata).

    Returns:
        the trials in the state's order; None when `folder` holds no state, or (with a warning line on
        stderr) when it cannot be read (a torn copy: `sweeps.engine.run.state_copy` puts a whole one back
        before `Tuner.restore`).
    """
    from ray.tune.experiment import Trial

    states = sorted(glob.glob(os.path.join(glob.escape(folder), "experiment_state-*.json")))
    if not states:
        return None
    try:
        with open(states[-1]) as f:
            trial_data = json.load(f)["trial_data"]
        trials = []
        for json_state, run_metadata in trial_data:
            trial = Trial.from_json_state(json_state, stub=True)
            trial.restore_run_metadata(run_metadata)
            trials.append(RestoredTrial(trial.trial_id, trial.status, dict(trial.config), dict(trial.last_result)))
    except Exception as error:  # Tune's own reader of its state: any failure of it means "not read"
        print(f"warning: {states[-1]} not read ({error!r})", file=sys.stderr, flush=True)
        return None
    return trials
