"""A command trial's working folder: the launch folder's copy, in the launch folder's place.

At launch the launch folder's code is copied once into a snapshot (`snapshot_code`). Each trial
then gets `<trial>/work_tree/`, a mirror of the folders around the launch folder, and its own copy
of the snapshot inside it at the launch folder's place (`fill_work_dir`), so every relative path
resolves from the trial's folder as from the launch folder: `../data`, `../configs/x.yaml`,
`sys.path.insert(0, '..')` inside the repository, `../../datasets` beside it. The mirror goes up
`LEVELS_ABOVE` levels, or to the parent of the repository (the nearest folder with `.git`) when
that is higher; each entry of those folders but the way down is a symbolic link to the real one,
so a write through `..` lands where it would from the user's shell.

Why copies and not links for the code: a script writing to a path that already exists (a
`checkpoint.pth.tar` left in the repo, a log appended to, a file in an existing `experiment/`)
would write through a link into the snapshot that every trial shares. Data is linked, never
copied: a file over `LINK_ABOVE_BYTES`, a folder of more than `LINK_DIR_ENTRIES` entries (an image
folder, not looked into), and in a folder named like data (`DATA_DIRS`) every file but Python
source, a folder of it with no Python source under it as one link. The rest is copied: Python
source (`CODE_FILES`) wherever it is, so a package named `data` (`timm/data/`, `data/__init__.py`)
edited after launch reaches no trial, and a 50 GB `data/` holding a `prepare.py` gets that one file
copied; other small files (configs) outside data folders; at most `MAX_SNAPSHOT_BYTES` in all. The
snapshot itself holds only the copied files and its manifest (the links are made from the manifest), so it can
travel to nodes without a shared folder as Ray's `runtime_env` `working_dir`.

A path a trial does not read cannot fail it (`_check_node`): the folders around the launch folder come and go
(a /tmp or home folder holds other programs' folders), so on the launching node nothing around it is checked
(a link to what went since launch dangles, harmlessly); on another node a missing one is a warning in the trial's
log. A trial fails here only for a linked data path its command names that this node lacks.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import socket
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from trainables.experiment import records

EXCLUDED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache", ".pytest_cache")
EXCLUDED += (".ruff_cache", ".ipynb_checkpoints", "node_modules", ".tox", "*.egg-info")
# outputs of earlier runs in the repo: a trial must not resume from, overwrite, or read as its own metrics
EXCLUDED += ("*.pth.tar", "*.ckpt", "*tfevents*", "runs", "outputs", "multirun", "lightning_logs", "wandb", "mlruns")
DATA_DIRS = ("data", "datasets", "dataset")  # all but their Python source linked: read by trials, never copied
CODE_FILES = ("*.py", "*.pyi", "*.pyx", "*.pxd")  # Python source: copied wherever it is, whatever its size
LINK_ABOVE_BYTES = 1024 * 1024  # a larger file is linked (weights, data files), not copied
LINK_DIR_ENTRIES = 1000  # a folder with more entries (an image folder) is linked whole
MAX_SNAPSHOT_BYTES = 100 * 1024 * 1024  # copied bytes in all; above: refused (see `snapshot_code`)
LEVELS_ABOVE = 2  # levels above the launch folder mirrored at least (`../../datasets`); more up to the repo's parent
RUNTIME_ENV_CODE = "runtime_env"  # code_dir of a sweep whose snapshot is Ray's runtime_env working_dir
MIRROR = records.WORK_TREE  # <trial>/work_tree: the folders around the launch folder; <trial>/work links into it


class SnapshotTooLarge(ValueError):
    """The code folder holds more than `MAX_SNAPSHOT_BYTES` of small files to copy."""


class MissingOnNode(FileNotFoundError):
    """A linked data path that the trial's command names is missing on the trial's node."""


def snapshot_code(source: Path, dest: Path, skip: tuple[Path, ...] = (), limit: int = MAX_SNAPSHOT_BYTES) -> dict:
    """Copy the code folder `source` into the new folder `dest`, data recorded as links; write its manifest.

    Args:
        source: the folder the sweep is launched from (its relative paths are the script's).
        dest: where the snapshot goes (`<experiment>/code/<time>`); replaced if it exists.
        skip: folders left out (the sweep's own storage folder when it lies inside `source`).
        limit: bytes of copied files allowed in all.
    Returns:
        The manifest: {"source", "taken" (local time), "files" (copied), "bytes" (copied),
        "linked" (relative paths linked to the original), "excluded" (name patterns), "top" (the
        highest folder mirrored, `mirror_top`), "around" ({folder relative to top: its folders' names,
        listed inside the repository only}, what a trial on another node is warned of missing), "node"
        (where it was taken)}.
    Raises:
        SnapshotTooLarge: over `limit`, naming the largest top-level entries (nothing is written).
    """
    source, dest = source.resolve(), Path(dest)
    skip = tuple(p.resolve() for p in skip)
    to_copy, linked = [], []
    _sort_folder(source, skip, False, to_copy, linked)
    copied = {path: path.stat().st_size for path in to_copy}
    manifest = {"source": str(source), "taken": time.strftime("%Y-%m-%d %H:%M:%S"), "files": len(copied)}
    manifest |= {"bytes": sum(copied.values()), "excluded": list(EXCLUDED), "limit_bytes": limit}
    manifest["linked"] = [str(path.relative_to(source)) for path in linked]
    top = mirror_top(source)
    manifest |= {"top": str(top), "around": _folders_around(source, top), "node": socket.gethostname()}
    if manifest["bytes"] > limit:
        raise SnapshotTooLarge(_too_large(source, copied, manifest["bytes"], limit))
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for path in copied:
        target = partial / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    partial.mkdir(parents=True, exist_ok=True)
    records.write_code_manifest(partial, manifest)  # where it came from, when, its size and its links
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return manifest


def mirror_top(source: Path) -> Path:
    """The highest folder a trial's mirror holds for the launch folder `source` (resolved):
    `LEVELS_ABOVE` levels up, or the parent of the repository holding `source` (the nearest folder
    with `.git`, `source` itself included) when that is higher; `/` at most."""
    chain = [source, *source.parents]
    levels = LEVELS_ABOVE
    for depth, folder in enumerate(chain):
        if (folder / ".git").exists():
            levels = max(levels, depth + 1)
            break
    return chain[min(levels, len(chain) - 1)]


def fill_work_dir(snapshot: Path, work_dir: Path, command: Sequence[str] = ()) -> Path:
    """Make a trial's working folder: its copy of the snapshot at the launch folder's place in a
    mirror of the folders around it (`<trial>/work_tree/...`), with `work_dir` (`<trial>/work`,
    `{trial_dir}`) a link to it. Files already there stay: a retried or resumed trial keeps what it
    wrote (its own `checkpoint.pth.tar`, an edited config); a path missing is copied again.

    Args:
        snapshot: a folder `snapshot_code` wrote (on a node without a shared folder: Ray's copy of it).
        work_dir: `<trial>/work`. A real folder there (a trial of an older version) is filled as it is.
        command: the trial's command as run (argv); the linked data paths it names must be on this node.
    Returns:
        The working folder the command runs in (`work_dir` resolved).
    Raises:
        MissingOnNode: a linked data path that `command` names is missing on this node (one line naming
            the paths and the node). What else is missing is at most a warning on stderr (`_check_node`).
    """
    manifest = records.read_code_manifest(snapshot) or {}
    if "top" not in manifest or (work_dir.is_dir() and not work_dir.is_symlink()):
        work_dir.mkdir(parents=True, exist_ok=True)
        _copy_files(snapshot, work_dir)  # the layout before the mirror: a copy in <trial>/work
        return work_dir
    source, top = Path(manifest["source"]), Path(manifest["top"])
    for warning in _check_node(manifest, source, top, command):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    parts = source.relative_to(top).parts
    folder = work_dir.with_name(MIRROR)
    for depth, part in enumerate(parts):
        _link_entries(top.joinpath(*parts[:depth]), folder, skip=part)
        folder = folder / part
    folder.mkdir(parents=True, exist_ok=True)
    _copy_files(snapshot, folder)
    for relative in manifest["linked"]:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.symlink(source / relative, folder / relative)
    if not work_dir.is_symlink():
        work_dir.symlink_to(folder.relative_to(work_dir.parent))
    return folder


def _check_node(manifest: dict, source: Path, top: Path, command: Sequence[str]) -> list[str]:
    """Raise MissingOnNode for the linked data paths that `command` names (a word, `--flag=PATH`, or a
    path inside one) and this node lacks. On another node than the launching one, return a warning
    for the folders around the launch folder and the other linked paths it lacks; on the launching
    node nothing else is looked at: what went there since launch, the user's shell would miss too."""
    linked = [rel for rel in manifest["linked"] if not os.path.lexists(source / rel)]
    named = _named_paths(command, source)
    read = [rel for rel in linked if any(f"{n}/".startswith(f"{rel}/") or rel.startswith(f"{n}/") for n in named)]
    here, launched = socket.gethostname(), manifest.get("node", "the launching node")
    if read:
        raise MissingOnNode(
            f"{_shown([source / rel for rel in read])}: missing on node {here} (present on {launched} at launch); "
            "the command names it: put it at the same path on every node"
        )
    if launched == here:
        return []
    around = manifest.get("around") or {}
    missing = [top / rel for rel in around if not (top / rel).is_dir()]  # a folder above the launch folder
    missing = missing or [
        top / rel / name for rel, names in around.items() for name in names if not (top / rel / name).exists()
    ]
    missing += [source / rel for rel in linked]
    if not missing:
        return []
    return [
        f"{_shown(missing)}: missing on node {here} (present on {launched} at launch); a relative path "
        "through them reads nothing here"
    ]


def _named_paths(command: Sequence[str], source: Path) -> set[str]:
    """The paths inside `source` that the words of `command` name (a word, or the value of `--flag=VALUE`),
    relative to it (posix), as the command run from there reads them."""
    named = set()
    for word in command:
        for text in {word, word.partition("=")[2]} - {""}:
            if "://" not in text:
                relative = os.path.relpath(os.path.normpath(os.path.join(source, text)), source)
                if relative != "." and not relative.startswith(".."):
                    named.add(Path(relative).as_posix())
    return named


def _shown(paths: list) -> str:
    """The first five of `paths`, then how many more."""
    return ", ".join(map(str, paths[:5])) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _link_entries(real: Path, mirror: Path, skip: str) -> None:
    """Make `mirror` and in it a link to each entry of the folder `real` but `skip` (entries there stay;
    none where this node lacks `real`: `_check_node` warned)."""
    mirror.mkdir(parents=True, exist_ok=True)
    if not real.is_dir():
        return
    with os.scandir(real) as entries:
        for entry in entries:
            if entry.name != skip:
                with contextlib.suppress(FileExistsError):
                    os.symlink(entry.path, mirror / entry.name)


def _copy_files(snapshot: Path, dest: Path) -> int:
    """Copy the snapshot's files into `dest` (an older snapshot's links as links), but the manifest and
    the files already in `dest`; returns how many were copied. Plain reads and writes, no `copystat`:
    about 3x faster than `shutil.copy2` on 1,000 small files."""
    copied = 0
    for folder, dirs, files in os.walk(snapshot):
        relative = os.path.relpath(folder, snapshot)
        target = dest if relative == "." else dest / relative
        target.mkdir(parents=True, exist_ok=True)
        for name in dirs + files:
            src = os.path.join(folder, name)
            if relative == "." and name == records.CODE_MANIFEST:
                continue
            if os.path.islink(src):
                with contextlib.suppress(FileExistsError):
                    os.symlink(os.readlink(src), target / name)
            elif name in files:
                copied += _copy_file(src, target / name)
    return copied


def _copy_file(src: str, dst: Path) -> int:
    """Copy one file, its permission bits kept (owner-writable); 0 when `dst` exists (kept)."""
    mode = (os.stat(src).st_mode & 0o777) | stat.S_IWUSR
    try:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return 0
    with open(src, "rb") as reader, os.fdopen(fd, "wb") as writer:
        shutil.copyfileobj(reader, writer)
    return 1


def _folders_around(source: Path, top: Path) -> dict[str, list[str]]:
    """{each folder from `top` down to `source`'s parent, relative to `top`: the names of its folders
    but the way down and hidden ones}, what a trial on another node is warned of missing. Names are
    listed only inside the repository holding `source`: a /tmp, home or scratch folder above it is
    recorded by its path alone, as what other programs keep there is no trial's business."""
    repo = next((folder for folder in [source, *source.parents] if (folder / ".git").exists()), None)
    around, parts = {}, source.relative_to(top).parts
    for depth, part in enumerate(parts):
        folder, names = top.joinpath(*parts[:depth]), []
        if repo is not None and folder.is_relative_to(repo):
            with os.scandir(folder) as entries:
                names = [e.name for e in entries if e.name != part and not e.name.startswith(".") and e.is_dir()]
        around[str(Path(*parts[:depth]))] = sorted(names)
    return around


def _too_large(source: Path, copied: dict, total: int, limit: int) -> str:
    """The refusal of a code folder with `total` bytes to copy, over `limit`: its three largest entries."""
    sizes: dict[str, int] = {}
    for path, size in copied.items():
        top = path.relative_to(source).parts[0]
        sizes[top] = sizes.get(top, 0) + size
    largest = ", ".join(f"{name} {sizes[name] / 2**20:.1f} MiB" for name in sorted(sizes, key=sizes.get)[::-1][:3])
    return (
        f"the code folder {source} holds {total / 2**20:.1f} MiB of files under "
        f"{LINK_ABOVE_BYTES / 2**20:g} MiB to snapshot, more than {limit / 2**20:g} MiB (largest: {largest}); "
        "run from the folder of the code only, or --in-place to run every trial in it"
    )


def _sort_folder(folder: Path, skip: tuple[Path, ...], in_data: bool, copied: list, linked: list) -> None:
    """Sort the entries under `folder` into files to copy and paths to link (appended to `copied` and
    `linked`, sorted by name, top-down); excluded names and the `skip` folders are left out.

    Python source (`CODE_FILES`) is copied wherever it is. Linked whole: a link, and a folder of more
    than `LINK_DIR_ENTRIES` entries (an image folder; not looked into). Elsewhere a file over
    `LINK_ABOVE_BYTES` is linked and a smaller one copied; inside a folder named like data
    (`DATA_DIRS`, `in_data` below it) every file but Python source is linked, and a folder with no
    Python source under it is one link.
    """
    with os.scandir(folder) as entries:
        entries = sorted(entries, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        if _excluded(entry.name):
            continue
        if entry.is_symlink():
            linked.append(path)
        elif entry.is_dir():
            if path.resolve() in skip:
                continue
            if _many_entries(path):
                linked.append(path)
                continue
            data = in_data or entry.name.lower() in DATA_DIRS
            inner, before = ([] if data else linked), len(copied)
            _sort_folder(path, skip, data, copied, inner)
            if data:  # a data folder with no Python source under it is one link, else its data is
                linked.extend(inner if len(copied) > before else [path])
        elif entry.is_file() and (_is_code(entry.name) or not (in_data or entry.stat().st_size > LINK_ABOVE_BYTES)):
            copied.append(path)
        else:
            linked.append(path)


def snapshot_copies(path: Path, relative: str) -> bool:
    """Whether `snapshot_code` copies the file `path` (`relative`: its path under the folder snapshotted):
    no excluded name on its way, not a link, and Python source or a small file outside data folders."""
    parts = Path(relative).parts
    if not parts or any(map(_excluded, parts)) or path.is_symlink() or not path.is_file():
        return False
    if _is_code(parts[-1]):
        return True
    return not any(part.lower() in DATA_DIRS for part in parts[:-1]) and path.stat().st_size <= LINK_ABOVE_BYTES


def _excluded(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED)


def _is_code(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in CODE_FILES)


def _many_entries(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(i >= LINK_DIR_ENTRIES for i, _ in enumerate(entries))


def code_folder(code_dir: str) -> Path:
    """The snapshot folder on this node: `code_dir`, or for `RUNTIME_ENV_CODE` Ray's copy of the job's
    `runtime_env` `working_dir`, the folder a worker starts in (Tune keeps it in TUNE_ORIG_WORKING_DIR
    before it moves the worker to the trial's folder; Ray also puts it first on PYTHONPATH).

    Raises:
        FileNotFoundError: no snapshot manifest there (the sweep was not started with the runtime_env).
    """
    if code_dir != RUNTIME_ENV_CODE:
        return Path(code_dir)
    candidates = [os.environ.get("TUNE_ORIG_WORKING_DIR", "")] + os.environ.get("PYTHONPATH", "").split(os.pathsep)
    for folder in filter(None, candidates):
        if Path(folder, records.CODE_MANIFEST).is_file():
            return Path(folder)
    raise FileNotFoundError(
        f"no code snapshot ({records.CODE_MANIFEST}) in this worker's runtime_env working_dir "
        f"(looked in {candidates[:2]}); the sweep's Ray was started without it"
    )


def keep_new_paths(snapshot: Path, work_dir: Path) -> list[Path]:
    """After a command exited 0, put what it created through `..` where the user's shell would have:
    each new entry of a folder above its working folder (a data set downloaded into a `../data` that
    did not exist) is moved to the real folder and replaced by a link, so later trials share it. A
    name the real folder got meanwhile (another trial's) stays in this trial's mirror.

    Args:
        snapshot, work_dir: as given to `fill_work_dir`.
    Returns:
        The real paths moved into, in the order found.
    """
    manifest = records.read_code_manifest(snapshot) or {}
    if "top" not in manifest or not work_dir.is_symlink():
        return []
    top, parts = Path(manifest["top"]), Path(manifest["source"]).relative_to(manifest["top"]).parts
    moved = []
    for depth, part in enumerate(parts):
        mirror, real = work_dir.with_name(MIRROR).joinpath(*parts[:depth]), top.joinpath(*parts[:depth])
        for entry in os.scandir(mirror):
            target = real / entry.name
            if entry.name == part or entry.is_symlink() or os.path.lexists(target):
                continue
            try:
                shutil.move(entry.path, target)  # a rename on one file system; else a copy, then removed
            except OSError:  # another trial's got there first
                continue
            os.symlink(target, entry.path)
            moved.append(target)
    return moved
