"""Files of an experiment wherever it lives, and the folder a running trial writes its own files to.

Files: a local folder or a URI (s3://, gs://, and any scheme pyarrow or fsspec know), through
pyarrow's file systems, the ones Ray Tune writes with. Paths are plain strings: `pathlib.Path` would
turn `s3://bucket` into `s3:/bucket`. Only pyarrow is imported (lazily), never pandas or torch, so the
sweep scripts, the driver lock and the analysis use this too. Every write is atomic (`write_bytes`).
Which file is which record: `trainables/experiment/records.py`.

The trial's folder: Tune gives a trial two folders. `tune.get_context().get_trial_dir()` is a staging folder named
after the Ray session on the *driver's* node: on another node of a cluster it does not exist, and
a resumed experiment (a new session) never sees it again. The trial's folder on storage
(`<storage_path>/<name>/<trial>`) is the same for a retry and for `--resume`, on every node that
mounts the storage (a multi-node sweep requires shared storage: `sweeps/engine/cluster/gpus.py:check_shared_storage`).
So the trial's records (`trainables/experiment/records.py`) and a command's `{trial_dir}` are written there. With
remote storage (s3://...) there is no such local folder: files then go to the trial's working directory
on its node, which Tune copies to storage (`SyncConfig(sync_artifacts=True)`). Ray has no public API for
the storage folder, hence the guarded internal one.
"""

from __future__ import annotations

import json
import os
import posixpath
import warnings
from pathlib import Path


def filesystem_of(path: str):
    """`(filesystem, path on it, prefix)` for a local path or URI; `prefix + path on it` gives the
    path or URI back. A URI pyarrow cannot open itself (`pyarrow.fs.FileSystem.from_uri`) is opened
    through fsspec (`fsspec.core.url_to_fs`, wrapped in `pyarrow.fs.FSSpecHandler`), as Ray does.

    Raises:
        ValueError: a URI that neither pyarrow nor fsspec can open (unknown scheme, missing package).
    """
    import pyarrow.fs as pafs

    text = os.fspath(path)
    if "://" not in text:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text)), ""
    scheme = text.split("://", 1)[0]
    try:
        fs, inner = pafs.FileSystem.from_uri(text)
    except (ValueError, OSError):  # pyarrow.ArrowInvalid is a ValueError
        try:
            import fsspec  # only needed for schemes pyarrow does not know

            fsspec_fs, inner = fsspec.core.url_to_fs(text)
        except (ImportError, ValueError) as e:
            raise ValueError(f"cannot open {text}: {e}") from None
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs))
    return fs, inner.rstrip("/") or inner, f"{scheme}://"


def join(path: str, *names: str) -> str:
    """`path/name/...` for a local path or a URI (no `pathlib`, which breaks `s3://`)."""
    return posixpath.join(os.fspath(path), *names) if "://" in os.fspath(path) else os.path.join(path, *names)


def exists(path: str) -> bool:
    """Whether a file or folder exists at a local path or URI."""
    if "://" not in os.fspath(path):
        return os.path.exists(path)
    import pyarrow.fs as pafs

    fs, inner, _ = filesystem_of(path)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


def modified(path: str) -> float | None:
    """Modification time (Unix seconds) of a file at a local path or URI; None when absent."""
    if "://" not in os.fspath(path):
        return os.path.getmtime(path) if os.path.exists(path) else None
    import pyarrow.fs as pafs

    fs, inner, _ = filesystem_of(path)
    info = fs.get_file_info(inner)
    return None if info.type == pafs.FileType.NotFound or info.mtime is None else info.mtime.timestamp()


def read_bytes(path: str) -> bytes:
    """The whole file at a local path or URI. Raises FileNotFoundError (an OSError) when absent."""
    if "://" not in os.fspath(path):
        with open(path, "rb") as f:
            return f.read()
    fs, inner, _ = filesystem_of(path)
    with fs.open_input_stream(inner) as f:
        return f.readall()


def json_lines(data: bytes) -> list[dict]:
    """The complete rows of a JSON-lines file's contents `data` (Tune's `result.json`: one JSON object a line),
    oldest first: a line being written, or torn by a killed driver, is left out, as is any line that is not a
    JSON object; [] for no data."""
    rows = []
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # json.JSONDecodeError, UnicodeDecodeError
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def write_bytes(path: str, data: bytes) -> None:
    """Write a whole file: locally to a temporary file renamed over `path` (readers never see half
    of it; the folder is created), on object storage as one object (a PUT is atomic)."""
    if "://" not in os.fspath(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:  # a full disk (ENOSPC): `path` keeps its whole old content, no empty .tmp is left
            _remove(tmp)
            raise
        return
    fs, inner, _ = filesystem_of(path)
    with fs.open_output_stream(inner) as f:
        f.write(data)


def copy_whole(copy_files, source, destination, source_filesystem=None, destination_filesystem=None, **kwargs):
    """`copy_files(source, destination, ...)` (`pyarrow.fs.copy_files`' arguments: a file or a folder's files) with
    each file written whole to a local destination: into `<file>.<pid>.tmp`, then renamed over it, so that a full
    disk (ENOSPC) leaves the file there was, never one cut short or emptied (`copy_files` rewrites in place).
    To object storage: `copy_files` itself (a PUT is whole). Raises what the copy raises (OSError)."""
    import pyarrow.fs as pafs

    if not isinstance(destination_filesystem, (pafs.LocalFileSystem, type(None))) or "://" in str(destination):
        return copy_files(source, destination, source_filesystem, destination_filesystem, **kwargs)
    if source_filesystem is None:
        source_filesystem, source = filesystem_of(source)[:2]
    info = source_filesystem.get_file_info(source)
    if info.type == pafs.FileType.File:
        pairs = [(source, str(destination))]
    else:
        found = source_filesystem.get_file_info(pafs.FileSelector(source, recursive=True))
        pairs = [
            (f.path, os.path.join(destination, posixpath.relpath(f.path, source)))
            for f in found
            if f.type == pafs.FileType.File
        ]
    for path, target in pairs:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            with source_filesystem.open_input_stream(path) as fin, open(tmp, "wb") as fout:
                while chunk := fin.read(1 << 22):
                    fout.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            _remove(tmp)
            raise


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def delete(path: str) -> None:
    """Remove a file at a local path or URI; nothing when it is absent."""
    if "://" not in os.fspath(path):
        if os.path.isfile(path):
            os.remove(path)
        return
    import pyarrow.fs as pafs

    fs, inner, _ = filesystem_of(path)
    if fs.get_file_info(inner).type == pafs.FileType.File:
        fs.delete_file(inner)


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


def trial_storage_uri() -> str | None:
    """The running trial's folder on its storage, local or remote (a path, or `s3://bucket/...`: what the driver
    writes the trial's records to); None outside a Tune trial, or with another Ray version."""
    try:
        from trainables import ray_private

        return ray_private.storage_context_uri(ray_private.train_session().storage)
    except Exception:  # not in a trial, or another Ray version
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
