"""Extend, skip existing and the final outcome of a sweep that lives in `<storage-path>/<name>/`.

Three ways to run a sweep again under the same name:
- `--resume`: the driver was killed (SIGKILL, Ctrl-C, reboot). `Tuner.restore` continues the sweep
  as it was: finished trials stay finished, unfinished ones continue from their newest checkpoint,
  errored ones stay errored unless `--retry-errored` (then they continue from their checkpoint too).
- default (skip existing): the grid is planned cell by cell. A cell whose trial already finished in
  this experiment folder (same `config_hash`, see `trainables.config.identity`: a field added by a later
  release at its default, or `amp=auto` on a CPU, keeps the hash of an earlier release) is reused; only the other
  cells run, in a new `Tuner` over an explicit list of configs. That is how a finished grid is
  extended with more noise rates or seeds: Ray's restore cannot change a search space
  (ray-project/ray#42221), so this is done here, on top of Tune's result files.
- `--no-skip-existing`: every cell runs again; the old trial folders stay, new ones get a suffix.

A trial is *finished* when its last result has `epoch == epochs` or `diverged`; its config hash is
in `trial_config.json`, written by the trial runtime at its start. Tune's files are read by
`analysis` (`load_trials`), the one reader of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import warnings
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pandas as pd

from analysis import ExperimentError, load_trials
from sweeps.engine.run.trial_folders import FreshDirname, fresh_dirname  # noqa: F401 (tuner.pkl of earlier sweeps names resume.FreshDirname)
from trainables.command import initial_failures
from trainables.command.failure import failure_line
from trainables.config import TrialIdentity, config_hash
from trainables.experiment import records, storage
from trainables.experiment.outcome import ERRORED, INTERRUPTED, NO_METRIC, NOT_RUN, NOT_STARTED


def command_hash(config: dict) -> str:
    """The id of a command trial's config: sha1 of its sorted JSON (16 hex digits); a command
    sweep has no `TrainConfig` defaults to fill in."""
    return hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finished_trials(experiment_dir: str | Path, hash_fn: Callable[[dict], str] = TrialIdentity()) -> dict[str, str]:
    """Finished trials of an experiment folder: config hash -> trial folder (the newest per hash).

    A trial is finished when it diverged, or its last `epoch` is its config's `epochs`, or (a
    command trial, whose config has no `epochs`) Tune recorded it as TERMINATED without error after
    it reported a step (a sweep stopped before a trial reported, e.g. by --max-initial-failures, leaves it unfinished).
    Its hash is today's of the config in `trial_config.json` (the built-in trainable writes it), else
    `hash_fn` of its config. The folder may be local or on object storage (s3://...): trial
    folders are returned as strings, local paths or URIs, and read through pyarrow.
    """
    return _scan(experiment_dir, hash_fn)[0]


def _scan(experiment_dir: str | Path, hash_fn: Callable[[dict], str]) -> tuple[dict[str, str], dict[str, list]]:
    """(`finished_trials`, {config hash: folders of its trials that did not finish}) of an experiment folder."""
    finished, unfinished, _ = _scan_configs(experiment_dir, hash_fn)
    return finished, unfinished


def _scan_configs(experiment_dir: str | Path, hash_fn: Callable[[dict], str]) -> tuple[dict, dict, dict]:
    """`_scan`, and {config hash: config} of the finished trials (to name what changed in a cell's identity)."""
    found: dict[str, tuple[float, str]] = {}
    unfinished: dict[str, list] = {}
    configs: dict[str, dict] = {}
    for row in _trials_of(experiment_dir).to_dict("records"):
        trial_dir = row["trial_dir"]
        saved = records.read_trial_config(trial_dir)  # a torn one: warned, then hashed from Tune's config
        if saved is not None:  # the built-in trainable: its resolved config (epochs included)
            key, config = _saved_identity(saved, hash_fn), saved["config"]
            row["config/epochs"] = config["epochs"]
        else:
            config = {k[len("config/") :]: v for k, v in row.items() if k.startswith("config/") and not _missing(v)}
            key = hash_fn(config)
        if not _finished(row):
            unfinished.setdefault(key, []).append(trial_dir)
            continue
        mtime = storage.modified(storage.join(trial_dir, "result.json"))
        if mtime is not None and (key not in found or mtime > found[key][0]):
            found[key] = (mtime, trial_dir)
            configs[key] = config
    return {h: d for h, (_, d) in found.items()}, unfinished, configs


def _saved_identity(saved: dict, hash_fn: Callable[[dict], str]) -> str:
    """The hash of a `trial_config.json` by today's `config.identity` (its own device when it recorded it, else
    the sweep's): a trial of an earlier release keeps its cell. Its recorded hash when today's config refuses it."""
    try:
        if "on_gpu" in saved:
            return config_hash(saved["config"], saved["on_gpu"])
        return hash_fn(saved["config"])
    except ValueError:  # a field a later release removed or renamed: the hash it recorded
        return saved["config_hash"]


def say_changed_identity(
    todo: list[dict], cells: list[dict], finished: dict[str, dict], hash_fn: Callable[[dict], str], where
) -> None:
    """Print one line when cells to run match finished trials of `where` in every setting the grid (`cells`) sweeps
    but differ in a setting that is the same for the whole grid (an option given anew, a default changed between
    releases): which setting, its value then and now. `finished`: {hash: config} of the finished trials not reused."""
    fields_of = getattr(hash_fn, "fields", lambda config: config)  # `TrialIdentity.fields`; a command: its config
    grid = [fields_of(c) for c in cells]
    swept = {k for k in set().union(*grid) if len({repr(c.get(k)) for c in grid}) > 1} if grid else set()
    changed: dict[str, tuple] = {}
    matched = 0
    for cell in (fields_of(c) for c in todo):
        for config in finished.values():
            try:
                old = fields_of(config)
            except ValueError:
                continue
            diff = sorted(k for k in set(cell) | set(old) if cell.get(k) != old.get(k))
            if diff and not set(diff) & swept:
                matched += 1
                changed.update({k: (old.get(k), cell.get(k)) for k in diff})
                break
    if changed:
        what = ", ".join(f"{k} (then {a!r}, now {b!r})" for k, (a, b) in changed.items())
        print(
            f"{matched} cell(s) differ from finished trials of {where} only in {what}: they run again as new "
            "cells; give the old value(s) as flags to reuse those trials",
            flush=True,
        )


def unfinished_trials(experiment_dir: str | Path, hash_fn: Callable[[dict], str] = TrialIdentity()) -> list:
    """The trial folders of an experiment that did not finish (interrupted, errored, never run): what a
    `--resume` has left to run (an errored one only with --retry-errored)."""
    return [folder for folders in _scan(experiment_dir, hash_fn)[1].values() for folder in folders]


def plan_cells(
    cells: list[dict],
    experiment_dir: str | Path,
    skip_existing: bool,
    hash_fn: Callable[[dict], str] = TrialIdentity(),
    relaunch: bool = False,
) -> tuple[list[dict], dict[str, str]]:
    """Split the grid into cells to run and finished trials to reuse.

    Args:
        cells: one full trial config per cell of the grid.
        experiment_dir: `<storage-path>/<name>`.
        skip_existing: False runs every cell.
        hash_fn: a config's id (`TrialIdentity` for the built-in trainable, `command_hash` for commands).
        relaunch: a new run of the sweep (not `--resume`): when cells to run have unfinished trials of an
            earlier run there (interrupted, errored, never run), say that they run again from the start in
            new folders, and what --resume or a new --name would do instead.
    Returns:
        (configs to run, {config hash: trial folder} of the reused cells).
    """
    done, unfinished, configs = _scan_configs(experiment_dir, hash_fn) if skip_existing or relaunch else ({}, {}, {})
    done = done if skip_existing else {}
    hashes = [hash_fn(c) for c in cells]
    todo = [c for c, h in zip(cells, hashes) if h not in done]
    reused = {h: done[h] for h in hashes if h in done}
    if skip_existing:
        say_changed_identity(
            todo, cells, {h: c for h, c in configs.items() if h not in reused}, hash_fn, experiment_dir
        )
    again = [h for h in hashes if h not in done and h in unfinished]
    if relaunch and again:
        print(
            f"{experiment_dir} holds this sweep already: {len(again)} of its cells did not finish there (interrupted, "
            "errored or never run) and run again from the start, in new folders beside the old ones "
            "(<trial>_<id>). To continue them from their checkpoints instead, stop this run and add --resume "
            "to the same command; for a separate sweep, use a new --name.",
            flush=True,
        )
    return todo, reused


def cells_not_in(results, cells: list[dict], hash_fn: Callable[[dict], str] = TrialIdentity()) -> list[dict]:
    """The cells whose config hash matches no trial of `results` (a `ResultGrid`)."""
    ran = {hash_fn(r.config) for r in results}
    return [c for c in cells if hash_fn(c) not in ran]


def say_outcome(
    grids: list | None, reused: dict[str, str], metric: str, requeued: set[str] = frozenset(), ending=None
) -> int:
    """Print errored and diverged trials, and why no trial has a result if none has; return the exit code.

    Args:
        grids: the `ResultGrid`s of this run (restored or new, then any GPU out-of-memory
            re-queue rounds); None when nothing ran.
        reused: finished trials of earlier runs, from `plan_cells`.
        metric: the sweep metric; a trial that never reported it has no result.
        requeued: folders of trials that ran out of GPU memory and were re-run (not errors).
        ending: how the first fit ended (`sweep_end.Ending`): each trial's outcome, so that a trial the
            sweep stopped after its command failed counts as errored, not done.
    Returns:
        0 when every trial finished; 1 when any trial of this run errored (`no metric` included) or
        diverged, or when no trial (run now or reused) reported `metric`.
    A command trial's failure is read from its record (`records.read_failure`), never from its error's text.
    """
    results = [r for grid in (grids or []) for r in grid if r.path not in requeued]
    reused = reused_outside(grids, reused)
    if reused:
        print(f"{len(reused)} finished trial(s) reused from earlier runs (--no-skip-existing reruns them)")
    reused_diverged = _diverged_rows(reused)
    diverged = _say_diverged(results, reused_diverged)
    outcomes = ending.outcomes if ending is not None else {}
    failed = [r for r in results if r.error is not None or outcomes.get(r.path) in (ERRORED, NO_METRIC)]
    failures = {r.path: records.read_failure(_trial_uri(r)) for r in failed}  # None: not a command's failure
    early = {path: failure for path, failure in failures.items() if failure is not None and failure.early}
    for r in (r for r in failed if r.path not in early):
        print(f"error: trial {Path(r.path).name} failed: {_error_line(r, failures[r.path])}")
    initial_failures.explain(early)  # each distinct error once, with a hint: a retry cannot fix it
    retryable = [r for r in failed if r.path not in early and not getattr(failures[r.path], "not_retried", None)]
    if retryable:  # a command that exited 0 without its metric, or 2, would do the same again
        print(
            f"{len(retryable)} trial(s) ended in error; "
            "`--resume --retry-errored` continues them from their checkpoints"
        )
    scored = [r for r in results if r not in failed and _reported(r, metric)]
    if not scored and len(reused) == len(reused_diverged):
        why = f"{len(failed)} errored, {len(diverged)} diverged" if results or reused else "no trial ran"
        print(f"no result: no trial reported {metric} ({why})")
        return 1
    return 1 if failed or diverged else 0


def reused_outside(grids: list | None, reused: dict[str, str]) -> dict[str, str]:
    """The reused trials (`plan_cells`) that are not trials of `grids` (`ResultGrid`s): a resumed sweep's
    restored fit holds the finished trials it reuses, which count once."""
    ran = {Path(r.path).name for grid in (grids or []) for r in grid}
    return {h: d for h, d in reused.items() if posixpath.basename(str(d)) not in ran}


def _say_diverged(results: list, reused_diverged: list[dict]) -> list:
    """Print each diverged trial of this run (`results`) and of the reused ones (their `load_trials` rows):
    where and when, and its dump; returns them as (folder, last result)."""
    diverged = [(Path(r.path), r.metrics) for r in results if r.error is None and r.metrics.get("diverged")]
    diverged += [
        (
            Path(row["trial_dir"])
            if "://" not in row["trial_dir"]
            else PurePosixPath(row["trial_dir"].split("://", 1)[1]),
            {
                "epoch": row.get("last/epoch"),
                "diverged/step": row.get("last/diverged/step"),
                "diverged/seed": row.get("last/diverged/seed"),
            },
        )
        for row in reused_diverged
    ]
    for folder, last in diverged:
        seed = f", seed {last['diverged/seed']:g}" if isinstance(last.get("diverged/seed"), (int, float)) else ""
        print(
            f"diverged (not ranked): {folder.name} at epoch {last.get('epoch')}, "
            f"step {last.get('diverged/step')}{seed}; "
            f"dump: {records.record_path(folder, records.DIVERGENCE_FILE)}"
        )
    return diverged


def first_error(grids: list | None, ending=None) -> str | None:
    """`trial NAME: LINE` of the first trial of `grids` (`ResultGrid`s) that failed (errored, `no metric`):
    its failure record's exception line (else its summary), or its error's last line; None when none did.
    A command the failure gate never started is no error of its own."""
    outcomes = ending.outcomes if ending is not None else {}
    for result in (r for grid in (grids or []) for r in grid):
        if result.error is None and outcomes.get(result.path) not in (ERRORED, NO_METRIC):
            continue
        failure = records.read_failure(_trial_uri(result))
        if failure is not None and failure.kind == NOT_STARTED:
            continue
        if failure is not None:
            line = failure.exception or failure.summary
        else:
            error = str(result.error or "").strip().splitlines()
            line = error[-1] if error else type(result.error).__name__
        return f"trial {Path(result.path).name}: {line}"
    return None


def _error_line(result, failure) -> str:
    """What a failed trial's outcome line says: its failure record's line (for `no metric`, with what each
    source held), else the last line of its error; then its error file."""
    if failure is not None:
        detail = f"\n  {failure.detail}" if failure.kind == NO_METRIC and failure.detail else ""
        return f"{failure_line(failure)}; error file: {Path(result.path) / 'error.txt'}{detail}"
    error = str(result.error).strip().splitlines()
    return f"{error[-1] if error else type(result.error).__name__}; error file: {Path(result.path) / 'error.txt'}"


def _trial_uri(result) -> str:
    """A `Result`'s trial folder as `trainables.experiment.storage` names it: a local path, or `s3://...`."""
    kind = getattr(getattr(result, "filesystem", None), "type_name", "local")
    return result.path if kind == "local" else f"{kind}://{result.path}"


def _reported(result, metric: str) -> bool:
    """Whether a trial's `Result` reported `metric`: in its last result, or (a command's final
    result holds only what was printed after the last step) in any row of its history."""
    if isinstance(result.metrics.get(metric), (int, float)):
        return True
    frame = result.metrics_dataframe
    return frame is not None and metric in frame and frame[metric].notna().any()


def _diverged_rows(reused: dict[str, str]) -> list[dict]:
    """`load_trials` rows of the reused trials whose last result is a divergence."""
    if not reused:
        return []
    rows = _trials_of(posixpath.dirname(str(next(iter(reused.values())))))
    folders = {str(d) for d in reused.values()}
    return [r for r in rows.to_dict("records") if r["trial_dir"] in folders and bool(r.get("diverged"))]


def _finished(row: dict) -> bool:
    """A trial row of `load_trials` that diverged, reached its `epochs`, or (no `epochs` in its config: a
    command) ended TERMINATED without error after a step and was not stopped by the sweep (its `outcome`);
    never one whose failure was marked or that never ran."""
    if bool(row.get("diverged")):
        return True
    if row.get("outcome") in (ERRORED, NO_METRIC, NOT_RUN):  # a failure marked, or a trial stopped before it ran
        return False
    if _missing(row.get("config/epochs")):  # a command: one that reported no step, or the sweep stopped, is not
        stopped = row.get("outcome") == INTERRUPTED
        return (
            row.get("status") == "TERMINATED"
            and _missing(row.get("error"))
            and not _missing(row.get("last/epoch"))
            and not stopped
        )
    return row.get("last/epoch") == row.get("config/epochs")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _trials_of(experiment_dir: str | Path) -> pd.DataFrame:
    """`analysis.load_trials` of an experiment folder (local or a URI); an empty frame when there is none."""
    if not storage.exists(str(experiment_dir)):
        return pd.DataFrame()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a half-written line of a killed trial: not finished anyway
        try:
            return load_trials(str(experiment_dir))
        except ExperimentError:
            return pd.DataFrame()
