"""The name of each trial's folder: the sweep's trial name, made unique beside the folders already there, and on
`--resume` the folder of a trial that no saved experiment state lists, for the trial of the same config.

`fresh_dirname` is every sweep's `trial_dirname_creator` (`launch.sweep_tune_config`); `note_resume` runs before
`Tuner.restore`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs as pafs

from trainables import ray_private
from trainables.experiment import storage


def fresh_dirname(experiment_dir: str | Path, name: Callable) -> FreshDirname:
    """A `trial_dirname_creator`: `name(trial)`, plus `_<trial_id>` when that folder already exists
    (a cell rerun next to its old, unfinished or errored, trial), locally or on object storage; on `--resume`,
    a lost trial's folder of the same config without the suffix (`note_resume`)."""
    return FreshDirname(str(experiment_dir), name)


_LISTED: dict[str, frozenset[str]] = {}  # experiment folder -> the trial folders its saved states list: `note_resume`


def note_resume(experiment_dir: str) -> frozenset[str]:
    """On `--resume`, before `Tuner.restore`: note the trial folders that the experiment states in `experiment_dir`
    list, for `FreshDirname` to tell a lost trial's folder from them.

    Tune copies its experiment state to storage every few seconds; a driver killed meanwhile leaves the trials it
    started since then in no state, so Tune's restore does not know them, and a searcher or grid that hands out the
    same config again made a second folder (`<name>_<trial_id>`) and ran it from scratch (a loaded CI run of the
    `--seeds auto` kill test). `FreshDirname` now gives the first trial of that config the lost trial's folder
    (one line says so): it continues there as a restarted trial does (the built-in trainable from the folder's
    newest checkpoint, a command after the steps its history holds, `trainables/command/step_reporter.py`).

    Returns:
        the names of the folders listed (also kept for `FreshDirname`); empty when there is no state.
    """
    from analysis.reading.tune_state import listed_trials

    fs, root, _ = storage.filesystem_of(str(experiment_dir))
    try:
        entries = fs.get_file_info(pafs.FileSelector(root))
    except (FileNotFoundError, OSError):
        entries = []
    files = {e.base_name for e in entries if e.type == pafs.FileType.File}
    dirs = [e.base_name for e in entries if e.type == pafs.FileType.Directory]
    listed = frozenset(trial["dir"] for trial in listed_trials(fs, root, files, dirs)[1] if trial["dir"])
    _LISTED[str(experiment_dir)] = listed
    return listed


@dataclasses.dataclass(frozen=True, eq=False)
class FreshDirname:
    """The `trial_dirname_creator` of `fresh_dirname`: an object, not a closure, so that Tune's snapshot of
    each trial's state, made again at each checkpoint, pickles it by reference (see `grid.cells.TrialNamer`)."""

    experiment_dir: str
    name: Callable  # the sweep's trial_name_creator

    def __call__(self, trial) -> str:
        base = self.name(trial)
        listed = _LISTED.get(self.experiment_dir)
        if listed is not None and base not in listed and self._lost_trial_of(trial, base):
            _LISTED[self.experiment_dir] = listed | {base}  # one trial continues in it
            ray_private.keep_trial_folder_name(trial, base)  # Tune's own check sees the killed driver's staging copy
            print(
                f"--resume: {base} continues in its folder, which no saved experiment state lists (its trial "
                "started after Tune's last save before the driver was killed)",
                flush=True,
            )
            return base
        return f"{base}_{trial.trial_id}" if storage.exists(storage.join(self.experiment_dir, base)) else base

    def _lost_trial_of(self, trial, base: str) -> bool:
        """Whether folder `base` holds a trial of `trial`'s config (its `params.json`), in storage or in the driver's
        staging folder (the killed driver's, in the same Ray session: it holds what Tune had not copied yet)."""
        staged = ray_private.staged_trial_folder(trial, base)
        for params in (
            staged and os.path.join(staged, "params.json"),
            storage.join(self.experiment_dir, base, "params.json"),
        ):
            try:
                config = json.loads(storage.read_bytes(params)) if params else None
            except (OSError, ValueError):
                continue  # not there, or torn
            return config == json.loads(json.dumps(trial.config, default=str))
        return False
