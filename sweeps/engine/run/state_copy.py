"""A last whole copy of Tune's experiment state, and `--resume` from it when the state is torn.

Tune writes `experiment_state-<session>.json` with a plain `open(..., "w")` and copies it to storage
(`TuneController.save_to_dir`, Ray 2.x): a full disk, or a copy of the folder cut short, leaves it cut
mid-file. `Tuner.restore` then cannot read it (on Ray 2.60 it went on to `KeyError: 'x'` in the trial
namer). So while a sweep runs, `KeepWholeState` copies each newly saved state that parses as a whole
to `<state>.whole` (an atomic write); `restore_whole_state`, before `Tuner.restore`, puts that copy back
over a torn state with one warning line. A trial that finished after the copy was taken is listed there as
running: Tune restores it from its last checkpoint, whose epoch is its last, and it trains nothing again
(tests/sweeps/test_faults.py). The copy's name does not match Tune's `experiment_state-*.json`.
"""

from __future__ import annotations

import json
import posixpath
import sys
import time

import pyarrow.fs as pafs
from ray import tune

from sweeps.engine.flags import UsageError
from trainables.experiment import storage

WHOLE = ".whole"  # suffix of the last whole copy of a state file


def newest_state(experiment_dir: str) -> str | None:
    """The path (or URI) of the experiment state `Tuner.restore` reads: the greatest `experiment_state-*.json`
    name (`ray.tune.execution.experiment_state._find_newest_experiment_checkpoint`); None when there is none."""
    fs, inner, prefix = storage.filesystem_of(experiment_dir)
    try:
        names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(inner)) if i.type == pafs.FileType.File]
    except (FileNotFoundError, OSError):
        return None
    states = [n for n in names if n.startswith("experiment_state-") and n.endswith(".json")]
    return prefix + posixpath.join(inner, max(states)) if states else None


def is_whole(data: bytes) -> bool:
    """Whether `data` is a whole Tune experiment state: JSON holding a `trial_data` list and `runner_data`."""
    try:
        state = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(state, dict) and isinstance(state.get("trial_data"), list) and "runner_data" in state


def restore_whole_state(experiment_dir: str) -> None:
    """Before `Tuner.restore`: when the newest experiment state is torn, put its last whole copy back over
    it, with one warning line naming the torn file and the copy's time.

    Raises:
        UsageError: the state is torn and no whole copy of it exists (a sweep of an earlier release): the
            line says that a run without `--resume` reuses every finished trial from its folder.
    """
    state = newest_state(experiment_dir)
    if state is None or is_whole(_read(state)):
        return
    copy = _read(state + WHOLE)
    if not is_whole(copy):
        raise UsageError(
            f"{state} is torn (cut mid-file: a full disk or a copy cut short) and no whole copy of it was kept, so "
            "--resume cannot go on; run the same command without --resume: finished trials are reused from "
            "their folders, the others run again"
        )
    saved = time.strftime("%H:%M:%S", time.localtime(storage.modified(state + WHOLE) or 0))
    storage.write_bytes(state, copy)
    print(
        f"warning: {state} is torn (cut mid-file); resuming from its last whole copy ({posixpath.basename(state)}"
        f"{WHOLE}, saved {saved}): trials that finished since are not run again",
        file=sys.stderr,
        flush=True,
    )


def _read(path: str) -> bytes:
    try:
        return storage.read_bytes(path)
    except OSError:
        return b""


class KeepWholeState(tune.Callback):
    """Tune callback: after each step and at the sweep's end, copy the experiment state to `<state>.whole`
    when Tune has saved a new one and it is whole (read back from storage, so a copy cut short is not kept)."""

    def __init__(self, experiment_dir: str):
        self.experiment_dir = str(experiment_dir)
        self._seen: tuple | None = None  # (path, mtime) of the state last looked at

    def on_step_end(self, iteration, trials, **info):
        self.keep()

    def on_experiment_end(self, trials, **info):
        self.keep()

    def keep(self) -> None:
        """Copy a newly saved whole state aside; a state that cannot be read or written (a full disk) keeps
        the copy there is (`storage.write_bytes` replaces it whole or not at all)."""
        state = newest_state(self.experiment_dir)
        seen = (state, storage.modified(state)) if state else None
        if seen is None or seen == self._seen:
            return
        self._seen = seen
        data = _read(state)
        if is_whole(data):
            try:
                storage.write_bytes(state + WHOLE, data)
            except OSError:
                pass  # the disk is full: the previous copy stays whole
