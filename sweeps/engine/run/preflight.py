"""Checks before Ray starts: the storage can be written, `--resume` finds its sweep, the trackers work, a search's
data loads. Each comes before anything lasting is written or said about the folder (a snapshot, the driver's lock,
"holds this sweep already"); the flags' own checks, the GPUs present included, came before them
(`sweeps/engine/run_flags.py:check_run_args`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sweeps.engine.flags import UsageError
from trainables.config import TrainConfig
from trainables.experiment import records, release, storage


def probe_storage(experiment_dir: str) -> None:
    """Create the experiment folder and write and remove a probe file in it, before Ray starts.

    `os.access` is not enough: read-only mounts, full disks, quotas and ACLs pass it. The folders
    this call creates are removed again, failure or not (Tune creates them when the sweep starts),
    so a sweep refused later leaves nothing behind. On object storage (s3://...) the probe is an
    object written and deleted through pyarrow (`trainables.experiment.storage`), as Ray will write.
    Raises:
        UsageError: naming the path and the OS error.
    """
    probe = records.record_path(experiment_dir, records.WRITE_PROBE)
    if "://" in experiment_dir:
        try:
            storage.write_bytes(probe, b"probe")
            storage.delete(probe)
        except (OSError, ValueError) as e:
            raise UsageError(f"--storage-path: cannot write to {experiment_dir}: {str(e).splitlines()[0]}") from None
        return
    folder = Path(experiment_dir)
    created = [p for p in [folder, *folder.parents] if not p.exists()]  # innermost first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        storage.write_bytes(probe, b"probe")
        storage.delete(probe)
    except OSError as e:
        raise UsageError(f"--storage-path: cannot write to {folder}: {e.strerror or e}") from None
    finally:
        for path in created:
            try:
                path.rmdir()
            except OSError:
                pass


def check_before_writing(experiment_dir: str, mlflow_uri: str | None, wandb_project: str | None) -> None:
    """The checks that need no Ray, made before a sweep writes or plans anything: the storage can be
    written (`probe_storage`, which leaves nothing behind) and the trackers asked for work
    (`monitoring.check_trackers`; a sqlite MLflow store is created, as MLflow does).

    Raises:
        UsageError: from those checks.
    """
    probe_storage(experiment_dir)
    from sweeps.engine.run.monitoring import check_trackers

    check_trackers(mlflow_uri, wandb_project)


def prepare_search(args: argparse.Namespace, experiment_dir: str, settings: dict) -> tuple[TrainConfig, dict]:
    """What a search (`lr_search.py`, `pbt.py`) does before Ray: check --resume against its
    `settings` (`check_resume`, no earlier search in a new one's folder), probe the storage and the
    trackers (`check_before_writing`), check the fixed options (with the top of --lr-range and
    --weight-decay-range), load the data once.

    Args:
        args: the search's checked flags (`fixed`, `lr_range`, `weight_decay_range`, `resume`).
        experiment_dir: `RunOptions.experiment_dir`.
        settings: the search's settings, as `launch` records them.
    Returns:
        (the `TrainConfig` of the fixed options, the data as `trainables.data.load_data` gives it).
    Raises:
        UsageError: a --resume mismatch, a bad option, data that cannot load, storage that cannot be written.
    """
    check_resume(experiment_dir, args.resume, settings, new_ok=False)
    check_before_writing(experiment_dir, args.mlflow_uri, args.wandb_project)
    from trainables.config import parse_config
    from trainables.data import load_data

    try:
        cfg = parse_config({**args.fixed, "lr": args.lr_range[1], "weight_decay": args.weight_decay_range[1]})
        data = load_data(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return cfg, data


def check_resume(experiment_dir: str, resume: bool, settings: dict | None = None, new_ok: bool = True) -> None:
    """Before anything heavy loads: with `resume` (--resume) `experiment_dir` (`RunOptions.experiment_dir`)
    must hold a sweep; a new search (`new_ok=False`) needs none there. A resumed sweep must keep the
    `settings` it started with, as recorded in `<experiment>/raysweep.json`.

    Raises:
        UsageError: naming the folder, or the first setting that differs and its recorded value.
    """

    try:
        has_sweep = storage.exists(storage.join(experiment_dir, "tuner.pkl"))
    except (OSError, ValueError) as e:
        raise UsageError(f"--storage-path: cannot read {experiment_dir}: {str(e).splitlines()[0]}") from None
    if not resume:
        if not new_ok and has_sweep:
            raise UsageError(
                f"{experiment_dir} already holds a search: add --resume to continue it, or pick another --name"
            )
        return
    if not has_sweep:
        raise UsageError(
            f"--resume: no sweep to resume in {experiment_dir} (no tuner.pkl); check --name and "
            "--storage-path, or drop --resume to start it"
        )
    info = records.read_settings(experiment_dir)  # torn: warned, skipped
    if (changed := release.resume_change(info, sys.executable)) is not None:
        print(changed, flush=True)
    if info is None or settings is None:
        return
    recorded = info.get("settings", {})
    for key, value in json.loads(json.dumps(settings)).items():  # tuples as lists, as recorded
        if key in recorded and recorded[key] != value:
            raise UsageError(
                f"--resume: {key}={value!r} differs from the sweep being resumed ({recorded[key]!r}); "
                "resume with the original flags"
            )
