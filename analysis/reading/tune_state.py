"""Ray Tune's experiment state and a sweep's settings, read without pandas or Ray.

What `analysis/reading/tune_files.py` (the full results) and `analysis/status.py` (a running sweep's
status, which must answer in well under 2 s) both need: where the experiment is (local path or
URI, through pyarrow's filesystems), the trial list of the newest ``experiment_state-*.json``
(status, name, folder, config, resources, start time, last result) and ``raysweep.json``.

Fields Tune stores pickled (placement group factory, storage context) are read with an
unpickler that replaces every class by a stub, so no Ray code is imported or run.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import posixpath
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow.fs as pafs

from trainables.experiment import records
from trainables.experiment.errors import ExperimentError
from trainables.experiment.storage import filesystem_of


def resolve_source(source: Any, filesystem: pafs.FileSystem | None) -> tuple:
    """(filesystem, path on it, prefix that turns such a path back into a URI or local path)."""
    if hasattr(source, "experiment_path") and hasattr(source, "filesystem"):  # ResultGrid
        fs = source.filesystem or pafs.LocalFileSystem()
        prefix = "" if isinstance(fs, pafs.LocalFileSystem) else f"{fs.type_name}://"
        return fs, str(source.experiment_path).rstrip("/"), prefix
    text = os.fspath(source)
    if filesystem is not None:
        return filesystem, text.rstrip("/"), ""
    return filesystem_of(text)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """Contents of ``path``, or None when it does not exist."""
    if isinstance(fs, pafs.LocalFileSystem):  # plain open() is several times faster locally
        try:
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
    try:
        with fs.open_input_stream(path) as f:
            return f.readall()
    except FileNotFoundError:
        return None


def end_recorded(fs: pafs.FileSystem, trial_folder: str) -> bool:
    """Whether the driver recorded Tune's end of the trial in `trial_folder` (`trial_end.json`,
    `records.write_trial_end`): a trial that no saved state lists as ended, and whose history cannot say so (a
    command's has no planned epochs), ended by itself."""
    return read_bytes(fs, posixpath.join(trial_folder, records.TRIAL_END_FILE)) is not None


def list_dir(fs: pafs.FileSystem, path: str, display: str) -> list[pafs.FileInfo]:
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.Directory:
        raise ExperimentError(f"{display} is not a folder")
    return fs.get_file_info(pafs.FileSelector(path))


def read_state(fs, path: str) -> dict | None:
    data = read_bytes(fs, path)
    try:
        state = json.loads(data)
        if isinstance(state.get("trial_data"), list):
            return state
    except (ValueError, TypeError, AttributeError):
        pass
    warnings.warn(f"{path}: unreadable experiment state (being written?); scanning trial folders instead", stacklevel=5)
    return None


def state_trials(state: dict, dirs: list[str]) -> list[dict]:
    """Trials as the experiment state file describes them (fields Tune 2.x writes)."""
    trials = []
    for entry in state["trial_data"]:
        try:
            info, meta = json.loads(entry[0]), json.loads(entry[1])
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        trial_id = info.get("trial_id")
        folder = info.get("relative_logdir") or unpickle_stub(info.get("storage")).get("trial_dir_name")
        if not folder and trial_id:  # older layouts: find the folder by its trial id
            folder = next((d for d in dirs if trial_id in d), None)
        resources: dict[str, float] = {}
        for bundle in unpickle_stub(info.get("placement_group_factory")).get("_bundles") or []:
            for name, amount in bundle.items():
                resources[name] = resources.get(name, 0.0) + float(amount)
        name = info.get("custom_trial_name") or (
            f"{info['trainable_name']}_{trial_id}" if info.get("trainable_name") and trial_id else folder
        )
        config = _unpickled_as_text(info.get("config"))
        trials.append(
            {
                **folder_trial(folder),
                "trial_id": trial_id,
                "trial_name": name,
                "status": info.get("status"),
                "config": config if isinstance(config, dict) else None,
                "start": _finite_or_none(meta.get("start_time")),
                "end": _finite_or_none(meta.get("last_result_time")),  # -inf before the first result
                "resources": resources,
                "last_result": meta.get("last_result") if isinstance(meta.get("last_result"), dict) else {},
                "metric_analysis": meta.get("metric_analysis") if isinstance(meta.get("metric_analysis"), dict) else {},
                "sampled": info.get("evaluated_params") if isinstance(info.get("evaluated_params"), dict) else None,
                "tag": info.get("experiment_tag"),
            }
        )
    return trials


def listed_trials(fs, root: str, files: set[str], dirs: list[str]) -> tuple[dict | None, list[dict]]:
    """The trials every experiment state file of an experiment folder lists.

    A grid extended (or a second driver) writes a new ``experiment_state-*.json`` listing only its
    own trials; a trial listed in several (a resumed sweep) takes its entry in the newest.
    Args:
        fs, root: the experiment folder; files, dirs: the names of its files and folders.
    Returns:
        (the newest readable state, or None; `state_trials` dicts of all states, one per trial folder,
        each with ``state``: the name of the newest state file listing it).
    """
    state_files = sorted(f for f in files if f.startswith("experiment_state-") and f.endswith(".json"))
    states = [(f, state) for f in state_files if (state := read_state(fs, posixpath.join(root, f))) is not None]
    by_folder: dict = {}
    for name, one in states:
        for trial in state_trials(one, dirs):
            by_folder[trial["dir"] or ("id", trial["trial_id"])] = {**trial, "state": name}
    return (states[-1][1] if states else None), list(by_folder.values())


def _unpickled_as_text(value: Any) -> Any:
    """Config values Tune could only store pickled (``CLOUDPICKLE_FALLBACK``) become a string."""
    if isinstance(value, dict):
        if value.get("_type") == "CLOUDPICKLE_FALLBACK":
            return "<pickled object>"
        return {k: _unpickled_as_text(v) for k, v in value.items()}
    return value


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def folder_trial(folder: str | None) -> dict:
    return {
        "trial_id": None,
        "trial_name": folder,
        "status": None,
        "dir": folder,
        "config": None,
        "start": None,
        "end": None,
        "resources": {},
        "error": None,
        "state": None,
        "sampled": None,
        "tag": None,
    }


_STATUS_RANK = {"TERMINATED": 0, "RUNNING": 1, "PAUSED": 1, "PENDING": 2, "ERROR": 3}


def repeats(trials: Sequence[Mapping]) -> list[int]:
    """Indices of the trials that repeat another trial of the same experiment, to be left out.

    A trial is identified by its config, seed included, whatever its folder name and whether or not
    a state file lists it: a folder copied into the experiment (runs merged from two machines), a
    second driver's run of a cell, or an unfinished (errored, stopped) repeat of a finished cell is
    not another seed. Of the trials sharing a config, the one kept is the finished one
    (TERMINATED, then RUNNING/PAUSED, PENDING, ERROR), then the newest (latest ``end``),
    then one a state file lists, then the first given. The exception is Tune's own: trials that
    one state file lists under different ids are distinct even with equal configs (two PBT members
    whose explore step clipped both to the same bound), so a config keeps as many trials as the
    most of them one state file lists. Trials of two raysweep releases (``release``) are never repeats of
    each other: a cell run by the release of last week and again by today's shows both, as its seeds.

    Args:
        trials: mappings with ``config`` (dict), ``status`` (Tune's, or None), ``end`` (Unix
            seconds of its last result, or None), ``state`` (the state file listing it, or None) and
            optionally ``release`` (the raysweep version that started it, :func:`release_of`; None: not known).
    Returns:
        the indices left out, ascending.
    """
    groups: dict[str, list[int]] = {}
    for i, trial in enumerate(trials):
        groups.setdefault((config_key(trial["config"]), trial.get("release")), []).append(i)
    left_out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        listed = [trials[i]["state"] for i in members if trials[i]["state"] is not None]
        keep = max([listed.count(s) for s in set(listed)] or [1])
        ranked = sorted(members, key=lambda i: _keep_order(trials[i], i))
        left_out += ranked[keep:]
    return sorted(left_out)


def release_of(started: float | None, runs: list[tuple[float, str | None]]) -> str | None:
    """The raysweep version of the run of the sweep that started a trial at Unix seconds `started`: the last of
    `runs` ((start, version) each, `analysis.reading.provenance.run_releases`) that began before it; None when
    not known (no records, a time not known, or a run before 0.8.0, which recorded no version)."""
    if started is None:
        return None
    before = [version for start, version in runs if start <= started]
    return before[-1] if before else None


def describe_duplicates(left_out: list[str]) -> str | None:
    """``duplicates left out: N trial(s) ...: folder, ...`` (at most 5 named), or None when empty.

    Shared by the report (:func:`analysis.reading.load.duplicates_line`) and ``--status``."""
    if not left_out:
        return None
    shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
    return (
        f"duplicates left out: {len(left_out)} trial(s) with the same config (seed included) as one "
        f"counted instead (a copied folder, a repeat, an unfinished rerun): {shown}"
    )


def config_key(config: Mapping | None) -> str:
    """A trial's identity: its config (seed included) as canonical JSON."""
    return json.dumps(config or {}, sort_keys=True, default=repr)


def _keep_order(trial: Mapping, index: int) -> tuple:
    """Sort key, first = the trial to keep (see `repeats`)."""
    end = trial.get("end")
    return (
        _STATUS_RANK.get(trial.get("status") or "PENDING", 2),
        -(end if end is not None else -math.inf),
        trial.get("state") is None,
        index,
    )


def sweep_settings(fs, root: str, files: set[str], state: dict | None) -> dict:
    """Metric and mode recorded by raysweep (raysweep.json), else by Tune (TuneConfig.metric); with
    ``test_metric`` when raysweep.json records it (a str, or None for a sweep without one), and
    ``searcher`` / ``scheduler`` (class names, None for a grid) when it records them."""
    if records.SETTINGS_FILE in files:
        path = posixpath.join(root, records.SETTINGS_FILE)
        settings = records.parse_record(read_bytes(fs, path) or b"", path) or {}  # torn: warned, ignored
        if settings.get("metric"):
            recorded = {k: settings[k] for k in ("test_metric", "searcher", "scheduler") if k in settings}
            return {"metric": settings["metric"], "mode": settings.get("mode"), **recorded}
    metric = ((state or {}).get("runner_data") or {}).get("_metric")  # TuneConfig(metric=...)
    return {"metric": metric} if isinstance(metric, str) else {}


class _Stub:
    """Stands in for any class while reading a pickle, so no Ray class is imported or run."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__["state"] = state


class StubUnpickler(pickle.Unpickler):
    """Unpickles with every class replaced by a stub, except those ``real(module, name)`` allows."""

    def __init__(self, file, real=None):
        super().__init__(file)
        self._real = real

    def find_class(self, module, name):
        if self._real is not None and self._real(module, name):
            return super().find_class(module, name)
        return _Stub


def unpickle_stub(field: Any) -> dict:
    """The attribute dict of an object Tune stored as hex cloudpickle, or {} if unreadable."""
    if isinstance(field, dict):  # {"_type": "CLOUDPICKLE_FALLBACK", "value": hex}
        field = field.get("value")
    if not isinstance(field, str):
        return {}
    try:
        state = StubUnpickler(io.BytesIO(bytes.fromhex(field))).load()
    except Exception:  # any malformed or unexpected pickle: the field is simply unknown
        return {}
    state = getattr(state, "state", None)
    if isinstance(state, tuple):  # (state, slotstate)
        state = state[0]
    return state if isinstance(state, dict) else {}


def latest_experiment(root: str | os.PathLike = "runs") -> Path:
    """The most recently updated experiment folder under ``root``.

    ``root`` is looked up relative to the working directory and then its parents, so
    ``"runs"`` also works from ``notebooks/``. An experiment folder is a direct subfolder with
    an ``experiment_state-*.json`` file; "updated" is that file's modification time. A sweep's out-of-memory
    re-run round (``<name>_oom_gpu<share>``) is not an experiment of its own: it updates its sweep.

    Raises:
        ExperimentError: no ``root`` folder, or no experiment in it.
    """
    root = Path(root)
    candidates = [root] if root.is_absolute() else [p / root for p in (Path.cwd(), *Path.cwd().parents)]
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is None:
        raise ExperimentError(f"no folder {str(root)!r} here or in a parent folder")
    stamps: dict[Path, float] = {}
    for state in sorted(folder.glob("*/experiment_state-*.json"), key=lambda s: len(s.parent.name)):
        sweep = next((s for s in stamps if records.oom_round_share(state.parent.name, s.name)), state.parent)
        stamps[sweep] = max(stamps.get(sweep, 0.0), state.stat().st_mtime)  # shorter names (sweeps) first
    if not stamps:
        raise ExperimentError(f"no Tune experiment (experiment_state-*.json) under {folder}")
    return max(stamps, key=stamps.get)
