"""Take the code snapshot a command sweep runs (`<experiment>/code`), once per launch, before Ray starts."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from sweeps.engine.flags import UsageError
from trainables.command.workdir import (
    DATA_DIRS,
    LINK_ABOVE_BYTES,
    LINK_DIR_ENTRIES,
    SnapshotTooLarge,
    fill_work_dir,
    snapshot_code,
)
from trainables.experiment import records

SHOWN_LINKS = 4  # linked paths named in the launch line; the rest counted
RULE = (  # what `trainables.command.workdir.snapshot_code` copies and links, said in the launch line
    f"rule: Python source is copied, data linked: files over {LINK_ABOVE_BYTES / 2**20:g} MiB, folders of over "
    f"{LINK_DIR_ENTRIES} entries, all but the Python source in folders named {'/'.join(DATA_DIRS)}"
)


def take_snapshot(
    experiment_dir: str, in_place: bool, resume: bool, source: str | None = None, shared_fs: bool = True
) -> dict | None:
    """The snapshot of the launch folder the trials run, taken now, or kept from the launch `--resume` continues.

    Args:
        experiment_dir: `<storage-path>/<name>`; a local folder, or a URI (s3://...: no shared folder).
        in_place: `--in-place`: every trial runs in the launch folder itself, as before; no snapshot.
        resume: `--resume`: the newest snapshot is kept (the code at the launch being continued).
    A launch never replaces an earlier snapshot: trials still running from it (another driver on
    the same folder, refused later by `driver_lock`) keep their code.
        source: the code folder; default: the current working folder.
        shared_fs: False (`--no-shared-fs`, or object storage): the snapshot goes to a local temporary
            folder and travels to every node as Ray's `runtime_env` `working_dir` (see "runtime_env");
            the driver then moves into that folder, so the launch folder may be removed.
    Returns:
        {"path": the snapshot folder, "source", "files", "bytes", "linked": count, "taken",
        "setup_s": one trial's set-up measured now, "runtime_env": {"working_dir": path} or None},
        also printed as the launch line (`launch_line`); None when trials run in the launch folder.
    Raises:
        UsageError: the code folder holds too much to copy (`trainables.command.workdir.MAX_SNAPSHOT_BYTES`).
    """
    if in_place:
        print("--in-place: every trial runs in the launch folder itself, writes of concurrent trials meet there")
        return None
    local = "://" not in experiment_dir and shared_fs
    # <experiment>/code/<launch time>: the code every trial of that launch copies into its folder
    earlier = sorted(records.code_dir(experiment_dir).glob(f"*/{records.CODE_MANIFEST}")) if local else []
    manifest = records.read_code_manifest(earlier[-1].parent) if resume and earlier else None  # torn: warned
    if manifest is not None:
        dest, verb = earlier[-1].parent, "kept from the launch of"
    else:
        if local:
            dest = records.code_dir(experiment_dir) / time.strftime("%Y%m%d-%H%M%S")
            dest = dest.with_name(dest.name + f"-{len(earlier)}") if dest.exists() else dest
        else:
            dest = Path(tempfile.mkdtemp(prefix="raysweep-code-"), "code")
        skip = (Path(experiment_dir), Path(experiment_dir).parent) if "://" not in experiment_dir else ()
        try:
            manifest = snapshot_code(Path(source or os.getcwd()), dest, skip=skip)
        except SnapshotTooLarge as e:
            raise UsageError(str(e)) from None
        verb = "taken"
    summary = {"path": str(dest), "source": manifest["source"], "files": manifest["files"], "bytes": manifest["bytes"]}
    summary |= {"linked": len(manifest["linked"]), "taken": manifest["taken"], "setup_s": measure_setup(dest)}
    summary["runtime_env"] = None if local else {"working_dir": str(dest)}
    print(launch_line(manifest, summary, verb), flush=True)
    if not local:  # the launch folder may now be removed: Ray and Tune make paths absolute against this folder
        os.chdir(dest)
    return summary


def measure_setup(snapshot: Path) -> float:
    """Seconds one trial's working folder takes to make from `snapshot` (`fill_work_dir`), made once now
    in a temporary folder and removed (links are removed, never followed)."""
    with tempfile.TemporaryDirectory(prefix="raysweep-setup-") as folder:
        started = time.perf_counter()
        fill_work_dir(snapshot, records.work_dir(folder))
        return time.perf_counter() - started


def launch_line(manifest: dict, summary: dict, verb: str) -> str:
    """The launch's line on its code: what each trial copies and what it links, by path, the rule that
    decided it (`RULE`), and the set-up time."""
    source, top = manifest["source"], manifest.get("top")
    linked = [f"{source}/{rel}" for rel in manifest["linked"]]
    shown = ", ".join(linked[:SHOWN_LINKS]) + (
        f" and {len(linked) - SHOWN_LINKS} more" if len(linked) > SHOWN_LINKS else ""
    )
    around = (
        f"; every entry of the folders from {top} down to {Path(source).parent} is linked, so `..` and `../..` "
        "read and write the real ones"
        if top
        else ""
    )
    travels = " (travels to every node as Ray's runtime_env working_dir)" if summary["runtime_env"] else ""
    return (
        f"code snapshot {verb} {manifest['taken']} in {summary['path']}{travels}: each trial runs in its own "
        f"copy of {source} ({manifest['files']} files, {manifest['bytes'] / 2**20:.1f} MiB copied; "
        f"linked: {shown or 'nothing'}; {RULE})"
        f"{around}; set-up {summary['setup_s']:.2f} s per trial; --in-place runs every trial in the launch folder"
    )
