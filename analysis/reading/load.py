"""Any Ray Tune experiment as tidy pandas DataFrames: one row per trial, and the history.

The files are read by :mod:`analysis.reading.tune_files` and shaped by :mod:`analysis.reading.trial_table`; this
module leaves out repeated trials, stacks experiments and holds the helpers that find columns.

A trial is identified by its config, seed included, whatever its folder name and whether or not a
state file lists it: of the trials of one experiment with equal configs (a copied trial folder, runs
merged from two machines, a second driver on the same folder, an errored or unfinished repeat of a
finished cell) one is kept: the finished one, then the newest (:func:`analysis.reading.tune_state.repeats`),
so a repeat never counts as another seed. ``df.attrs["duplicates"]`` lists the folders (or trial ids)
left out, and :func:`duplicates_line` says so in one line. Experiments loaded together are never
compared with each other this way.

``start_time`` is Tune's float ``run_metadata.start_time`` and ``end_time`` the time of the last
result (``last_result_time``); without a state file both are estimated from ``timestamp`` (int
seconds) and ``time_total_s`` (float) of all rows, which bounds the start to within the 1 s rounding
and usually much closer. Both are NaT when unknown (pending trials).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import pandas as pd
import pyarrow.fs as pafs

from analysis.reading.oom_rounds import round_folders, with_reruns
from analysis.reading.pbt_members import member_view
from analysis.reading.trial_outcomes import trial_outcomes
from analysis.reading.trial_table import assemble, drop_repeats
from analysis.reading.tune_files import read_experiment_files
from analysis.reading.tune_state import describe_duplicates, resolve_source
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective
from trainables.experiment.rules import guess_mode

SEED_KEY = "seed"
"""Config key of the seed axis. Only this key is dropped when grouping over seeds;
`noise_seed`, `data_seed` and the like are kept (they change the data, not the repeat)."""


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
    read = _load_folder(fs, root, prefix, modes, prefix + root)
    trials_df, history, sweep, duplicates = read.trials, read.history, read.sweep, read.duplicates
    for folder in round_folders(fs, root):  # out-of-memory re-runs count in place of their failures
        try:
            rerun = _load_folder(fs, folder, prefix, modes, prefix + root)
        except ExperimentError:
            continue  # a round that has no trial yet
        trials_df, history = with_reruns(trials_df, history, rerun.trials, rerun.history)
        duplicates += rerun.duplicates
    metric = sweep.get("metric")
    mode = sweep.get("mode") or (guess_mode(metric) if metric else None)
    test_metric = sweep.get("test_metric", Objective.test_metric)  # older sweeps: the default, when reported
    trials_df.attrs.update(
        experiment=prefix + root,
        metric=metric,
        mode=mode,
        test_metric=test_metric,
        duplicates=duplicates,
        search=sweep.get("search"),
        ended_by=read.ended_by,
        not_created=read.not_created,
    )
    history.attrs.update(experiment=prefix + root)
    return trials_df, history


@dataclasses.dataclass
class _Folder:
    """One experiment folder read: its trials and history tables, the sweep's record (``raysweep.json``), the
    repeats left out, why the sweep ended (``ended_by``) and its planned trials never made (``not_created``), as
    ``load_trials`` says."""

    trials: pd.DataFrame
    history: pd.DataFrame
    sweep: dict
    duplicates: list[str]
    ended_by: str | None
    not_created: int


def _load_folder(fs, root: str, prefix: str, modes: Mapping[str, str] | None, driver: str) -> _Folder:
    """One experiment folder; ``driver``: the experiment whose driver record says whether and how the sweep
    ended (a re-run round's is its sweep's)."""
    trials, rows, sweep = read_experiment_files(fs, root, prefix)
    trials, rows, duplicates = drop_repeats(trials, rows, prefix, root)
    order = sorted(range(len(trials)), key=lambda i: (trials[i]["trial_id"], trials[i]["dir"] or ""))
    trials = [trials[i] for i in order]
    population = getattr(sweep.get("search"), "kind", None) == "pbt"
    trials_df, history = assemble(trials, rows, order, prefix, root, modes or {}, population=population)
    outcomes, ended_by, not_created = trial_outcomes(trials, driver, sweep.get("search"))
    trials_df.insert(trials_df.columns.get_loc("status") + 1, "outcome", outcomes)
    if population:  # each member a row of its own, its hyperparameters those at its best epoch
        metric = sweep.get("metric")
        mode = sweep.get("mode") or (guess_mode(metric) if metric else None)
        busy = {t["trial_id"]: t["busy"] for t in trials if t.get("busy")}
        objective = Objective(metric, mode) if metric and mode in ("max", "min") else Objective()
        trials_df = member_view(trials_df, history, objective, busy)
    return _Folder(trials_df, history, sweep, duplicates, ended_by, not_created)


def load_trials(
    source: Any,
    *,
    modes: Mapping[str, str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> pd.DataFrame:
    """One row per trial of a Ray Tune experiment.

    Args:
        source: experiment folder (local path, or a URI that ``pyarrow.fs`` or ``fsspec`` understand,
            e.g. ``s3://bucket/runs/noise_grid``, ``memory://x``), or a ``ray.tune.ResultGrid``; or a
            list of these, to compare methods run as separate sweeps: the tables are stacked, a first
            column ``experiment`` holds each experiment's folder name (its full path when two names
            are equal), and with more than one experiment ``trial_id`` becomes
            ``<experiment>/<trial_id>`` (Tune reuses ids across experiments).
        modes: ``{metric: "min" | "max"}`` for the ``best/<metric>`` columns; other metrics: :func:`guess_mode`.
        filesystem: a ``pyarrow.fs.FileSystem`` to read ``source`` with (then ``source`` is a path on it).

    Returns:
        DataFrame, one row per trial, in trial-id order, with columns

        - ``trial_id`` (str), ``trial_name`` (str: custom name such as ``asym_0.375_seed1``, else
          ``<trainable>_<trial_id>``, else the folder name),
        - ``status``: TERMINATED / ERROR / RUNNING / PENDING (PAUSED) as Tune recorded it (no state
          file: ERROR with ``error.txt``, TERMINATED if the last result has ``done``, RUNNING with results),
        - ``outcome``: ``finished``, ``pruned`` (its scheduler stopped it early), ``errored``, ``no metric``,
          ``diverged``, ``interrupted`` (the sweep's end stopped it: ``attrs["ended_by"]`` says how), ``not
          run``, ``running`` or ``pending`` (:func:`trainables.experiment.outcome.trial_outcome`),
        - ``diverged`` (bool): a reported metric was NaN or ±inf at some iteration, or the trial
          reported ``diverged=True``,
        - ``error`` (str or None): last line of ``error.txt`` (e.g. ``RuntimeError: boom``),
        - ``start_time``, ``end_time`` (UTC timestamps), ``duration_s`` (float seconds): Tune's
          start time and the time of the last result (see the module docstring); NaT when unknown,
        - ``iterations`` (int): last ``training_iteration`` (0 without results; the state file's when later);
          ``node``: its hostname,
        - ``resources/<name>`` (float): resources requested, e.g. ``resources/CPU``,
          ``resources/GPU``, summed over the placement-group bundles (absent without a state file),
        - ``trial_dir`` (str): the trial folder, as a local path or URI,
        - ``config/<key>``: the config, nested keys joined with ``/`` (lists become tuples),
        - ``last/<metric>``: the last reported value of each metric (NaN for a diverged metric),
        - ``best/<metric>``: the best finite value of each numeric metric over iterations.

        ``df.attrs`` holds ``experiment`` (the source as a string), ``metric`` / ``mode`` as the sweep
        recorded them (``raysweep.json``, else ``TuneConfig``'s metric, :func:`guess_mode`; else None) and
        ``test_metric`` (``raysweep.json``'s: None for a sweep without one; not recorded: ``test/acc``);
        ``search``: a search's or PBT's :class:`analysis.reading.search_record.SearchRecord` (else None);
        ``ended_by``: why the sweep ended, as its driver recorded it (``trainables.experiment.outcome.SWEEP_ENDS``:
        ``finished``, ``Ctrl-C``, ``time budget``, ...; None while it runs or when unknown); ``not_created``: the
        trials it planned that its searcher never made (a search its time budget or Ctrl-C ended: not run; 0
        while it runs or when its driver did not record them; summed over experiments compared together).

        Repeated trials (equal configs) are left out as the module docstring says;
        ``df.attrs["duplicates"]`` lists them. A trial the sweep re-ran after it ran out of GPU memory
        is read from the sweep's ``<name>_oom_gpu<share>`` folder in place of its failure
        (:mod:`analysis.reading.oom_rounds`); ``df.attrs["oom_reruns"]`` lists (failed, re-run) folders.

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
        checkpoint (same trial and iteration) keep the later report, except in a PBT experiment:
        there every row logged is kept, in the order logged (a member that took another's
        checkpoint trains those iterations again, as another model).

    Raises:
        ExperimentError: as for :func:`load_trials`.
    """
    return load_experiment(source, filesystem=filesystem)[1]


def resolve_objective(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    asked: Objective | Mapping[str, Any] | None = None,
    *,
    reported: bool = True,
) -> Objective:
    """The objective to report: the one asked for, else the sweep's, else the defaults.

    The sweep's is what :func:`load_experiment` found in ``raysweep.json`` or Tune's state
    (``trials.attrs``: ``metric``, ``mode``, ``test_metric``). Of a metric asked without a mode, the mode is
    the recorded one when it is the recorded metric, else :func:`guess_mode`'s. Without a test metric
    asked, the sweep's when some trial reported it, else none (the tables show the metric itself).

    Args:
        asked: an `Objective` (returned as it is), or the fields given (field -> value; None or
            missing: the sweep's), e.g. ``{"metric": "val/loss"}``.
        reported: refuse a metric no trial reported (False: `--json`, whose document says so; a sweep that
            recorded none is then read by the default metric).
    Raises:
        ExperimentError: the metric was not reported (the message lists the reported ones), or
            no metric was asked or recorded and ``val/acc`` was not reported; a bad mode or rule.
    """
    if isinstance(asked, Objective):
        return asked
    asked = {name: value for name, value in (asked or {}).items() if value is not None}
    recorded, recorded_mode = trials.attrs.get("metric"), trials.attrs.get("mode")
    if not recorded and Objective.metric in reported_metrics(trials):
        recorded, recorded_mode = Objective.metric, Objective.mode  # a sweep that recorded none
    metric = asked.get("metric", recorded if recorded or reported else Objective.metric)
    if metric is None:
        existing = ", ".join(reported_metrics(trials)) or "none"
        raise ExperimentError(f"the sweep recorded no metric; pass one with --metric (reported metrics: {existing})")
    if reported:
        metric_column(trials, metric)
    mode = recorded_mode if metric == recorded and recorded_mode else guess_mode(metric)
    test_metric = trials.attrs.get("test_metric", Objective.test_metric)
    if test_metric is None or test_metric not in history.columns or not history[test_metric].notna().any():
        test_metric = None  # the sweep has none: tables show the metric itself
    return Objective(**({"metric": metric, "mode": mode, "test_metric": test_metric} | asked))


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


def duplicates_line(trials: pd.DataFrame) -> str | None:
    """One line saying how many duplicate trials :func:`load_trials` left out and where, or
    None when there were none (``trials.attrs["duplicates"]``)."""
    return describe_duplicates(trials.attrs.get("duplicates") or [])


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
    tests = {t.attrs.get("test_metric") for t, _ in loaded}
    trials.attrs.update(
        experiment=", ".join(paths),
        experiments=paths,
        metric=metric,
        mode=mode,
        test_metric=tests.pop() if len(tests) == 1 else None,
        duplicates=[d for t, _ in loaded for d in t.attrs.get("duplicates", [])],
        search=loaded[0][0].attrs.get("search") if len(loaded) == 1 else None,
        not_created=sum(int(t.attrs.get("not_created") or 0) for t, _ in loaded),
    )
    history.attrs.update(experiment=", ".join(paths), experiments=paths)
    return trials, history


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)
