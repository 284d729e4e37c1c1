"""Flags and Tune settings shared by the sweep scripts (being folded into sweeps/cli.py and
sweeps/launch.py)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig

from sweeps.cli import UsageError, check_positive_int, parse_range
from trainables.config import DATASETS, LOSSES, METRIC, MODE, MODELS


def add_common_args(parser: argparse.ArgumentParser, *, name: str) -> None:
    """Flags every sweep has: data, model, resources, storage, cluster."""
    parser.add_argument("--dataset", default="digits", help=f"one of {', '.join(DATASETS)} (default: digits, bundled)")
    parser.add_argument("--data-root", default=None, help="cifar10: folder with the python batches; npz: the .npz file")
    parser.add_argument("--model", default="mlp", help=f"one of {', '.join(MODELS)} (default: mlp)")
    parser.add_argument("--loss", default="ce", help=f"one of {', '.join(LOSSES)} (default: ce)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per trial (default: 30; 2 with --smoke-test)")
    parser.add_argument(
        "--gpus-per-trial", default=None,
        help="GPUs each trial gets: a fraction such as 0.25 (4 trials share a GPU), a whole number, "
        "or 0 for CPU trials, or auto (probe the memory, pack densely; sweeps/gpus.py) (default: 0.25 when the cluster has GPUs, else 0)",
    )
    parser.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPU cores each trial gets (default: 1)")
    parser.add_argument("--max-concurrent", type=int, default=None, help="at most this many trials at once (default: as many as resources allow)")
    parser.add_argument("--storage-path", default="./runs", help="where experiments are written (default: ./runs)")
    parser.add_argument("--name", default=name, help=f"experiment name, a folder under --storage-path (default: {name})")
    parser.add_argument("--address", default=None, help="an existing Ray cluster, e.g. 'auto' or 'HEAD_IP:6379' (default: start a local one)")
    parser.add_argument("--dashboard-host", default="127.0.0.1", help="interface the Ray dashboard listens on (default: 127.0.0.1)")
    parser.add_argument("--smoke-test", action="store_true", help="2 epochs: the whole sweep in about a minute on 2 cores")


def write_sweep_info(experiment_dir: Path | str, info: dict) -> None:
    """Record the sweep's metric, mode and command line in `<experiment>/raysweep.json`."""
    if "://" in str(experiment_dir):
        return  # remote storage: Ray writes its own files there; nothing of ours to add
    folder = Path(experiment_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "raysweep.json").write_text(json.dumps(info, indent=1))


def sweep_tune_config(max_concurrent: int | None, **overrides) -> TuneConfig:
    """The `TuneConfig` every sweep starts from: rank by `val/acc`, reuse trial actors.

    Actor reuse keeps a trial's worker process for the next trial (no Python/torch start-up per
    trial); measured in benchmarks/sweep_efficiency.py.
    """
    settings = {"metric": METRIC, "mode": MODE, "max_concurrent_trials": max_concurrent, "reuse_actors": True}
    return TuneConfig(**(settings | overrides))


def sweep_run_config(name: str, storage_path, max_failures: int = 2, fail_fast: bool = False,
                     callbacks: list | None = None, **overrides) -> RunConfig:
    """The `RunConfig` every sweep starts from.

    Storage under `storage_path/name`; the best two checkpoints by `val/acc` (Ray also keeps the
    latest, for resuming); a failed trial retried `max_failures` times from its latest checkpoint
    (`fail_fast`: the first error stops the sweep); files trials write (noise.json, logs) synced
    to storage; each trial's stdout/stderr in files in its folder; our progress `callbacks`
    instead of Tune's tables (verbose=0).
    """
    settings = {
        "name": name,
        "storage_path": str(storage_path),
        "checkpoint_config": CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=METRIC, checkpoint_score_order=MODE),
        "failure_config": FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        "sync_config": SyncConfig(sync_artifacts=True),
        "log_to_file": True,
        "callbacks": callbacks,
        "verbose": 0,
    }
    return RunConfig(**(settings | overrides))


def add_search_args(parser: argparse.ArgumentParser, *, num_samples: int, num_samples_help: str) -> None:
    """Flags both searches have: the fixed noise setting, LR / weight-decay bounds, seeds, budget, resume."""
    parser.add_argument("--noise-type", default="sym", help="sym or asym (default: sym)")
    parser.add_argument("--noise-rate", type=float, default=0.5, help="label-noise rate in [0, 1) (default: 0.5)")
    parser.add_argument("--lr-range", default="1e-4,1", help="LOW,HIGH of the learning rate, log scale, 0 < LOW < HIGH <= 10 (default: 1e-4,1)")
    parser.add_argument("--weight-decay-range", default="1e-6,1e-2", help="LOW,HIGH of the weight decay, log scale, 0 < LOW < HIGH <= 1 (default: 1e-6,1e-2)")
    parser.add_argument("--repeat", type=int, default=1, help="seeds per configuration, trained together in one trial; the searcher sees their mean (default: 1)")
    parser.add_argument("--num-samples", type=int, default=num_samples, help=f"{num_samples_help} (default: {num_samples})")
    parser.add_argument("--time-budget-s", type=float, default=None, help="stop the whole search after this many seconds, counted over resumes (default: none)")
    parser.add_argument("--resume", action="store_true", help="continue the search in --storage-path/--name where it stopped")


def check_search_args(args: argparse.Namespace) -> None:
    """Check the flags of `add_search_args` (and the resource flags) and parse the LR / weight-decay
    ranges in place, before Ray starts.

    Raises:
        UsageError: naming the first bad value and its allowed range.
    """
    from trainables.config import NOISE_TYPES

    if args.noise_type not in NOISE_TYPES:
        raise UsageError(f"--noise-type={args.noise_type!r} is not one of {', '.join(NOISE_TYPES)}")
    if not (0.0 <= args.noise_rate < 1.0):
        raise UsageError(f"--noise-rate={args.noise_rate:g} is outside the allowed range [0, 1)")
    args.lr_range = parse_range("--lr-range", args.lr_range, 0.0, 10.0)
    args.weight_decay_range = parse_range("--weight-decay-range", args.weight_decay_range, 0.0, 1.0)
    for flag in ("--repeat", "--num-samples", "--epochs", "--max-concurrent"):
        check_positive_int(flag, getattr(args, flag[2:].replace("-", "_")))
    if args.time_budget_s is not None and not (args.time_budget_s > 0):
        raise UsageError(f"--time-budget-s={args.time_budget_s:g} must be > 0")
    if args.cpus_per_trial <= 0:
        raise UsageError(f"--cpus-per-trial={args.cpus_per_trial} must be > 0")


def check_experiment(experiment_dir: str, resume: bool, settings: dict) -> None:
    """Before Ray starts: --resume needs an experiment there; a new search needs none.

    A resumed search must keep the settings it started with (noise, bounds, epochs, seeds, ...):
    they are compared with the `settings` recorded in `<experiment>/raysweep.json`.
    Raises:
        UsageError: naming the folder, or the first setting that differs and its recorded value.
    """
    from ray.tune import Tuner

    if not resume:
        if "://" not in experiment_dir and (Path(experiment_dir) / "tuner.pkl").exists():
            raise UsageError(f"{experiment_dir} already holds a search: add --resume to continue it, or pick another --name")
        return
    if not Tuner.can_restore(experiment_dir):
        raise UsageError(f"--resume: no search to resume in {experiment_dir} (no tuner.pkl); drop --resume to start one")
    info_file = Path(experiment_dir) / "raysweep.json"
    if "://" in experiment_dir or not info_file.exists():
        return
    recorded = json.loads(info_file.read_text()).get("settings", {})
    for key, value in json.loads(json.dumps(settings)).items():  # tuples as lists, as recorded
        if key in recorded and recorded[key] != value:
            raise UsageError(f"--resume: {key}={value!r} differs from the search being resumed ({recorded[key]!r}); "
                             "resume with the original flags")

