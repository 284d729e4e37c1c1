"""On `--resume`, a trial whose recorded checkpoint is gone restores from one that still exists.

Tune's experiment snapshot (`experiment_state-*.json`) names each trial's latest checkpoint as it
was when the snapshot was written, and `CheckpointConfig(num_to_keep=2)` deletes a trial's older
checkpoints as new ones arrive. A driver killed after such a deletion and before the next snapshot
reached storage leaves a snapshot naming a deleted checkpoint: `Tuner.restore` then fails that
trial with "Could not recover from checkpoint as it does not exist on storage anymore"
(`ray/tune/trainable/trainable.py:Trainable.restore`; ray-project/ray#27790), on every retry.
The wider the gap between a checkpoint and the snapshot upload (object storage), the likelier.
A deletion cut short by the kill leaves the folder (or, on object storage, its marker) without the
files: that counts as gone too (seen once in CI on S3: Tune restored from an empty folder).

`RestoreFromSurvivingCheckpoint` runs at the first step of a restored sweep, before any trial
starts: such a trial restores from the newest checkpoint in its folder that Tune had reported
(a `result.json` row names it in `checkpoint_dir_name`), newer than the one the snapshot named.
This uses Tune's checkpoint bookkeeping (`ray.train._internal`, through `trainables/ray_private/`).
"""

from __future__ import annotations

import posixpath

import pyarrow.fs as pafs
from ray import tune

from trainables import ray_private
from trainables.checkpoints import CHECKPOINT_DIR, reported_checkpoints


class RestoreFromSurvivingCheckpoint(tune.Callback):
    """Tune callback: before a restored sweep starts its trials, point each trial whose checkpoint
    no longer exists at its newest reported checkpoint that does (one line on the console each)."""

    def __init__(self):
        self._checked = False

    def on_step_begin(self, iteration, trials, **info):
        if self._checked:
            return
        self._checked = True  # restored trials are all known before the first step (TuneController.resume)
        for trial in trials:
            if trial.status == trial.PENDING and trial.checkpoint is not None:
                try:
                    line = repair_missing_checkpoint(trial)
                except OSError as e:  # storage unreachable for a moment: Tune's own restore decides then
                    line = f"{trial}: could not check that its checkpoint still exists ({type(e).__name__}: {e})"
                if line:
                    print(line, flush=True)


def holds_files(fs: pafs.FileSystem, folder: str) -> bool:
    """Whether a checkpoint folder exists and holds at least one file.

    A deletion cut short (the driver killed while `num_to_keep` removed an old checkpoint) can leave the
    folder without its files, or on object storage only the folder's marker object: Tune would then
    restore from an empty folder. Such a folder counts as gone.
    Raises:
        OSError: the storage cannot be read.
    """
    selector = pafs.FileSelector(folder, allow_not_found=True, recursive=True)
    return any(info.type == pafs.FileType.File for info in fs.get_file_info(selector))


def repair_missing_checkpoint(trial) -> str | None:
    """Point `trial` (a restored `ray.tune.experiment.Trial`) at a checkpoint that exists, if its own is gone.

    The trial's checkpoint bookkeeping is rebuilt from the checkpoints left in its folder that a
    `result.json` row reports, oldest first, so Tune keeps and deletes them as it would have; the
    next checkpoint the trial saves gets the index after the newest one. A checkpoint in another
    trial's folder (a PBT member restoring from the member it copies) is left alone: rebuilding
    from there would let this trial's bookkeeping delete the other's checkpoints.
    A checkpoint folder left without files (`holds_files`) is gone too.
    Returns:
        None when the checkpoint exists; otherwise the console line saying what the trial resumes
        from (or that it starts again, when no reported checkpoint is left, or that a missing
        checkpoint of another trial is left to Tune).
    Raises:
        OSError: the storage cannot be read (the callback prints it in one line and leaves the trial).
    """
    missing = trial.checkpoint
    fs = missing.filesystem
    if holds_files(fs, missing.path):
        return None
    folder = posixpath.dirname(missing.path)
    if folder != ray_private.trial_folder_path(trial):  # PBT: another member's checkpoint; its own bookkeeping owns it
        return (
            f"{trial}: the checkpoint it would restore from, {missing.path}, belongs to another trial and is "
            "gone; left to Tune"
        )
    rows = reported_checkpoints(fs, folder)
    left = sorted(
        (int(m.group(1)), info.base_name)
        for info in fs.get_file_info(pafs.FileSelector(folder))
        if info.type == pafs.FileType.Directory
        and (m := CHECKPOINT_DIR.match(info.base_name))
        and info.base_name in rows
        and holds_files(fs, info.path)
    )
    checkpoints = [(tune.Checkpoint(posixpath.join(folder, name), filesystem=fs), rows[name]) for _, name in left]
    # Tune's index of the last checkpoint: the next one is index + 1, not one kept
    ray_private.replace_checkpoints(trial, checkpoints, left[-1][0] if left else None)
    gone = posixpath.basename(missing.path)
    if not left:
        return (
            f"{trial}: its checkpoint {gone} was deleted before Tune's last experiment snapshot was saved, "
            "and no other reported checkpoint is left: it starts again from the beginning"
        )
    name = left[-1][1]
    return (
        f"{trial}: its checkpoint {gone} was deleted before Tune's last experiment snapshot was saved; "
        f"resuming from {name} (iteration {rows[name].get('training_iteration', '?')}) instead"
    )
