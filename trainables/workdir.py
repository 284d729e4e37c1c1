"""A command trial's working folder: a snapshot of the user's code at launch, copied into each trial's folder.

Why copies and not links for the code: a script writing to a path that already exists (a
`checkpoint.pth.tar` left in the repo, a log appended to, a file in an existing `experiment/`)
would write through a link into the snapshot that every trial shares. The copied part is the
small files (code, configs: at most `MAX_SNAPSHOT_BYTES` in all); data is linked, never copied:
a file over `LINK_ABOVE_BYTES`, a folder named like data (`DATA_DIRS`) or holding more than
`LINK_DIR_ENTRIES` entries is a symbolic link to the original, absolute path.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import time
from pathlib import Path

from trainables import records

EXCLUDED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache", ".pytest_cache")
EXCLUDED += (".ruff_cache", ".ipynb_checkpoints", "node_modules", ".tox", "*.egg-info")
# outputs of earlier runs in the repo: a trial must not resume from, overwrite, or read as its own metrics
EXCLUDED += ("*.pth.tar", "*.ckpt", "*tfevents*", "runs", "outputs", "multirun", "lightning_logs", "wandb", "mlruns")
DATA_DIRS = ("data", "datasets", "dataset")  # linked whole: read by trials, never copied
LINK_ABOVE_BYTES = 1024 * 1024  # a larger file is linked (weights, data files), not copied
LINK_DIR_ENTRIES = 1000  # a folder with more entries (an image folder) is linked whole
MAX_SNAPSHOT_BYTES = 100 * 1024 * 1024  # copied bytes in all; above: refused (see `snapshot_code`)


class SnapshotTooLarge(ValueError):
    """The code folder holds more than `MAX_SNAPSHOT_BYTES` of small files to copy."""


def snapshot_code(source: Path, dest: Path, skip: tuple[Path, ...] = (), limit: int = MAX_SNAPSHOT_BYTES) -> dict:
    """Copy the code folder `source` into the new folder `dest`, data linked; write its manifest.

    Args:
        source: the folder the sweep is launched from (its relative paths are the script's).
        dest: where the snapshot goes (`<experiment>/code`); replaced if it exists.
        skip: folders left out (the sweep's own storage folder when it lies inside `source`).
        limit: bytes of copied files allowed in all.
    Returns:
        The manifest: {"source", "taken" (local time), "files" (copied), "bytes" (copied),
        "linked" (relative paths linked to the original), "excluded" (name patterns)}.
    Raises:
        SnapshotTooLarge: over `limit`, naming the largest top-level entries (nothing is written).
    """
    source, dest = source.resolve(), Path(dest)
    skip = tuple(p.resolve() for p in skip)
    paths = list(_walk(source, skip))
    copied = {path: path.stat().st_size for path in paths if not _linked(path)}
    manifest = {"source": str(source), "taken": time.strftime("%Y-%m-%d %H:%M:%S"), "files": len(copied)}
    manifest |= {"bytes": sum(copied.values()), "linked": [], "excluded": list(EXCLUDED), "limit_bytes": limit}
    if manifest["bytes"] > limit:
        sizes: dict[str, int] = {}
        for path, size in copied.items():
            top = path.relative_to(source).parts[0]
            sizes[top] = sizes.get(top, 0) + size
        largest = ", ".join(f"{name} {sizes[name] / 2**20:.1f} MiB" for name in sorted(sizes, key=sizes.get)[::-1][:3])
        raise SnapshotTooLarge(
            f"the code folder {source} holds {manifest['bytes'] / 2**20:.1f} MiB of files under "
            f"{LINK_ABOVE_BYTES / 2**20:g} MiB to snapshot, more than {limit / 2**20:g} MiB (largest: {largest}); "
            "run from the folder of the code only, or --in-place to run every trial in it"
        )
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for path in paths:
        target = partial / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path in copied:
            shutil.copy2(path, target)
        else:
            target.symlink_to(path)
            manifest["linked"].append(str(path.relative_to(source)))
    partial.mkdir(parents=True, exist_ok=True)
    records.write_code_manifest(partial, manifest)  # where it came from, when, its size and its links
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return manifest


def fill_work_dir(snapshot: Path, work_dir: Path) -> None:
    """Copy the snapshot into a trial's working folder, its links as links; files already there stay.

    A retried or resumed trial keeps what it wrote (its own `checkpoint.pth.tar`, an edited
    config); a path missing is copied again. The manifest is not copied.
    """
    for folder, dirs, files in os.walk(snapshot):
        relative = Path(folder).relative_to(snapshot)
        (work_dir / relative).mkdir(parents=True, exist_ok=True)
        for name in dirs + files:
            src, dst = Path(folder) / name, work_dir / relative / name
            if (relative == Path(".") and name == records.CODE_MANIFEST) or dst.is_symlink() or dst.exists():
                continue
            if src.is_symlink():
                dst.symlink_to(os.readlink(src))
            elif src.is_file():
                shutil.copy2(src, dst)
                dst.chmod(dst.stat().st_mode | stat.S_IWUSR)


def _walk(source: Path, skip: tuple[Path, ...]):
    """The files and linked folders to put in the snapshot, top-down; excluded names are left out."""
    for folder, dirs, files in os.walk(source):
        kept = []
        for name in sorted(dirs):
            path = Path(folder) / name
            if _excluded(name) or path.resolve() in skip:
                continue
            if path.is_symlink() or name.lower() in DATA_DIRS or _many_entries(path):
                yield path  # linked whole
            else:
                kept.append(name)
        dirs[:] = kept
        yield from (Path(folder) / name for name in sorted(files) if not _excluded(name))


def _excluded(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED)


def _many_entries(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(i >= LINK_DIR_ENTRIES for i, _ in enumerate(entries))


def _linked(path: Path) -> bool:
    """Whether `path` goes into the snapshot as a link: a folder (data), a link, or a large file."""
    return path.is_dir() or path.is_symlink() or not path.is_file() or path.stat().st_size > LINK_ABOVE_BYTES
