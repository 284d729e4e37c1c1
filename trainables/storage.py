"""Where a running trial's own files go: its folder on the experiment's storage.

Tune gives a trial two folders. `tune.get_context().get_trial_dir()` is a staging folder named
after the Ray session on the *driver's* node: on another node of a cluster it does not exist, and
a resumed experiment (a new session) never sees it again. The trial's folder on storage
(`<storage_path>/<name>/<trial>`) is the same for a retry and for `--resume`, on every node that
mounts the storage (a multi-node sweep requires shared storage: `sweeps/engine/gpus.py:check_shared_storage`).
So `noise.json`, `trial_config.json`, `confusion.json`, `divergence.json`, the OOM marker and a
command's `{trial_dir}` are written there. With remote storage (s3://...) there is no such local
folder: files then go to the trial's working directory on its node, which Tune copies to storage
(`SyncConfig(sync_artifacts=True)`). Ray has no public API for the storage folder, hence the
guarded internal one.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path


def trial_storage_dir() -> Path | None:
    """The running trial's folder on local (or mounted) storage; None with remote storage or
    outside a Tune trial."""
    try:
        import pyarrow.fs

        from trainables import ray_private

        storage = ray_private.train_session().storage
        if isinstance(storage.storage_filesystem, pyarrow.fs.LocalFileSystem):
            return Path(storage.trial_fs_path)
    except Exception:  # not in a trial, or another Ray version
        pass
    return None


def trial_folder() -> Path:
    """The folder a running trial writes its own files to (created if missing): its storage
    folder, else its working directory (Ray starts each trial in its own folder on its node)."""
    folder = trial_storage_dir()
    if folder is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from ray import tune

            staging = Path(tune.get_context().get_trial_dir())
        folder = staging if staging.is_dir() else Path(os.getcwd())
    folder.mkdir(parents=True, exist_ok=True)
    return folder
