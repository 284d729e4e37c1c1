"""Loading a trial's checkpoint safely: never half-written bytes, never pickled code, never old progress.

Tune hands a resumed trial the checkpoint its experiment state last recorded. Two things can make
that the wrong one to load:
- the file is torn or missing (a disk that filled up, a copy killed half-way, a folder deleted by
  hand): `torch.load` fails on a truncated zip, so we fall back to the newest checkpoint of the same
  trial that does load, or stop with an error naming every file tried;
- the experiment state is stale: Tune saves it at most every ~10 s (and after every `num_to_keep`
  trial checkpoints), so after the driver is killed the recorded checkpoint can be older than the
  newest one the trial wrote. Loading the newest one means a resumed sweep never redoes an epoch.
So the candidates are every `checkpoint_*` folder of the trial, and the one with the highest
`epoch` that loads wins. Every load uses `weights_only=True`: a checkpoint holding pickled code
(a malicious `__reduce__`) is refused, and nothing in it runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

CHECKPOINT_FILE = "checkpoint.pt"


def load_latest_state(tune_checkpoint_dir: str | Path | None, trial_dir: str | Path | None) -> dict | None:
    """The newest loadable checkpoint state of a trial, or None to start from scratch.

    Args:
        tune_checkpoint_dir: local folder of the checkpoint Tune gave (`tune.get_checkpoint()`), or None.
        trial_dir: the trial's folder on storage, where its `checkpoint_*` folders live; None when unknown
            (then only `tune_checkpoint_dir` is tried).
    Returns:
        The state dict of the loadable checkpoint with the highest `epoch` (see `train_epochs`); None
        when there is no checkpoint at all.
    Raises:
        RuntimeError: checkpoints exist but none loads; the message lists each file and its error.
    """
    candidates = []
    if tune_checkpoint_dir is not None:
        candidates.append(Path(tune_checkpoint_dir))
    if trial_dir is not None and Path(trial_dir).is_dir():
        candidates += sorted(p for p in Path(trial_dir).glob("checkpoint_*") if p.is_dir() and p not in candidates)
    if not candidates:
        return None
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
