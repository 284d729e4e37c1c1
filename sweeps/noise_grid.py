"""The label-noise grid: noise type x noise rate x seed, one Ray Tune trial per cell.

Run:
    python sweeps/noise_grid.py                      # 12 trials on digits, CPU or GPUs
    python sweeps/noise_grid.py --smoke-test         # 2 epochs, about a minute on 2 cores
    python sweeps/noise_grid.py --seeds 3 --gpus-per-trial 0.25 --dataset cifar10 \\
        --data-root ~/data/cifar-10-batches-py --model resnet18

Replaces a bash loop of `CUDA_VISIBLE_DEVICES=i python train.py ... &` in batches of four:
Ray places each trial on a free GPU slice the moment one is free, checkpoints every epoch,
and the best-run table over seeds is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

import pandas as pd
import ray
from ray import tune
from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig, Tuner

from sweeps.common import (
    UsageError, add_common_args, check_positive_int, check_resources, check_storage_path, default_gpus_per_trial,
    init_ray, parse_float_list, run_main, write_sweep_info,
)
from sweeps.gpus import (
    add_gpu_args, auto_gpus_per_trial, check_shared_storage, choose_local_gpus, parse_gpu_flags, probe_on_gpu, requeued_trial_ids,
    rerun_oom_trials,
)
from sweeps.monitoring import add_monitoring_args, monitoring_callbacks
from trainables import METRIC, MODE, load_data, parse_config, train_classifier
from trainables.ddp import train_classifier_ddp

NAME = "noise_grid"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sweeps/noise_grid.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise-types", default="sym,asym", help="comma-separated: sym, asym (default: sym,asym)")
    parser.add_argument("--noise-rates", default="0.125,0.25,0.375,0.5,0.625,0.75", help="comma-separated rates in [0, 1)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per configuration: 0..N-1 (default: 1)")
    add_common_args(parser, name=NAME)
    add_gpu_args(parser)
    add_monitoring_args(parser)
    args = parser.parse_args(argv)

    args.noise_types = [t.strip() for t in args.noise_types.split(",")]
    for t in args.noise_types:
        if t not in ("sym", "asym"):
            raise UsageError(f"--noise-types: {t!r} is not one of sym, asym")
    args.noise_rates = parse_float_list("--noise-rates", args.noise_rates, 0.0, 1.0)
    check_positive_int("--seeds", args.seeds)
    check_positive_int("--epochs", args.epochs)
    check_positive_int("--max-concurrent", args.max_concurrent)
    if args.cpus_per_trial <= 0:
        raise UsageError(f"--cpus-per-trial={args.cpus_per_trial} must be > 0")
    args.epochs = args.epochs or (2 if args.smoke_test else 30)
    args.gpus, args.gpus_per_trial = parse_gpu_flags(args.gpus, args.gpus_per_trial, args.address)
    args.storage_path = check_storage_path(args.storage_path)
    return args


def trial_name(trial) -> str:
    """`asym_0.375_seed1`: what ran, readable in the console, the dashboard and on disk."""
    c = trial.config
    return f"{c['noise_type']}_{c['noise_rate']:g}_seed{c['seed']}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    base_config = {"dataset": args.dataset, "data_root": args.data_root, "model": args.model,
                   "loss": args.loss, "epochs": args.epochs}
    try:
        # Check every cell of the grid and load the data once, before Ray starts anything.
        for noise_type in args.noise_types:
            for rate in args.noise_rates:
                cfg = parse_config({**base_config, "noise_type": noise_type, "noise_rate": rate})
        data = load_data(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None

    callbacks = monitoring_callbacks(args)  # console progress (+ MLflow / W&B when asked for)
    init_ray(args.address, args.dashboard_host, num_gpus=choose_local_gpus(args.gpus, args.address))
    check_shared_storage(args.storage_path, sum(n["Alive"] for n in ray.nodes()), args.storage_is_shared)
    gpus = default_gpus_per_trial() if args.gpus_per_trial is None else args.gpus_per_trial
    if gpus == "auto":
        gpus, why = auto_gpus_per_trial(ray.cluster_resources().get("GPU", 0), lambda: probe_on_gpu(cfg, data, args.cpus_per_trial), cfg.gpu_memory_headroom)
        print(f"--gpus-per-trial auto: {gpus:g} GPU per trial; {why}", flush=True)
    check_resources(gpus, args.cpus_per_trial)
    experiment_dir = f"{args.storage_path}/{args.name}"
    print(f"{len(args.noise_types) * len(args.noise_rates) * args.seeds} trials, {gpus:g} GPU and "
          f"{args.cpus_per_trial:g} CPU each, {args.epochs} epochs; data: {args.dataset} "
          f"({len(data['y_train'])} train / {len(data['y_val'])} val / {len(data['y_test'])} test)", flush=True)

    def trainable_for(gpus: float):
        if gpus >= 2:  # data-parallel over whole GPUs (trainables/ddp.py): the Tune trial is a driver holding nothing
            return tune.with_resources(tune.with_parameters(
                train_classifier_ddp, data=data, num_workers=int(gpus), cpus_per_worker=args.cpus_per_trial,
                experiment_path=experiment_dir), {"cpu": 0.01})  # Tune needs some resource
        return tune.with_resources(tune.with_parameters(train_classifier, data=data), {"cpu": args.cpus_per_trial, "gpu": gpus})

    if gpus >= 2:  # DDP drivers hold no resources: let no more start than the GPUs can hold
        args.max_concurrent = args.max_concurrent or max(1, int(ray.cluster_resources().get("GPU", 0) // gpus))
    param_space = {
        **base_config,
        "noise_type": tune.grid_search(args.noise_types),
        "noise_rate": tune.grid_search(args.noise_rates),
        "seed": tune.grid_search(list(range(args.seeds))),
    }
    write_sweep_info(experiment_dir, {"sweep": NAME, "metric": METRIC, "mode": MODE, "argv": sys.argv,
                                      "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    tuner = Tuner(
        trainable_for(gpus),
        param_space=param_space,
        tune_config=TuneConfig(
            metric=METRIC, mode=MODE,
            max_concurrent_trials=args.max_concurrent,
            reuse_actors=True,  # no new worker process per trial: seconds saved per trial
            trial_name_creator=trial_name, trial_dirname_creator=trial_name,
        ),
        run_config=(run_config := RunConfig(
            name=args.name,
            storage_path=str(args.storage_path),
            checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=METRIC,
                                               checkpoint_score_order=MODE),  # best two; Ray also keeps the latest
            failure_config=FailureConfig(max_failures=2),
            sync_config=SyncConfig(sync_artifacts=True),  # files trials write (noise.json, logs) reach storage
            log_to_file=True,  # each trial's stdout and stderr -> files `stdout`, `stderr` in its folder
            callbacks=callbacks, verbose=0,  # our progress block instead of Tune's tables
        )),
    )
    results = tuner.fit()
    rounds = rerun_oom_trials(results, trainable_for, gpus, run_config, trial_name)  # [results] when no GPU OOM

    requeued = requeued_trial_ids(rounds)
    df = pd.concat([r.get_dataframe(filter_metric=METRIC, filter_mode=MODE) for r in rounds])
    print_best_runs(df[~df["trial_id"].isin(requeued)])
    print(f"results: {experiment_dir}" + "".join(f", {r.experiment_path}" for r in rounds[1:]))
    errors = [r for grid in rounds for r in grid if r.error and r.metrics.get("trial_id") not in requeued]
    if errors:
        print(f"{len(errors)} trial(s) ended in error", file=sys.stderr)
        return 1
    return 0


def print_best_runs(df) -> None:
    """Per configuration over seeds: mean and std of best val/acc (placeholder until analysis/)."""
    table = df.groupby(["config/noise_type", "config/noise_rate"])[METRIC].agg(["count", "mean", "std"])
    print(table.sort_values("mean", ascending=False).to_string())


if __name__ == "__main__":
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "1")
    run_main(main)
