"""Resume, extend and report a sweep that lives in `<storage-path>/<name>/`.

Three ways to run a sweep again under the same name:
- `--resume`: the driver was killed (SIGKILL, Ctrl-C, reboot). `Tuner.restore` continues the sweep
  as it was: finished trials stay finished, unfinished ones continue from their newest checkpoint,
  errored ones stay errored unless `--retry-errored` (then they continue from their checkpoint too).
- default (skip existing): the grid is planned cell by cell. A cell whose trial already finished in
  this experiment folder (same `config_hash`, see `trainables.config`) is reused; only the other
  cells run, in a new `Tuner` over an explicit list of configs. That is how a finished grid is
  extended with more noise rates or seeds: Ray's restore cannot change a search space
  (ray-project/ray#42221), so this is done here, on top of Tune's result files.
- `--no-skip-existing`: every cell runs again; the old trial folders stay, new ones get a suffix.

A trial is *finished* when its last line of `result.json` has `epoch == epochs` or `diverged`;
its config hash is in `trial_config.json`, written by the trainable at the start of the trial.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from trainables.config import METRIC, MODE, config_hash


def finished_trials(experiment_dir: str | Path) -> dict[str, Path]:
    """Finished trials of an experiment folder: config hash -> trial folder (the newest per hash).

    Local folders only; a remote `storage_path` (s3://...) has no finished trials to reuse here.
    """
    found: dict[str, tuple[float, Path]] = {}
    if "://" in str(experiment_dir) or not Path(experiment_dir).is_dir():
        return {}
    for trial_dir in Path(experiment_dir).iterdir():
        last = last_result(trial_dir)
        if last is None or not (trial_dir / "trial_config.json").exists():
            continue
        saved = json.loads((trial_dir / "trial_config.json").read_text())
        if last.get("diverged") or last.get("epoch") == saved["config"]["epochs"]:
            mtime = (trial_dir / "result.json").stat().st_mtime
            if saved["config_hash"] not in found or mtime > found[saved["config_hash"]][0]:
                found[saved["config_hash"]] = (mtime, trial_dir)
    return {h: d for h, (_, d) in found.items()}


def plan_cells(cells: list[dict], experiment_dir: str | Path, skip_existing: bool) -> tuple[list[dict], dict[str, Path]]:
    """Split the grid into cells to run and finished trials to reuse.

    Args:
        cells: one full trial config per cell of the grid.
        experiment_dir: `<storage-path>/<name>`.
        skip_existing: False runs every cell.
    Returns:
        (configs to run, {config hash: trial folder} of the reused cells).
    """
    done = finished_trials(experiment_dir) if skip_existing else {}
    todo = [c for c in cells if config_hash(c) not in done]
    reused = {config_hash(c): done[config_hash(c)] for c in cells if config_hash(c) in done}
    return todo, reused


def fresh_dirname(experiment_dir: str | Path, name: Callable) -> Callable:
    """A `trial_dirname_creator`: `name(trial)`, plus `_<trial_id>` when that folder already exists
    (a cell rerun next to its old, unfinished or errored, trial)."""
    def dirname(trial) -> str:
        base = name(trial)
        exists = "://" not in str(experiment_dir) and (Path(experiment_dir) / base).exists()
        return f"{base}_{trial.trial_id}" if exists else base
    return dirname


def cells_not_in(results, cells: list[dict]) -> list[dict]:
    """The cells whose config hash matches no trial of `results` (a `ResultGrid`)."""
    ran = {config_hash(r.config) for r in results}
    return [c for c in cells if config_hash(c) not in ran]


def last_result(trial_dir: Path) -> dict | None:
    """The last line of a trial's `result.json`, None if it has none."""
    path = Path(trial_dir) / "result.json"
    lines = path.read_text().strip().splitlines() if path.exists() else []
    return json.loads(lines[-1]) if lines else None


def reused_rows(reused: dict[str, Path]) -> pd.DataFrame:
    """One row per reused, non-diverged trial: its best `METRIC` result and `config/*` columns,
    shaped like `ResultGrid.get_dataframe(filter_metric=METRIC, filter_mode=MODE)`."""
    rows = []
    for trial_dir in reused.values():
        results = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line.strip()]
        scored = [r for r in results if METRIC in r]
        if results[-1].get("diverged") or not scored:
            continue
        best = (max if MODE == "max" else min)(scored, key=lambda r: r[METRIC])
        config = json.loads((trial_dir / "params.json").read_text())
        rows.append({**{k: v for k, v in best.items() if k != "config"},
                     **{f"config/{k}": v for k, v in config.items()}, "logdir": str(trial_dir)})
    return pd.DataFrame(rows)


def report_outcome(grids: list | None, reused: dict[str, Path], requeued: set[str] = frozenset()) -> tuple[pd.DataFrame, int]:
    """Print errored and diverged trials; return the table of healthy trials and the exit code.

    Args:
        grids: the `ResultGrid`s of this run (restored or new, then any GPU out-of-memory
            re-queue rounds); None when nothing ran.
        reused: finished trials of earlier runs, from `plan_cells`.
        requeued: folders of trials that ran out of GPU memory and were re-run (not errors).
    Returns:
        (one row per trial that neither errored nor diverged, best `METRIC` row, as in
        `get_dataframe`; exit code: 1 when any trial of this run ended in error, else 0).
    """
    grids = [g for g in (grids or []) if len(g)]
    results = [r for grid in grids for r in grid if r.path not in requeued]
    frames = [g.get_dataframe(filter_metric=METRIC, filter_mode=MODE) for g in grids]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    requeued_ids = {r.metrics.get("trial_id") for grid in grids for r in grid if r.path in requeued}
    if len(df) and requeued_ids:
        df = df[~df["trial_id"].isin(requeued_ids)]
    ran = {Path(r.path).name for r in results}
    reused = {h: d for h, d in reused.items() if d.name not in ran}  # a resumed sweep holds some of them
    diverged = [(Path(r.path), r.metrics) for r in results if r.error is None and r.metrics.get("diverged")]
    if len(df):
        df = df[~df["trial_id"].isin({last.get("trial_id") for _, last in diverged})]
    df = pd.concat([df, reused_rows(reused)], ignore_index=True)
    if reused:
        print(f"{len(reused)} finished trial(s) reused from earlier runs (--no-skip-existing reruns them)")
    diverged += [(folder, last_result(folder)) for folder in reused.values() if last_result(folder).get("diverged")]
    for folder, last in diverged:
        print(f"diverged (not ranked): {folder.name} at epoch {last['epoch']}, step {last.get('diverged/step')}; "
              f"dump: {folder / 'divergence.json'}")
    failed = [r for r in results if r.error is not None]
    for r in failed:
        error = str(r.error).strip().splitlines()
        print(f"error: trial {Path(r.path).name} failed: {error[-1] if error else type(r.error).__name__}; "
              f"error file: {Path(r.path) / 'error.txt'}")
    if failed:
        print(f"{len(failed)} trial(s) ended in error; `--resume --retry-errored` continues them from their checkpoints")
    return df, 1 if failed else 0
