"""Loading a trial's checkpoint safely: never half-written bytes, never pickled code, never old progress.

Tune hands a resumed trial the checkpoint its experiment state last recorded. Two things can make
that the wrong one to load:
- the file is torn or missing (a disk that filled up, a copy killed half-way, a folder deleted by
  hand): `torch.load` fails on a truncated zip, so we fall back to the newest checkpoint of the same
  trial that does load, or stop with an error naming every file tried;
- the experiment state is stale: Tune saves it at most every ~10 s (and after every `num_to_keep`
  trial checkpoints), so after the driver is killed the recorded checkpoint can be older than the
  newest one the trial's history (`result.json`, saved with it) records. Loading that one means a
  resumed sweep never redoes an epoch.
So the candidates are the `checkpoint_*` folders of the trial that its history knows, and the one
with the highest `epoch` that loads wins. A checkpoint of another trial (PBT's exploit: Tune gives a
better member's) is loaded alone: the member's own newer checkpoints would undo the exploit.
A folder newer than both Tune's checkpoint and the newest checkpoint a `result.json` row names is
left out: the worker stores a checkpoint before the driver logs its row, so a worker killed in
between leaves a checkpoint whose row never reached the history; the retry trains that epoch again
and its row is logged once (no row lost, none twice).
Every load uses `weights_only=True`: a checkpoint holding pickled code (a malicious `__reduce__`)
is refused, and nothing in it runs.
"""

from __future__ import annotations

import posixpath
import re
import warnings
from pathlib import Path

import pyarrow.fs as pafs

from trainables.experiment import storage

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_DIR = re.compile(r"^checkpoint_(\d+)$")  # Tune's StorageContext._make_checkpoint_dir_name


def load_latest_state(tune_checkpoint_dir: str | Path | None, trial_dir: str | Path | None) -> dict | None:
    """The newest loadable checkpoint state of a trial, or None to start from scratch.

    Args:
        tune_checkpoint_dir: local folder of the checkpoint Tune gave (`tune.get_checkpoint()`), or None.
        trial_dir: the trial's folder on storage, where its `checkpoint_*` folders and `result.json` live;
            None when unknown (then only `tune_checkpoint_dir` is tried). Only its folders up to the newest
            one that Tune gave or that `result.json` names are tried (`recorded_checkpoint_folders`).
    Returns:
        The state dict of the loadable checkpoint with the highest `epoch` (see `train_epochs`); None
        when there is no checkpoint at all.
    Raises:
        RuntimeError: checkpoints exist but none loads; the message lists each file and its error.
    """
    candidates = []
    if tune_checkpoint_dir is not None:
        candidates.append(Path(tune_checkpoint_dir))
    if trial_dir is not None and Path(trial_dir).is_dir() and not _from_another_trial(tune_checkpoint_dir, trial_dir):
        candidates += [
            p for p in recorded_checkpoint_folders(Path(trial_dir), tune_checkpoint_dir) if p not in candidates
        ]
    if not candidates:
        return None
    import torch  # here, not at the top: a command sweep's driver imports this module (checkpoint_repair), never torch

    best, failures = None, []
    for folder in candidates:
        try:
            state = torch.load(folder / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
        except Exception as e:  # torn zip, missing file, pickled code refused by weights_only
            failures.append(
                f"{folder / CHECKPOINT_FILE}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            )
            continue
        if best is None or state["epoch"] > best["epoch"]:
            best = state
    if best is None:
        raise RuntimeError(
            "no checkpoint of this trial can be loaded, so it cannot resume: "
            + "; ".join(failures)
            + " (rerun the trial from scratch: run the sweep again without --resume)"
        )
    if failures:
        warnings.warn(f"skipped unloadable checkpoint(s), resuming from epoch {best['epoch']}: " + "; ".join(failures))
    return best


def _from_another_trial(tune_checkpoint_dir: str | Path | None, trial_dir: str | Path) -> bool:
    """Whether Tune gave a checkpoint of another trial's folder: PBT's exploit (the member continues from a
    better member's checkpoint). Then that one is loaded, never a newer one of this trial's own."""
    if tune_checkpoint_dir is None:
        return False
    return Path(tune_checkpoint_dir).resolve().parent != Path(trial_dir).resolve()


def recorded_checkpoint_folders(trial_dir: Path, tune_checkpoint_dir: str | Path | None) -> list[Path]:
    """The trial's `checkpoint_*` folders, oldest first, up to the newest that its history knows: the
    one Tune gave (`tune_checkpoint_dir`, when in `trial_dir`) or the newest a `result.json` row names.
    Newer folders were stored by a worker killed before the driver logged their row (see the module
    docstring); [] when the history knows none."""
    known = [
        int(m.group(1))
        for name in reported_checkpoints(pafs.LocalFileSystem(), str(trial_dir))
        if (m := CHECKPOINT_DIR.match(name))
    ]
    if tune_checkpoint_dir is not None and Path(tune_checkpoint_dir).parent == trial_dir:
        known += [int(m.group(1))] if (m := CHECKPOINT_DIR.match(Path(tune_checkpoint_dir).name)) else []
    folders = sorted(
        (int(m.group(1)), p)
        for p in trial_dir.glob("checkpoint_*")
        if p.is_dir() and (m := CHECKPOINT_DIR.match(p.name))
    )
    return [p for index, p in folders if known and index <= max(known)]


def reported_checkpoints(fs: pafs.FileSystem, folder: str) -> dict[str, dict]:
    """The result row that reported each checkpoint of a trial folder.

    Args:
        fs, folder: the trial folder on its storage (any pyarrow filesystem: local, s3).
    Returns:
        checkpoint folder name (`checkpoint_000003`) -> the last `result.json` row naming it in
        `checkpoint_dir_name`; empty when there is no `result.json`. A half-written last line is skipped.
    """
    try:
        with fs.open_input_stream(posixpath.join(folder, "result.json")) as f:
            data = f.readall()
    except FileNotFoundError:
        return {}
    return {row["checkpoint_dir_name"]: row for row in storage.json_lines(data) if row.get("checkpoint_dir_name")}
