"""Read any Ray Tune experiment folder into tidy pandas DataFrames.

The files are read directly, without importing Ray (Ray 2.x on-disk layout)::

    <experiment>/experiment_state-<session>.json   trial list: status, config, resources,
                                                   start time and time of the last result
    <experiment>/<trial dir>/result.json           one JSON object per reported result
    <experiment>/<trial dir>/progress.csv          the same as CSV (read when result.json is absent)
    <experiment>/<trial dir>/params.json           the resolved config
    <experiment>/<trial dir>/error.txt             traceback of an errored trial
    <experiment>/raysweep.json                     optional: {"metric": ..., "mode": ...} of the sweep

Trial folders that the state file does not list yet (an experiment still running, or a copied
folder without its state file) are found by scanning for `result.json` / `params.json`.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import posixpath
import re
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.json as pajson

STATUSES = ("TERMINATED", "ERROR", "RUNNING", "PENDING", "PAUSED")
"""Trial statuses as Tune writes them (PAUSED only with PBT-like schedulers)."""

SEED_KEY = "seed"
"""Config key of the seed axis. Only this key is dropped when grouping over seeds;
`noise_seed`, `data_seed` and the like are kept (they change the data, not the repeat)."""

# Keys Tune adds to every result. They are not metrics: dropped from the history, except the
# ones in _HISTORY_KEEP, which locate a row in time.
_TUNE_KEYS = {
    "config", "date", "done", "pid", "hostname", "node_ip", "trial_id", "experiment_tag",
    "checkpoint_dir_name", "should_checkpoint", "time_this_iter_s", "time_since_restore",
    "iterations_since_restore", "timesteps_since_restore", "timesteps_total", "episodes_total",
    "experiment_id", "warmup_time",
}
_HISTORY_KEEP = ("training_iteration", "time_total_s", "timestamp")
_NOT_METRICS = _TUNE_KEYS | set(_HISTORY_KEEP) | {"diverged"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ExperimentError(ValueError):
    """Bad input: not a Tune experiment, no trials, or a metric that no trial reported.

    The message is one line meant for the user; the CLI prints it without a traceback.
    """


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def load_experiment(
    source: Any,
    *,
    modes: Mapping[str, str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read an experiment once and return ``(trials, history)``.

    Same result as ``(load_trials(source), load_history(source))`` with one read of the files.
    See those two functions for the columns, arguments and errors.
    """
    fs, root, display = _resolve_source(source, filesystem)
    return _read_experiment(fs, root, display, modes or {})


def load_trials(
    source: Any,
    *,
    modes: Mapping[str, str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> pd.DataFrame:
    """One row per trial of a Ray Tune experiment.

    Args:
        source: experiment folder (local path, or a URI that ``pyarrow.fs`` or ``fsspec``
            understand, e.g. ``s3://bucket/runs/noise_grid``, ``memory://x``), or a
            ``ray.tune.ResultGrid``.
        modes: ``{metric: "min" | "max"}`` used for the ``best/<metric>`` columns; metrics not
            listed use :func:`guess_mode`.
        filesystem: a ``pyarrow.fs.FileSystem`` to read ``source`` with (then ``source`` is a
            path on it).

    Returns:
        DataFrame, one row per trial, in trial-id order, with columns

        - ``trial_id`` (str), ``trial_name`` (str: custom name such as ``asym_0.375_seed1``, else
          ``<trainable>_<trial_id>``, else the folder name),
        - ``status``: TERMINATED / ERROR / RUNNING / PENDING (PAUSED) as Tune recorded it; without
          a state file: ERROR if ``error.txt`` exists, TERMINATED if the last result has
          ``done``, RUNNING if it has results, else PENDING,
        - ``diverged`` (bool): a reported metric was NaN or ±inf at some iteration, or the trial
          reported ``diverged=True``,
        - ``error`` (str or None): last line of ``error.txt`` (e.g. ``RuntimeError: boom``),
        - ``start_time``, ``end_time`` (UTC timestamps), ``duration_s`` (float seconds): start is
          Tune's float ``run_metadata.start_time`` and end the time of the last result
          (``last_result_time``); without a state file both are estimated from ``timestamp``
          (int seconds) and ``time_total_s`` (float) of all rows, which bounds the start to
          within the 1 s rounding and usually much closer. NaT when unknown (pending trials),
        - ``iterations`` (int): last ``training_iteration`` (0 without results),
        - ``node``: hostname of the last result,
        - ``resources/<name>`` (float): resources requested, e.g. ``resources/CPU``,
          ``resources/GPU``, summed over the placement-group bundles (absent without a state file),
        - ``trial_dir`` (str): the trial folder, as a local path or URI,
        - ``config/<key>``: the config, nested keys joined with ``/`` (lists become tuples),
        - ``last/<metric>``: the last reported value of each metric (NaN for a diverged metric),
        - ``best/<metric>``: the best finite value of each numeric metric over iterations.

        ``df.attrs`` holds ``experiment`` (the source as a string) and ``metric`` / ``mode`` as
        the sweep recorded them (``raysweep.json``, else the metric given to ``TuneConfig``,
        with :func:`guess_mode`); None when not recorded.

    Raises:
        ExperimentError: the folder does not exist, holds no Tune experiment, or has no trials.

    Warns:
        UserWarning: for each unreadable ``result.json`` line (e.g. a half-written last line of
        a running trial; the line is skipped) and for an unreadable state file (the folders
        are scanned instead).
    """
    return load_experiment(source, modes=modes, filesystem=filesystem)[0]


def load_history(
    source: Any,
    *,
    filesystem: pafs.FileSystem | None = None,
) -> pd.DataFrame:
    """Every reported result of every trial, in long form.

    Args:
        source: as for :func:`load_trials`.
        filesystem: as for :func:`load_trials`.

    Returns:
        DataFrame with one row per (trial, reported iteration): ``trial_id``,
        ``training_iteration`` (1-based count of reports), ``time_total_s`` (float seconds of
        training so far), ``timestamp`` (int Unix seconds), then one column per reported metric,
        named as reported (nested dicts joined with ``/``, e.g. ``val/acc``). A metric that a
        trial did not report at an iteration is NaN. Rows repeated after a restore from a
        checkpoint (same trial and iteration) keep the later report.

    Raises:
        ExperimentError: as for :func:`load_trials`.
    """
    return load_experiment(source, filesystem=filesystem)[1]


def guess_mode(metric: str) -> str:
    """``"min"`` for metrics that read as losses or errors, else ``"max"``.

    The rule looks at the last ``/``-separated part of the name: it is ``"min"`` when that part
    contains ``loss``, ``err``, ``nll`` or ``perplexity`` (``val/loss``, ``test_error``).
    Pass the mode explicitly wherever the rule is wrong for a metric.
    """
    leaf = metric.rsplit("/", 1)[-1].lower()
    return "min" if any(word in leaf for word in ("loss", "err", "nll", "perplexity")) else "max"


def reported_metrics(trials: pd.DataFrame) -> list[str]:
    """Names of the metrics in a :func:`load_trials` table (from its ``last/`` columns)."""
    return [c[len("last/"):] for c in trials.columns if c.startswith("last/")]


def metric_column(trials: pd.DataFrame, metric: str, scope: str = "last") -> str:
    """Column of ``trials`` holding ``metric`` (``"last/<metric>"`` or ``"best/<metric>"``).

    Raises:
        ExperimentError: no trial reported ``metric``; the message lists the metrics that exist.
        ValueError: ``scope`` is not ``"last"`` or ``"best"``.
    """
    if scope not in ("last", "best"):
        raise ValueError(f"scope must be 'last' or 'best', not {scope!r}")
    column = f"{scope}/{metric}"
    if column not in trials.columns or trials[column].isna().all():
        existing = ", ".join(reported_metrics(trials)) or "none"
        raise ExperimentError(
            f"metric {metric!r} was not reported by any trial; reported metrics: {existing}"
        )
    return column


def config_column(df: pd.DataFrame, name: str) -> str:
    """Column of ``df`` for config key ``name`` (``"noise_rate"`` or ``"config/noise_rate"``).

    Raises:
        ExperimentError: no such config column; the message lists the config keys.
    """
    for column in (name, f"config/{name}"):
        if column in df.columns:
            return column
    keys = ", ".join(c[len("config/"):] for c in df.columns if c.startswith("config/"))
    raise ExperimentError(f"config key {name!r} not found; config keys: {keys or 'none'}")


def varying_config_columns(trials: pd.DataFrame, seed: str | None = SEED_KEY) -> list[str]:
    """``config/`` columns whose value differs between trials, without the seed column(s).

    A column is a seed column when the last ``/`` part of its key equals ``seed``
    (``config/seed``, ``config/train_loop_config/seed``). Pass ``seed=None`` to keep them.
    """
    columns = []
    for column in trials.columns:
        if not column.startswith("config/"):
            continue
        if seed is not None and column.rsplit("/", 1)[-1] == seed:
            continue
        values = trials[column].map(_hashable)
        if values.nunique(dropna=False) > 1:
            columns.append(column)
    return columns


def latest_experiment(root: str | os.PathLike = "runs") -> Path:
    """The most recently updated experiment folder under ``root``.

    ``root`` is looked up relative to the working directory and then its parents, so
    ``"runs"`` also works from ``notebooks/``. An experiment folder is a direct subfolder with
    an ``experiment_state-*.json`` file; "updated" is that file's modification time.

    Raises:
        ExperimentError: no ``root`` folder, or no experiment in it.
    """
    root = Path(root)
    candidates = [root] if root.is_absolute() else [p / root for p in (Path.cwd(), *Path.cwd().parents)]
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is None:
        raise ExperimentError(f"no folder {str(root)!r} here or in a parent folder")
    stamps = {
        state.parent: state.stat().st_mtime for state in folder.glob("*/experiment_state-*.json")
    }
    if not stamps:
        raise ExperimentError(f"no Tune experiment (experiment_state-*.json) under {folder}")
    return max(stamps, key=stamps.get)


# --------------------------------------------------------------------------------------------
# Finding the files
# --------------------------------------------------------------------------------------------


def _resolve_source(source: Any, filesystem: pafs.FileSystem | None) -> tuple:
    """(filesystem, path on it, prefix that turns such a path back into a URI or local path)."""
    if hasattr(source, "experiment_path") and hasattr(source, "filesystem"):  # ResultGrid
        fs = source.filesystem or pafs.LocalFileSystem()
        prefix = "" if isinstance(fs, pafs.LocalFileSystem) else f"{fs.type_name}://"
        return fs, str(source.experiment_path).rstrip("/"), prefix
    text = os.fspath(source)
    if filesystem is not None:
        return filesystem, text.rstrip("/"), ""
    if "://" not in text:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text)), ""
    scheme = text.split("://", 1)[0]
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except (ValueError, OSError):  # pyarrow.ArrowInvalid is a ValueError
        import fsspec  # only needed for schemes pyarrow does not know

        fsspec_fs, path = fsspec.core.url_to_fs(text)
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs))
    return fs, path.rstrip("/"), f"{scheme}://"


def _read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
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


def _list_dir(fs: pafs.FileSystem, path: str, display: str) -> list[pafs.FileInfo]:
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.Directory:
        raise ExperimentError(f"{display} is not a folder")
    return fs.get_file_info(pafs.FileSelector(path))


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _read_experiment(fs, root: str, prefix: str, modes: Mapping[str, str]):
    display = prefix + root
    entries = _list_dir(fs, root, display)
    files = {e.base_name for e in entries if e.type == pafs.FileType.File}
    dirs = sorted(e.base_name for e in entries if e.type == pafs.FileType.Directory)
    state_files = sorted(f for f in files if f.startswith("experiment_state-") and f.endswith(".json"))

    state = _read_state(fs, posixpath.join(root, state_files[-1])) if state_files else None
    trials = _state_trials(state, dirs) if state else []

    # Folders the state file does not list yet: trials of a running experiment, or a copied
    # experiment without its state file.
    claimed = {t["dir"] for t in trials}
    unclaimed = [d for d in dirs if d not in claimed]
    if unclaimed:
        probes = [posixpath.join(root, d, name) for d in unclaimed for name in ("result.json", "params.json")]
        found = {posixpath.basename(posixpath.dirname(i.path)) for i in fs.get_file_info(probes)
                 if i.type == pafs.FileType.File}
        trials += [_folder_trial(d) for d in unclaimed if d in found]

    if state is None and not trials:
        raise ExperimentError(
            f"{display} is not a Ray Tune experiment folder (no experiment_state-*.json and "
            f"no trial folders with result.json){_experiment_hint(fs, root, dirs)}"
        )
    if not trials:
        raise ExperimentError(f"experiment {display} has no trials")

    for trial in trials:
        _read_trial_files(fs, root, trial)
    history = _parse_results(trials, prefix + root)
    for trial in trials:
        _complete_trial(fs, root, trial)
    order = sorted(range(len(trials)), key=lambda i: (trials[i]["trial_id"], trials[i]["dir"] or ""))
    trials_df, history = _assemble([trials[i] for i in order], history, order, prefix, root, modes)

    sweep = _sweep_settings(fs, root, files, state)
    trials_df.attrs.update(experiment=display, metric=sweep.get("metric"), mode=sweep.get("mode"))
    history.attrs.update(experiment=display)
    return trials_df, history


def _experiment_hint(fs, root: str, dirs: list[str]) -> str:
    """'; it holds experiments: a, b' when ``root`` is a folder of experiments, else ''."""
    inner = [
        d for d in dirs[:200]
        if any(i.base_name.startswith("experiment_state-")
               for i in fs.get_file_info(pafs.FileSelector(posixpath.join(root, d), allow_not_found=True)))
    ]
    return f"; it holds experiments: {', '.join(inner[:5])}" if inner else ""


def _read_state(fs, path: str) -> dict | None:
    data = _read_bytes(fs, path)
    try:
        state = json.loads(data)
        if isinstance(state.get("trial_data"), list):
            return state
    except (ValueError, TypeError, AttributeError):
        pass
    warnings.warn(f"{path}: unreadable experiment state (being written?); scanning trial folders instead",
                  stacklevel=5)
    return None


def _state_trials(state: dict, dirs: list[str]) -> list[dict]:
    """Trials as the experiment state file describes them (fields Tune 2.x writes)."""
    trials = []
    for entry in state["trial_data"]:
        try:
            info, meta = json.loads(entry[0]), json.loads(entry[1])
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        trial_id = info.get("trial_id")
        folder = info.get("relative_logdir") or _unpickle_stub(info.get("storage")).get("trial_dir_name")
        if not folder and trial_id:  # older layouts: find the folder by its trial id
            folder = next((d for d in dirs if trial_id in d), None)
        resources: dict[str, float] = {}
        for bundle in _unpickle_stub(info.get("placement_group_factory")).get("_bundles") or []:
            for name, amount in bundle.items():
                resources[name] = resources.get(name, 0.0) + float(amount)
        name = info.get("custom_trial_name") or (
            f"{info['trainable_name']}_{trial_id}" if info.get("trainable_name") and trial_id else folder
        )
        config = _unpickled_as_text(info.get("config"))
        trials.append({
            **_folder_trial(folder),
            "trial_id": trial_id,
            "trial_name": name,
            "status": info.get("status"),
            "config": config if isinstance(config, dict) else None,
            "start": _finite_or_none(meta.get("start_time")),
            "end": _finite_or_none(meta.get("last_result_time")),  # -inf before the first result
            "resources": resources,
        })
    return trials


def _unpickled_as_text(value: Any) -> Any:
    """Config values Tune could only store pickled (``CLOUDPICKLE_FALLBACK``) become a string."""
    if isinstance(value, dict):
        if value.get("_type") == "CLOUDPICKLE_FALLBACK":
            return "<pickled object>"
        return {k: _unpickled_as_text(v) for k, v in value.items()}
    return value


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _folder_trial(folder: str | None) -> dict:
    return {"trial_id": None, "trial_name": folder, "status": None, "dir": folder, "config": None,
            "start": None, "end": None, "resources": {}, "error": None}


def _sweep_settings(fs, root: str, files: set[str], state: dict | None) -> dict:
    """Metric and mode recorded by raysweep (raysweep.json), else by Tune (TuneConfig.metric)."""
    if "raysweep.json" in files:
        try:
            settings = json.loads(_read_bytes(fs, posixpath.join(root, "raysweep.json")))
            if settings.get("metric"):
                return {"metric": settings["metric"], "mode": settings.get("mode") or guess_mode(settings["metric"])}
        except (ValueError, TypeError, AttributeError):
            warnings.warn(f"{root}/raysweep.json is unreadable; ignoring it", stacklevel=4)
    metric = ((state or {}).get("runner_data") or {}).get("_metric")
    return {"metric": metric, "mode": guess_mode(metric)} if isinstance(metric, str) else {}


def _read_trial_files(fs, root: str, trial: dict) -> None:
    """Read result.json (or progress.csv) and error.txt of one trial into ``trial``."""
    folder = posixpath.join(root, trial["dir"]) if trial["dir"] else None
    trial["result"] = trial["csv"] = None
    if folder is None:
        return
    trial["result"] = _read_bytes(fs, posixpath.join(folder, "result.json"))
    if trial["result"] is None:
        trial["csv"] = _read_bytes(fs, posixpath.join(folder, "progress.csv"))
    if trial["status"] in (None, "ERROR"):
        text = _read_bytes(fs, posixpath.join(folder, "error.txt"))
        if text is not None:
            lines = [ln.strip() for ln in _ANSI.sub("", text.decode("utf-8", "replace")).splitlines()]
            lines = [ln for ln in lines if ln]
            trial["error"] = lines[-1] if lines else "error (empty error.txt)"


def _complete_trial(fs, root: str, trial: dict) -> None:
    """Fill what the state file did not give: id, status, config (from the parsed results)."""
    tail = trial["tail"]
    if trial["trial_id"] is None:
        trial["trial_id"] = str(tail.get("trial_id") or trial["dir"])
    if trial["status"] is None:
        trial["status"] = ("ERROR" if trial["error"] else "TERMINATED" if tail.get("done") is True
                           else "RUNNING" if tail else "PENDING")
    # Exact JSON first: the state file, else params.json. A result row's config comes last:
    # pyarrow may have widened it (1 -> 1.0 when another trial has 0.5).
    config = trial["config"]
    if config is None and trial["dir"]:
        params = _read_bytes(fs, posixpath.join(root, trial["dir"], "params.json"))
        try:
            config = json.loads(params) if params else None
        except ValueError:
            config = None
    if not isinstance(config, dict):
        config = tail.get("config")
    trial["config"] = config if isinstance(config, dict) else {}


# --------------------------------------------------------------------------------------------
# Parsing result files
# --------------------------------------------------------------------------------------------


def _parse_results(trials: list[dict], where: str) -> pd.DataFrame:
    """All result rows as one DataFrame with a ``_trial`` column (index into ``trials``).

    Also sets, per trial, ``tail`` (its last row as a dict, config included), and for trials
    parsed row by row ``merged`` (last reported value of each key) and ``nonfinite``.

    Complete files without NaN/Infinity are parsed together by pyarrow's JSON reader (C++,
    several times faster than the json module); the others (half-written lines, non-finite
    values, progress.csv) row by row in Python, which skips bad lines with a warning. Any
    surprise in the fast path (e.g. a config key that is a number in one trial and a string in
    another) sends those files down the slow path too.
    """
    fast, slow = [], []
    for i, trial in enumerate(trials):
        trial.update(tail={}, merged=None, nonfinite=False)
        data = trial["result"]
        if data and data.endswith(b"\n") and not data.startswith(b"\n") and b"\n\n" not in data \
                and b"NaN" not in data and b"Infinity" not in data:
            fast.append(i)
        elif data or trial["csv"]:
            slow.append(i)

    parts = []
    if fast:
        try:
            parts.append(_parse_fast(trials, fast))
        except (pa.ArrowInvalid, ValueError):
            slow = sorted(slow + fast)
    for i in slow:
        trial = trials[i]
        if trial["result"] is not None:
            rows = _parse_result_json(trial["result"], f"{where}/{trial['dir']}/result.json")
        else:
            rows = pd.read_csv(io.BytesIO(trial["csv"])).to_dict("records")
        if not rows:
            continue
        trial["tail"] = dict(rows[-1])
        for row in rows:
            row.pop("config", None)
        merged: dict = {}
        for row in rows:
            merged.update(row)
        trial["merged"] = merged
        trial["nonfinite"] = any(
            type(v) is float and not math.isfinite(v) for row in rows for v in row.values()
        )
        frame = pd.DataFrame.from_records(rows)
        frame.insert(0, "_trial", i)
        parts.append(frame)
    for trial in trials:
        del trial["result"], trial["csv"]
    if not parts:
        return pd.DataFrame({"_trial": pd.Series(dtype="int64")})
    history = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return history.sort_values("_trial", kind="stable", ignore_index=True)


def _parse_fast(trials: list[dict], indices: list[int]) -> pd.DataFrame:
    blob = b"".join(trials[i]["result"] for i in indices)
    counts = np.array([trials[i]["result"].count(b"\n") for i in indices])
    table = pajson.read_json(io.BytesIO(blob))
    if table.num_rows != counts.sum():
        raise ValueError("row count mismatch")
    for i, tail in zip(indices, table.take(np.cumsum(counts) - 1).to_pylist()):
        trials[i]["tail"] = _flatten_except_config(tail)
    table = _flatten_table(table.drop_columns([c for c in table.column_names if c == "config"]))
    frame = table.to_pandas()
    frame.insert(0, "_trial", np.repeat(np.array(indices), counts))
    return frame


def _flatten_table(table: pa.Table) -> pa.Table:
    """Struct columns (nested dicts) become columns named ``parent/child``."""
    while any(pa.types.is_struct(field.type) for field in table.schema):
        names, columns = [], []
        for name, column in zip(table.column_names, table.columns):
            if pa.types.is_struct(column.type):
                for field, child in zip(column.type, column.flatten()):
                    names.append(f"{name}/{field.name}")
                    columns.append(child)
            else:
                names.append(name)
                columns.append(column)
        table = pa.table(columns, names=names)
    return table


def _parse_result_json(data: bytes, where: str) -> list[dict]:
    """Rows of a result.json as flat dicts (config kept nested); bad lines skipped with a warning."""
    text = data.decode("utf-8", "replace").strip()
    if not text:
        return []
    try:  # one json.loads for the whole file is much faster than one per line
        rows = json.loads("[" + text.replace("\n", ",") + "]")
    except ValueError:
        rows = []
        lines = text.split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                which = "last line (half written?)" if number == len(lines) else f"line {number}"
                warnings.warn(f"{where}: skipped unreadable {which}", stacklevel=6)
    return [_flatten_except_config(r) for r in rows if isinstance(r, dict)]


def _flatten_except_config(row: dict) -> dict:
    config = row.pop("config", None)
    if dict in map(type, row.values()):
        row = _flatten(row)
    if config is not None:
        row["config"] = config
    return row


def _flatten(d: Mapping, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


class _Stub:
    """Stands in for any class while reading a pickle, so no Ray class is imported or run."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__["state"] = state


class _StubUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _Stub


def _unpickle_stub(field: Any) -> dict:
    """The attribute dict of an object Tune stored as hex cloudpickle, or {} if unreadable."""
    if isinstance(field, dict):  # {"_type": "CLOUDPICKLE_FALLBACK", "value": hex}
        field = field.get("value")
    if not isinstance(field, str):
        return {}
    try:
        state = _StubUnpickler(io.BytesIO(bytes.fromhex(field))).load()
    except Exception:  # any malformed or unexpected pickle: the field is simply unknown
        return {}
    state = getattr(state, "state", None)
    if isinstance(state, tuple):  # (state, slotstate)
        state = state[0]
    return state if isinstance(state, dict) else {}


# --------------------------------------------------------------------------------------------
# Assembling the DataFrames
# --------------------------------------------------------------------------------------------


def _assemble(trials: list[dict], raw: pd.DataFrame, order: list[int], prefix: str, root: str,
              modes: Mapping[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trial table and history from the trial dicts (sorted) and the raw result rows."""
    n = len(trials)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)  # raw _trial (read order) -> row in the sorted trial table
    ids = np.array([t["trial_id"] for t in trials], dtype=object)

    history = raw.drop(columns=[c for c in _TUNE_KEYS if c in raw.columns])
    pos = position[history.pop("_trial").to_numpy(dtype=np.int64)]
    history.insert(0, "trial_id", ids[pos])
    history = history.iloc[np.argsort(pos, kind="stable")].reset_index(drop=True)
    if "training_iteration" not in history.columns:
        history["training_iteration"] = history.groupby("trial_id", sort=False).cumcount() + 1
    keep = ["trial_id"] + [c for c in _HISTORY_KEEP if c in history.columns]
    history = history[keep + [c for c in history.columns if c not in keep]]
    history = history.drop_duplicates(subset=["trial_id", "training_iteration"], keep="last", ignore_index=True)

    metrics = [c for c in history.columns if c not in _NOT_METRICS]
    numeric = [c for c in metrics
               if pd.api.types.is_numeric_dtype(history[c]) and not pd.api.types.is_bool_dtype(history[c])]
    grouped = history.groupby("trial_id", sort=False)

    # last/: the value of the last row that reported the metric. Rows parsed by pyarrow hold no
    # NaN of their own, so a NaN there means "not reported" and groupby().last() is exact; for
    # trials parsed row by row the merged dict keeps a reported NaN (the metric diverged).
    last = grouped[metrics].last().reindex(ids) if metrics else pd.DataFrame(index=ids)
    merged = [i for i, trial in enumerate(trials) if trial["merged"] is not None]
    if merged and metrics:
        exact = pd.DataFrame.from_records([trials[i]["merged"] for i in merged], columns=metrics)
        for j, column in enumerate(metrics):
            numeric_pair = column in numeric and pd.api.types.is_numeric_dtype(exact[column])
            if not numeric_pair and last[column].dtype != exact[column].dtype:
                last[column] = last[column].astype(object)  # e.g. a string metric in some trials only
            last.iloc[merged, j] = exact[column].to_numpy()
    last.columns = [f"last/{c}" for c in last.columns]

    best_parts = []
    values = history[numeric].replace([np.inf, -np.inf], np.nan)
    for column in numeric:
        by = values[column].groupby(history["trial_id"], sort=False)
        best = by.max() if (modes.get(column) or guess_mode(column)) == "max" else by.min()
        best_parts.append(best.rename(f"best/{column}"))
    best = pd.concat(best_parts, axis=1).reindex(ids) if best_parts else pd.DataFrame(index=ids)

    start = np.array([np.nan if t["start"] is None else t["start"] for t in trials], dtype=float)
    end = np.array([np.nan if t["end"] is None else t["end"] for t in trials], dtype=float)
    _estimate_spans(history, ids, start, end)

    diverged = [bool(t["nonfinite"] or t["tail"].get("diverged") is True) for t in trials]
    base = pd.DataFrame({
        "trial_id": ids.astype(str),
        "trial_name": [t["trial_name"] or t["trial_id"] for t in trials],
        "status": [t["status"] for t in trials],
        "diverged": diverged,
        "error": pd.Series([t["error"] for t in trials], dtype=object),
        "start_time": pd.to_datetime(start, unit="s", utc=True),
        "end_time": pd.to_datetime(end, unit="s", utc=True),
        "duration_s": end - start,
        "iterations": [int(t["tail"].get("training_iteration") or 0) for t in trials],
        "node": pd.Series([t["tail"].get("hostname") for t in trials], dtype=object),
    })
    resources = pd.DataFrame.from_records([t["resources"] for t in trials], index=range(n))
    resources.columns = [f"resources/{c}" for c in resources.columns]
    dirs = pd.DataFrame({"trial_dir": [prefix + posixpath.join(root, t["dir"]) if t["dir"] else None
                                       for t in trials]})
    config = pd.DataFrame.from_records([_flatten(t["config"]) for t in trials], index=range(n))
    config.columns = [f"config/{c}" for c in config.columns]
    parts = [base, resources, dirs, config, last.reset_index(drop=True), best.reset_index(drop=True)]
    return pd.concat(parts, axis=1), history


def _estimate_spans(history: pd.DataFrame, ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """Fill unknown start/end (Unix s) from ``timestamp`` (int s) and ``time_total_s`` (float).

    Each row's true time lies in [timestamp, timestamp + 1), so each row bounds the start to
    [timestamp - time_total_s, timestamp + 1 - time_total_s); intersecting over all rows of a
    trial pins the start much closer than one second. End = start + last time_total_s.
    """
    missing = np.isnan(start)
    if not missing.any() or not {"timestamp", "time_total_s"} <= set(history.columns):
        return
    stamp = pd.to_numeric(history["timestamp"], errors="coerce")
    total = pd.to_numeric(history["time_total_s"], errors="coerce")
    by = history["trial_id"]
    low = (stamp - total).groupby(by, sort=False).max().reindex(ids).to_numpy(dtype=float)
    high = (stamp + 1 - total).groupby(by, sort=False).min().reindex(ids).to_numpy(dtype=float)
    last_total = total.groupby(by, sort=False).last().reindex(ids).to_numpy(dtype=float)
    estimate = np.where(high >= low, (low + high) / 2, low)
    start[missing] = estimate[missing]
    fill_end = missing | np.isnan(end)
    end[fill_end] = (start + last_total)[fill_end]
