"""Ray Tune's on-disk experiment format, read directly (no Ray import).

Ray 2.x layout::

    <experiment>/experiment_state-<session>.json   trial list: status, config, resources,
                                                   start time and time of the last result
                                                   (one per driver session: all are read)
    <experiment>/<trial dir>/result.json           one JSON object per reported result
    <experiment>/<trial dir>/progress.csv          the same as CSV (read when result.json is absent or empty,
                                                   and in a PBT experiment, whose result.json may lack rows)
    <experiment>/<trial dir>/params.json           the resolved config
    <experiment>/<trial dir>/error.txt             traceback of an errored trial
    <experiment>/<trial dir>/late_rows.json        a command's rows after Tune stopped it (`late_rows.py`)
    <experiment>/raysweep.json                     optional: {"metric": ..., "mode": ...} of the sweep
    <experiment>/searcher-state-*.pkl, pbt_global.txt   a search's own record (`analysis/reading/search_record.py`)

The state file and ``raysweep.json`` are read by `analysis/reading/tune_state.py` (no pandas; the
status command uses it alone). Trial folders that the state file does not list yet (an experiment
still running, or a copied folder without its state file) are found by scanning for ``result.json`` / ``params.json``.
"""

from __future__ import annotations

import io
import json
import math
import posixpath
import re
import warnings
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.json as pajson

from analysis.reading.late_rows import add_late_rows
from analysis.reading.search_record import PBT_LOG, PBT_SCHEDULERS, read_search_record
from analysis.reading.tune_state import (
    end_recorded,
    folder_trial,
    list_dir,
    listed_trials,
    read_bytes,
    sweep_settings,
)
from trainables.experiment.errors import ExperimentError
from trainables.experiment.outcome import ran_to_end

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --------------------------------------------------------------------------------------------
# Finding the files
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def read_experiment_files(fs: pafs.FileSystem, root: str, prefix: str) -> tuple[list[dict], pd.DataFrame, dict]:
    """Read every file of the experiment at ``root`` on ``fs``.

    Returns:
        ``(trials, rows, sweep)``: one dict per trial (``trial_id``, ``trial_name``, ``status``,
        ``dir``, ``config``, ``start``/``end`` in Unix seconds or None, ``resources``, ``error``,
        ``tail`` = last result row, ``merged`` and ``nonfinite`` for trials parsed row by row);
        all result rows as one DataFrame with a ``_trial`` column indexing ``trials``; and the
        sweep's recorded ``metric``/``mode`` (either may be missing) with ``search``, its
        :class:`analysis.reading.search_record.SearchRecord` (None for a grid).

    Raises:
        ExperimentError: ``root`` is not a folder, holds no Tune experiment, or has no trials.
    """
    display = prefix + root
    entries = list_dir(fs, root, display)
    files = {e.base_name for e in entries if e.type == pafs.FileType.File}
    dirs = sorted(e.base_name for e in entries if e.type == pafs.FileType.Directory)
    state, trials = listed_trials(fs, root, files, dirs)  # every state file's trials

    # Folders the state file does not list yet: trials of a running experiment, or a copied
    # experiment without its state file.
    claimed = {t["dir"] for t in trials}
    unclaimed = [d for d in dirs if d not in claimed]
    if unclaimed:
        probes = [posixpath.join(root, d, name) for d in unclaimed for name in ("result.json", "params.json")]
        found = {
            posixpath.basename(posixpath.dirname(i.path))
            for i in fs.get_file_info(probes)
            if i.type == pafs.FileType.File
        }
        trials += [folder_trial(d) for d in unclaimed if d in found]

    if state is None and not trials:
        raise ExperimentError(
            f"{display} is not a Ray Tune experiment folder (no experiment_state-*.json and "
            f"no trial folders with result.json){_experiment_hint(fs, root, dirs)}"
        )
    if not trials:
        raise ExperimentError(f"experiment {display} has no trials")

    sweep = sweep_settings(fs, root, files, state)
    # PBT restores members from other members' checkpoints, where Tune's JSON logger loses rows that
    # its CSV logger keeps (trainables/ray_private/tune_patches.py:history_keeping_loggers): read both.
    both = (
        sweep.get("scheduler") in PBT_SCHEDULERS or PBT_LOG in files or any(f.startswith("pbt_policy_") for f in files)
    )
    for trial in trials:
        _read_trial_files(fs, root, trial, both)
    rows = add_late_rows(fs, root, trials, _parse_results(trials, display, population=both))
    for trial in trials:
        _complete_trial(fs, root, trial)
    sweep["search"] = read_search_record(fs, root, files, sweep, trials)
    return trials, rows, sweep


def _experiment_hint(fs, root: str, dirs: list[str]) -> str:
    """'; it holds experiments: a, b' when ``root`` is a folder of experiments, else ''."""
    inner = [
        d
        for d in dirs[:200]
        if any(
            i.base_name.startswith("experiment_state-")
            for i in fs.get_file_info(pafs.FileSelector(posixpath.join(root, d), allow_not_found=True))
        )
    ]
    return f"; it holds experiments: {', '.join(inner[:5])}" if inner else ""


def _read_trial_files(fs, root: str, trial: dict, both: bool = False) -> None:
    """Read result.json (or progress.csv; with ``both``, or when result.json is torn, its last line cut short, both
    of them) and error.txt of one trial into ``trial``."""
    folder = posixpath.join(root, trial["dir"]) if trial["dir"] else None
    trial["result"] = trial["csv"] = None
    if folder is None:
        return
    trial["result"] = read_bytes(fs, posixpath.join(folder, "result.json"))
    torn = bool(trial["result"]) and not trial["result"].endswith(b"\n")  # a copy cut short, a full disk, a write
    if both or torn or not trial["result"]:  # none, or empty (seen for PBT members paused and restored): Tune's CSV log
        trial["csv"] = read_bytes(fs, posixpath.join(folder, "progress.csv"))
        trial["result"] = None if trial["csv"] and not trial["result"] else trial["result"]
    if trial["status"] in (None, "ERROR"):
        text = read_bytes(fs, posixpath.join(folder, "error.txt"))
        if text is not None:
            lines = [ln.strip() for ln in _ANSI.sub("", text.decode("utf-8", "replace")).splitlines()]
            lines = [ln for ln in lines if ln]
            trial["error"] = lines[-1] if lines else "error (empty error.txt)"


def _complete_trial(fs, root: str, trial: dict) -> None:
    """Fill what the state file did not give: id, status, config (from the parsed results)."""
    tail = trial["tail"]
    if trial["trial_id"] is None:
        trial["trial_id"] = str(tail.get("trial_id") or trial["dir"])
    # Exact JSON first: the state file, else params.json. A result row's config comes last:
    # pyarrow may have widened it (1 -> 1.0 when another trial has 0.5).
    config = trial["config"]
    if config is None and trial["dir"]:
        params = read_bytes(fs, posixpath.join(root, trial["dir"], "params.json"))
        try:
            config = json.loads(params) if params else None
        except ValueError:
            config = None
    if not isinstance(config, dict):
        config = tail.get("config")
    trial["config"] = config if isinstance(config, dict) else {}
    ended = trial["status"] in (None, "RUNNING") and (
        ran_to_end(tail, trial["config"]) or bool(trial["dir"]) and end_recorded(fs, posixpath.join(root, trial["dir"]))
    )
    if trial["status"] == "RUNNING" and ended:  # a state older than its history
        trial["status"] = "TERMINATED"  # (its last save failed: a full disk, a driver killed)
    if trial["status"] is None:  # no readable state lists it (torn, not written yet, a copied folder)
        trial["status"] = "ERROR" if trial["error"] else "TERMINATED" if ended else "RUNNING" if tail else "PENDING"


# --------------------------------------------------------------------------------------------
# Parsing result files
# --------------------------------------------------------------------------------------------


def _parse_results(trials: list[dict], where: str, population: bool = False) -> pd.DataFrame:
    """All result rows as one DataFrame with a ``_trial`` column (index into ``trials``).

    Also sets, per trial, ``tail`` (its last row as a dict, config included), and for trials
    parsed row by row ``merged`` (last reported value of each key) and ``nonfinite``. In a PBT
    ``population`` each row also holds the config in force when it was logged, as ``config/<key>``
    columns (:func:`_config_in_force`).

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
        if (
            data
            and data.endswith(b"\n")
            and not data.startswith(b"\n")
            and b"\n\n" not in data
            and b"NaN" not in data
            and b"Infinity" not in data
            and not population  # row by row: each row's config is kept
        ):
            fast.append(i)
        elif data or trial["csv"]:
            slow.append(i)

    parts = []
    if fast:
        try:
            parts.append(_parse_fast(trials, fast))
        except (pa.ArrowInvalid, ValueError):
            slow = sorted(slow + fast)
    shorter, torn = [], []
    for i in slow:
        trial = trials[i]
        rows = _parse_result_json(trial["result"], f"{where}/{trial['dir']}/result.json") if trial["result"] else []
        if trial["csv"]:
            logged = _parse_progress_csv(trial["csv"])
            if len(logged) > len(rows):
                cut = trial["result"] is not None and not trial["result"].endswith(b"\n")
                torn += [trial["dir"]] if cut else []
                shorter += [trial["dir"]] if rows and not cut else []
                rows = _fill_from_json(logged, rows)
        if not rows:
            continue
        trial["tail"] = dict(rows[-1])
        if population:
            _config_in_force(rows)
            trial["busy"] = _busy_intervals(rows)
        for row in rows:
            row.pop("config", None)
        merged: dict = {}
        for row in rows:
            merged.update(row)
        trial["merged"] = merged
        trial["nonfinite"] = any(type(v) is float and not math.isfinite(v) for row in rows for v in row.values())
        frame = pd.DataFrame.from_records(rows)
        frame.insert(0, "_trial", i)
        parts.append(frame)
    for trial in trials:
        del trial["result"], trial["csv"]
    if shorter:
        warnings.warn(
            f"{where}: result.json of {', '.join(shorter)} lacks rows that progress.csv holds (Tune's JSON logger "
            "drops rows when a trial restarts from a checkpoint): read from progress.csv",
            stacklevel=4,
        )
    if torn:
        warnings.warn(
            f"{where}: result.json of {', '.join(torn)} is cut short (its last line is not whole: a torn copy or a "
            "full disk?): read up to its last whole line, the rows after it from progress.csv",
            stacklevel=4,
        )
    if not parts:
        return pd.DataFrame({"_trial": pd.Series(dtype="int64")})
    history = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return history.sort_values("_trial", kind="stable", ignore_index=True)


def _config_in_force(rows: list[dict]) -> None:
    """Add to each row of a PBT member its config as ``config/<key>`` entries (nested keys joined by ``/``).

    A result.json row carries the config it was logged under; a row read from progress.csv does not,
    and takes that of the rows of its run since the last restore (``iterations_since_restore`` 1
    starts one): the config changes only when the member restarts from a checkpoint. A run without
    any such row takes the config of the runs around it when both have the same (a pause, no exploit
    between them); else its config is unknown (no ``config/`` entries)."""
    runs, run = [], -1
    for row in rows:
        if run < 0 or row.get("iterations_since_restore") == 1:
            run += 1
        runs.append(run)
    known: dict[int, dict] = {}
    for row, run in zip(rows, runs):
        if isinstance(row.get("config"), dict):
            known.setdefault(run, flatten(row["config"], "config/"))
    for run in range(runs[-1] + 1 if runs else 0):
        before = [known[r] for r in range(run - 1, -1, -1) if r in known][:1]
        after = [known[r] for r in range(run + 1, runs[-1] + 1) if r in known][:1]
        if run not in known and before and before == after:
            known[run] = before[0]
    for row, run in zip(rows, runs):
        config = flatten(row["config"], "config/") if isinstance(row.get("config"), dict) else known.get(run, {})
        row.update(config)


def _busy_intervals(rows: list[dict], pause_s: float = 2.0) -> list[tuple[float, float]]:
    """When a PBT member ran, as [(start, end)] Unix seconds: each row's iteration ends at its ``timestamp``
    and took ``time_this_iter_s``; iterations less than ``pause_s`` apart are one stretch (a member paused
    while others train leaves a longer gap). ``timestamp`` is rounded down to whole seconds, so each stretch
    starts a second later than it may have: within the true one, it never overlaps the next member's."""
    spans = []
    for row in rows:
        end, took = row.get("timestamp"), row.get("time_this_iter_s")
        if isinstance(end, (int, float)) and isinstance(took, (int, float)) and math.isfinite(end + took):
            spans.append((end - took, float(end)))
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + pause_s:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return [(min(start + 1.0, end), end) for start, end in merged]


def _parse_progress_csv(data: bytes) -> list[dict]:
    """Rows of a progress.csv as dicts. An empty cell is a key that row did not report (Tune writes
    None as ""), left out so it is not taken for a NaN; a written ``nan`` stays NaN (diverged)."""
    frame = pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=["nan", "NaN", "-nan"])
    return [{k: v for k, v in row.items() if not (isinstance(v, str) and v == "")} for row in frame.to_dict("records")]


def _fill_from_json(logged: list[dict], rows: list[dict]) -> list[dict]:
    """progress.csv's rows, each replaced by the result.json row of the same report where there is one
    (same ``training_iteration`` and ``time_total_s``): that one holds every key, progress.csv only
    those of the trial's first report (Tune's CSV header)."""
    by_report = {(r.get("training_iteration"), r.get("time_total_s")): r for r in rows}
    return [by_report.get((r.get("training_iteration"), r.get("time_total_s")), r) for r in logged]


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
        row = flatten(row)
    if config is not None:
        row["config"] = config
    return row


def flatten(d: Mapping, prefix: str = "") -> dict:
    """Nested dicts become one dict with keys joined by ``/``; lists become tuples (hashable)."""
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "/"))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out
