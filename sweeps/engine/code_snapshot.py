"""Take the code snapshot a command sweep runs (`<experiment>/code`), once per launch, before Ray starts."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sweeps.engine.flags import UsageError
from trainables import records
from trainables.workdir import SnapshotTooLarge, snapshot_code


def take_snapshot(experiment_dir: str, in_place: bool, resume: bool, source: str | None = None) -> dict | None:
    """The snapshot of the launch folder the trials run, taken now, or kept from the launch `--resume` continues.

    Args:
        experiment_dir: `<storage-path>/<name>`; a local folder (object storage: no snapshot).
        in_place: `--in-place`: every trial runs in the launch folder itself, as before; no snapshot.
        resume: `--resume`: the newest snapshot is kept (the code at the launch being continued).
    A launch never replaces an earlier snapshot: trials still running from it (another driver on
    the same folder, refused later by `driver_lock`) keep their code.
        source: the code folder; default: the current working folder.
    Returns:
        {"path": the snapshot folder, "source", "files", "bytes", "linked": count}, also printed in
        one line, or None when trials run in the launch folder (in place, or object storage).
    Raises:
        UsageError: the code folder holds too much to copy (`trainables.workdir.MAX_SNAPSHOT_BYTES`).
    """
    if in_place:
        return None
    if "://" in experiment_dir:
        print(f"code snapshot: none with object storage ({experiment_dir}); trials run in the launch folder")
        return None
    # <experiment>/code/<launch time>: the code every trial of that launch copies into its folder
    earlier = sorted(records.code_dir(experiment_dir).glob(f"*/{records.CODE_MANIFEST}"))
    manifest = records.read_code_manifest(earlier[-1].parent) if resume and earlier else None  # torn: warned
    if manifest is not None:
        dest, verb = earlier[-1].parent, "kept from the launch of"
    else:
        dest = records.code_dir(experiment_dir) / time.strftime("%Y%m%d-%H%M%S")
        dest = dest.with_name(dest.name + f"-{len(earlier)}") if dest.exists() else dest
        try:
            manifest = snapshot_code(
                Path(source or os.getcwd()), dest, skip=(Path(experiment_dir), Path(experiment_dir).parent)
            )
        except SnapshotTooLarge as e:
            raise UsageError(str(e)) from None
        verb = "taken"
    summary = {"path": str(dest), "source": manifest["source"], "files": manifest["files"], "bytes": manifest["bytes"]}
    summary |= {"linked": len(manifest["linked"]), "taken": manifest["taken"]}
    print(
        f"code snapshot {verb} {manifest['taken']}: {manifest['files']} files, {manifest['bytes'] / 2**20:.1f} MiB "
        f"of {manifest['source']} in {dest} ({len(manifest['linked'])} data paths linked); each trial runs in "
        "its own copy ({trial_dir}); --in-place runs them in the launch folder",
        flush=True,
    )
    return summary
