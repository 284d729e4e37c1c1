"""The trial table and the history, shaped from the trial dicts and result rows that `analysis/reading/tune_files.py`
reads, and the repeated trials left out of them (`drop_repeats`)."""

from __future__ import annotations

import posixpath
from typing import Mapping

import numpy as np
import pandas as pd

from analysis.reading.provenance import run_releases
from analysis.reading.tune_files import flatten
from analysis.reading.tune_state import release_of, repeats
from trainables.experiment import records
from trainables.experiment.records import JOINS_STEP_METRIC
from trainables.experiment.rules import guess_mode

# Keys Tune adds to every result. They are not metrics: dropped from the history, except the
# ones in _HISTORY_KEEP, which locate a row in time.
_TUNE_KEYS = {
    "config",
    "date",
    "done",
    "pid",
    "hostname",
    "node_ip",
    "trial_id",
    "experiment_tag",
    "checkpoint_dir_name",
    "should_checkpoint",
    "time_this_iter_s",
    "time_since_restore",
    "iterations_since_restore",
    "timesteps_since_restore",
    "timesteps_total",
    "episodes_total",
    "experiment_id",
    "warmup_time",
}
_HISTORY_KEEP = ("training_iteration", "time_total_s", "timestamp")
_NOT_METRICS = _TUNE_KEYS | set(_HISTORY_KEEP) | {"diverged"}


# --------------------------------------------------------------------------------------------


def assemble(
    trials: list[dict],
    raw: pd.DataFrame,
    order: list[int],
    prefix: str,
    root: str,
    modes: Mapping[str, str],
    *,
    population: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trial table and history from the trial dicts (sorted) and the raw result rows; ``population``: a
    PBT experiment, whose repeated iterations are kept (:func:`_history_table`)."""
    ids = np.array([t["trial_id"] for t in trials], dtype=object)
    history = _history_table(raw, ids, order, population)
    metrics = [c for c in history.columns if c not in _NOT_METRICS and not c.startswith("config/")]
    numeric = [
        c for c in metrics if pd.api.types.is_numeric_dtype(history[c]) and not pd.api.types.is_bool_dtype(history[c])
    ]
    last = _last_values(history, trials, ids, metrics, numeric)
    best = _best_values(history, ids, numeric, modes)
    parts = [
        _trial_columns(trials, history, ids, prefix, root),
        last.reset_index(drop=True),
        best.reset_index(drop=True),
    ]
    return pd.concat(parts, axis=1), history


def _history_table(raw: pd.DataFrame, ids: np.ndarray, order: list[int], population: bool) -> pd.DataFrame:
    """The long history: Tune's bookkeeping keys dropped, ``trial_id`` first, rows in trial order, each
    trial's in the order logged. A row repeated after a restore (same trial and iteration) is kept once
    (the later report: a retry or resume trained that epoch again), except in a PBT ``population``:
    there a member that took another's checkpoint trains those iterations again as another model,
    so every row logged is kept."""
    position = np.empty(len(ids), dtype=np.int64)
    position[order] = np.arange(len(ids))  # raw _trial (read order) -> row in the sorted trial table
    history = raw.drop(columns=[c for c in _TUNE_KEYS if c in raw.columns])
    pos = position[history.pop("_trial").to_numpy(dtype=np.int64)]
    history.insert(0, "trial_id", ids[pos])
    history = history.iloc[np.argsort(pos, kind="stable")].reset_index(drop=True)
    if "training_iteration" not in history.columns:
        history["training_iteration"] = history.groupby("trial_id", sort=False).cumcount() + 1
    keep = ["trial_id"] + [c for c in _HISTORY_KEEP if c in history.columns]
    history = history[keep + [c for c in history.columns if c not in keep]]
    if not population:
        history = history.drop_duplicates(subset=["trial_id", "training_iteration"], keep="last", ignore_index=True)
    return _join_final_blocks(history)


def _join_final_blocks(history: pd.DataFrame) -> pd.DataFrame:
    """Drop each row that the next row of the same trial repeats with a final block joined (that row
    is marked `JOINS_STEP_METRIC` by `trainables/command/runner.py` and holds both), and the marker column."""
    if JOINS_STEP_METRIC not in history.columns:
        return history
    joins_next = history[JOINS_STEP_METRIC].shift(-1).eq(1) & history["trial_id"].eq(history["trial_id"].shift(-1))
    return history[~joins_next].drop(columns=JOINS_STEP_METRIC).reset_index(drop=True)


def _last_values(
    history: pd.DataFrame, trials: list[dict], ids: np.ndarray, metrics: list[str], numeric: list[str]
) -> pd.DataFrame:
    """``last/<metric>``: the value of the last row that reported each metric, one row per id.

    Rows parsed by pyarrow hold no NaN of their own, so a NaN there means "not reported" and
    groupby().last() is exact; for trials parsed row by row the merged dict keeps a reported NaN
    (the metric diverged)."""
    last = history.groupby("trial_id", sort=False)[metrics].last().reindex(ids) if metrics else pd.DataFrame(index=ids)
    merged = [i for i, trial in enumerate(trials) if trial["merged"] is not None]
    if merged and metrics:
        exact = pd.DataFrame.from_records([trials[i]["merged"] for i in merged], columns=metrics)
        for j, column in enumerate(metrics):
            numeric_pair = column in numeric and pd.api.types.is_numeric_dtype(exact[column])
            if not numeric_pair and last[column].dtype != exact[column].dtype:
                last[column] = last[column].astype(object)  # e.g. a string metric in some trials only
            last.iloc[merged, j] = exact[column].to_numpy()
    last.columns = [f"last/{c}" for c in last.columns]
    return last


def _best_values(history: pd.DataFrame, ids: np.ndarray, numeric: list[str], modes: Mapping[str, str]) -> pd.DataFrame:
    """``best/<metric>``: the best finite value of each numeric metric over iterations, one row per id."""
    best_parts = []
    values = history[numeric].replace([np.inf, -np.inf], np.nan)
    for column in numeric:
        by = values[column].groupby(history["trial_id"], sort=False)
        best = by.max() if (modes.get(column) or guess_mode(column)) == "max" else by.min()
        best_parts.append(best.rename(f"best/{column}"))
    return pd.concat(best_parts, axis=1).reindex(ids) if best_parts else pd.DataFrame(index=ids)


def _trial_columns(trials: list[dict], history: pd.DataFrame, ids: np.ndarray, prefix: str, root: str) -> pd.DataFrame:
    """Status, times, resources, folder and config of each trial (see :func:`load_trials`)."""
    n = len(trials)
    start = np.array([np.nan if t["start"] is None else t["start"] for t in trials], dtype=float)
    end = np.array([np.nan if t["end"] is None else t["end"] for t in trials], dtype=float)
    _estimate_spans(history, ids, start, end)
    base = pd.DataFrame(
        {
            "trial_id": ids.astype(str),
            "trial_name": [t["trial_name"] or t["trial_id"] for t in trials],
            "status": [t["status"] for t in trials],
            "diverged": [bool(t["nonfinite"] or t["tail"].get("diverged") is True) for t in trials],
            "error": pd.Series([t["error"] for t in trials], dtype=object),
            "start_time": pd.to_datetime(start, unit="s", utc=True),
            "end_time": pd.to_datetime(end, unit="s", utc=True),
            "duration_s": end - start,
            "iterations": [_iterations(t) for t in trials],
            "node": pd.Series([t["tail"].get("hostname") for t in trials], dtype=object),
        }
    )
    resources = pd.DataFrame.from_records([t["resources"] for t in trials], index=range(n))
    resources.columns = [f"resources/{c}" for c in resources.columns]
    dirs = pd.DataFrame({"trial_dir": [prefix + posixpath.join(root, t["dir"]) if t["dir"] else None for t in trials]})
    configs = _recorded_settings([flatten(t["config"]) for t in trials], dirs["trial_dir"].tolist())
    config = pd.DataFrame.from_records(configs, index=range(n))
    config.columns = [f"config/{c}" for c in config.columns]
    return pd.concat([base, resources, dirs, config], axis=1)


def _recorded_settings(configs: list[dict], folders: list[str | None]) -> list[dict]:
    """Each trial's Tune config, with the settings other trials were given and it was not filled from the full
    config the built-in trainable recorded (`trial_config.json`, its `identity` first: `amp=auto` on a CPU is
    `off`): a cell an earlier release ran with its default (`amp` off) is the cell a later run names
    (`--amp off`), not a row of its own with `amp` unknown."""
    given = set().union(*configs) if configs else set()
    out = []
    for config, folder in zip(configs, folders):
        missing = given - set(config)
        saved = records.read_trial_config(folder) if missing and folder else None
        recorded = {**((saved or {}).get("config") or {}), **((saved or {}).get("identity") or {})}
        out.append({**config, **{k: recorded[k] for k in missing if k in recorded}})
    return out


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


def _iterations(trial: dict) -> int:
    """Results a trial reported: its last row's ``training_iteration``, or the state's when that is
    later (Tune's result.json of a PBT member paused and restored can lack its last rows), and the
    rows its command logged after Tune stopped it (:mod:`analysis.reading.late_rows`)."""
    logged = trial["tail"].get("training_iteration") or 0
    state = (trial.get("last_result") or {}).get("training_iteration") or 0
    return int(max(logged, state)) + trial.get("late", 0)


def drop_repeats(
    trials: list[dict], rows: pd.DataFrame, prefix: str, root: str
) -> tuple[list[dict], pd.DataFrame, list[str]]:
    """Leave out the trials that repeat another (:func:`analysis.reading.tune_state.repeats`): of the same
    release of raysweep (the provenance records say which ran each trial).

    Returns the trials kept (ids made unique), their result rows (``_trial`` renumbered) and the
    folders (or trial ids) left out, sorted."""
    runs = run_releases(prefix + root) if len(trials) > 1 else []
    timed = [{**t, "end": t["end"] if t["end"] is not None else t["tail"].get("timestamp")} for t in trials]
    for t in timed:  # a cell run by two releases is two runs of it, not a repeat
        t["release"] = release_of(t["start"] if t["start"] is not None else t["end"], runs)
    dropped = set(repeats(timed))
    left_out = sorted(
        prefix + posixpath.join(root, t["dir"]) if t["dir"] else t["trial_id"] for t in (trials[i] for i in dropped)
    )
    kept = [i for i in range(len(trials)) if i not in dropped]
    if dropped:
        renumber = np.full(len(trials), -1, dtype=np.int64)
        renumber[kept] = np.arange(len(kept))
        rows = rows[~rows["_trial"].isin(dropped)].copy()
        rows["_trial"] = renumber[rows["_trial"].to_numpy(dtype=np.int64)]
        trials = [trials[i] for i in kept]
    seen: set[str] = set()
    for trial in trials:  # a folder copied under another name keeps its trial id; rows are grouped by id
        if trial["trial_id"] in seen:
            trial["trial_id"] = f"{trial['trial_id']}@{trial['dir']}"
        seen.add(trial["trial_id"])
    return trials, rows.reset_index(drop=True), left_out
