"""Any Ray Tune experiment as tidy pandas DataFrames: one row per trial, and the history.

The files are read by :mod:`analysis.tune_files`; this module shapes them into tables and
holds the helpers that find columns in those tables.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from analysis.errors import ExperimentError
from analysis.rules import DEFAULT_METRIC, DEFAULT_MODE  # noqa: F401  (re-exported)
from analysis.tune_files import flatten, read_experiment_files, resolve_source
from trainables.command_parse import JOINS_STEP_METRIC

STATUSES = ("TERMINATED", "ERROR", "RUNNING", "PENDING", "PAUSED")
"""Trial statuses as Tune writes them (PAUSED only with PBT-like schedulers)."""

SEED_KEY = "seed"
"""Config key of the seed axis. Only this key is dropped when grouping over seeds;
`noise_seed`, `data_seed` and the like are kept (they change the data, not the repeat)."""

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
    See those two functions for the columns, arguments and errors; ``source`` may be a list of
    experiments (see :func:`load_trials`).
    """
    if isinstance(source, (list, tuple)):
        return _load_many(source, modes, filesystem)
    fs, root, prefix = resolve_source(source, filesystem)
    trials, rows, sweep = read_experiment_files(fs, root, prefix)
    order = sorted(range(len(trials)), key=lambda i: (trials[i]["trial_id"], trials[i]["dir"] or ""))
    trials_df, history = _assemble([trials[i] for i in order], rows, order, prefix, root, modes or {})
    trials_df, history, duplicates = _drop_duplicates(trials_df, history)
    metric = sweep.get("metric")
    mode = sweep.get("mode") or (guess_mode(metric) if metric else None)
    trials_df.attrs.update(experiment=prefix + root, metric=metric, mode=mode, duplicates=duplicates)
    history.attrs.update(experiment=prefix + root)
    return trials_df, history


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
            ``ray.tune.ResultGrid``; or a list of these, to compare methods run as separate
            sweeps: the tables are stacked, a first column ``experiment`` holds each
            experiment's folder name (its full path when two names are equal), and with more
            than one experiment ``trial_id`` becomes ``<experiment>/<trial_id>`` (Tune reuses
            ids across experiments).
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

        A trial is identified by its config, seed included: of several finished (TERMINATED)
        trials of one experiment with equal configs (a second driver on the same folder, a
        copied trial folder) only the newest (latest end, then start) is kept, so a repeat
        never counts as another seed. ``df.attrs["duplicates"]`` lists the folders (or trial
        ids) left out, and :func:`duplicates_line` says so in one line. Experiments loaded
        together are never compared with each other this way.

    Raises:
        ExperimentError: the folder does not exist, holds no Tune experiment, or has no trials;
            an empty list; experiments that recorded different metrics or modes.

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
    return [c[len("last/") :] for c in trials.columns if c.startswith("last/")]


def metric_column(trials: pd.DataFrame, metric: str, scope: str = "last") -> str:
    """Column of ``trials`` holding ``metric``: ``"<scope>/<metric>"``.

    ``scope`` is ``"last"`` (last reported value), ``"best"`` (best over iterations) or
    ``"select"`` (the value under a selection rule, added by :func:`analysis.add_selected`).

    Raises:
        ExperimentError: no trial reported ``metric`` (the message lists the metrics that
            exist), or ``scope="select"`` and :func:`analysis.add_selected` did not add it.
        ValueError: ``scope`` is not ``"last"``, ``"best"`` or ``"select"``.
    """
    if scope not in ("last", "best", "select"):
        raise ValueError(f"scope must be 'last', 'best' or 'select', not {scope!r}")
    column = f"{scope}/{metric}"
    if scope == "select" and column not in trials.columns and f"last/{metric}" in trials.columns:
        raise ExperimentError(f"no selected values of {metric!r}: call analysis.add_selected first")
    if column not in trials.columns or trials[column].isna().all():
        existing = ", ".join(reported_metrics(trials)) or "none"
        raise ExperimentError(f"metric {metric!r} was not reported by any trial; reported metrics: {existing}")
    return column


def config_column(df: pd.DataFrame, name: str) -> str:
    """Column of ``df`` for config key ``name`` (``"noise_rate"`` or ``"config/noise_rate"``).

    Raises:
        ExperimentError: no such config column; the message lists the config keys.
    """
    for column in (name, f"config/{name}"):
        if column in df.columns:
            return column
    keys = ", ".join(c[len("config/") :] for c in df.columns if c.startswith("config/"))
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
    stamps = {state.parent: state.stat().st_mtime for state in folder.glob("*/experiment_state-*.json")}
    if not stamps:
        raise ExperimentError(f"no Tune experiment (experiment_state-*.json) under {folder}")
    return max(stamps, key=stamps.get)


def duplicates_line(trials: pd.DataFrame) -> str | None:
    """One line saying how many duplicate trials :func:`load_trials` left out and where, or
    None when there were none (``trials.attrs["duplicates"]``)."""
    left_out = trials.attrs.get("duplicates") or []
    if not left_out:
        return None
    shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
    return (
        f"duplicates left out: {len(left_out)} finished trial(s) with the same config (seed included) "
        f"as a newer one, which is counted instead: {shown}"
    )


def _join_final_blocks(history: pd.DataFrame) -> pd.DataFrame:
    """Drop each row that the next row of the same trial repeats with a final block joined (that row
    is marked `JOINS_STEP_METRIC` by `trainables/command.py` and holds both), and the marker column."""
    if JOINS_STEP_METRIC not in history.columns:
        return history
    joins_next = history[JOINS_STEP_METRIC].shift(-1).eq(1) & history["trial_id"].eq(history["trial_id"].shift(-1))
    return history[~joins_next].drop(columns=JOINS_STEP_METRIC).reset_index(drop=True)


def _drop_duplicates(trials: pd.DataFrame, history: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Keep the newest of the finished trials that share a config (see :func:`load_trials`)."""
    config = [c for c in trials.columns if c.startswith("config/")]
    finished = trials["status"] == "TERMINATED"
    if not config or finished.sum() < 2:
        return trials, history, []
    key = trials[config].apply(lambda row: repr(tuple(_hashable(v) for v in row)), axis=1)
    newest_first = (
        trials[finished]
        .assign(_key=key[finished])
        .sort_values(["end_time", "start_time"], ascending=False, na_position="last", kind="stable")
    )
    dropped = newest_first.index[newest_first.duplicated("_key", keep="first")]
    if len(dropped) == 0:
        return trials, history, []
    left_out = [
        d if isinstance(d, str) else i
        for d, i in zip(trials.loc[dropped, "trial_dir"], trials.loc[dropped, "trial_id"])
    ]
    kept = trials.drop(index=dropped).reset_index(drop=True)
    history = history[history["trial_id"].isin(set(kept["trial_id"]))].reset_index(drop=True)
    return kept, history, sorted(left_out)


def _load_many(
    sources: list | tuple, modes: Mapping[str, str] | None, filesystem: pafs.FileSystem | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Several experiments stacked, with an ``experiment`` column (see :func:`load_trials`)."""
    if not sources:
        raise ExperimentError("no experiment given (an empty list)")
    loaded = [load_experiment(source, modes=modes, filesystem=filesystem) for source in sources]
    paths = [trials.attrs["experiment"] for trials, _ in loaded]
    names = [path.rstrip("/").rsplit("/", 1)[-1] for path in paths]
    if len(set(names)) < len(names):
        names = paths
    recorded = {(t.attrs["metric"], t.attrs["mode"]) for t, _ in loaded if t.attrs["metric"]}
    if len(recorded) > 1:
        sweeps = ", ".join(
            f"{name}: {t.attrs['metric']} ({t.attrs['mode']})"
            for name, (t, _) in zip(names, loaded)
            if t.attrs["metric"]
        )
        raise ExperimentError(
            f"the experiments record different metrics ({sweeps}); "
            "compare experiments of the same metric, or pass the metric explicitly"
        )
    trial_parts, history_parts = [], []
    for name, (trials, history) in zip(names, loaded):
        trials, history = trials.copy(), history.copy()
        if len(loaded) > 1:
            trials["trial_id"] = name + "/" + trials["trial_id"]
            history["trial_id"] = name + "/" + history["trial_id"]
        trials.insert(0, "experiment", name)
        history.insert(0, "experiment", name)
        trial_parts.append(trials)
        history_parts.append(history)
    trials = pd.concat(trial_parts, ignore_index=True)
    history = pd.concat(history_parts, ignore_index=True)
    metric, mode = next(iter(recorded)) if recorded else (None, None)
    trials.attrs.update(
        experiment=", ".join(paths),
        experiments=paths,
        metric=metric,
        mode=mode,
        duplicates=[d for t, _ in loaded for d in t.attrs.get("duplicates", [])],
    )
    history.attrs.update(experiment=", ".join(paths), experiments=paths)
    return trials, history


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


# --------------------------------------------------------------------------------------------
# Assembling the DataFrames
# --------------------------------------------------------------------------------------------


def _assemble(
    trials: list[dict], raw: pd.DataFrame, order: list[int], prefix: str, root: str, modes: Mapping[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
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
    history = _join_final_blocks(history)

    metrics = [c for c in history.columns if c not in _NOT_METRICS]
    numeric = [
        c for c in metrics if pd.api.types.is_numeric_dtype(history[c]) and not pd.api.types.is_bool_dtype(history[c])
    ]
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
    base = pd.DataFrame(
        {
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
        }
    )
    resources = pd.DataFrame.from_records([t["resources"] for t in trials], index=range(n))
    resources.columns = [f"resources/{c}" for c in resources.columns]
    dirs = pd.DataFrame({"trial_dir": [prefix + posixpath.join(root, t["dir"]) if t["dir"] else None for t in trials]})
    config = pd.DataFrame.from_records([flatten(t["config"]) for t in trials], index=range(n))
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
