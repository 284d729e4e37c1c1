"""Population-based training (Jaderberg et al. 2017) of the learning rate and weight decay.

Run:
    python sweeps/pbt.py                                   # 8 members, sym 0.5 on digits
    python sweeps/pbt.py --smoke-test                      # 4 members x 4 epochs
    python sweeps/pbt.py --loss gce --noise-rate 0.4 --num-samples 16 --perturbation-interval 5 \\
        --repeat 3 --gpus-per-trial 0.25
    python sweeps/pbt.py --resume                          # continue an interrupted run

Same trainable as `sweeps/lr_search.py` (`trainables/seeds.py`: one trial trains --repeat seeds
and reports their mean). Every --perturbation-interval epochs Tune's `PopulationBasedTraining`
copies the checkpoint of a member in the top quantile into one in the bottom quantile (exploit)
and perturbs its lr / weight decay (explore: x0.8 or x1.2, or a fresh draw); the trainable writes
the new values into the restored optimizer (`apply_hyperparameters`). Values stay in the bounds.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from ray import tune
from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig, Tuner
from ray.tune.schedulers import PopulationBasedTraining

from analysis.search import top_trials

from sweeps.cli import UsageError, check_positive_int, check_storage_path, parse_gpus_per_trial, run_main
from sweeps.cluster import check_resources, default_gpus_per_trial, init_ray
from sweeps.common import add_common_args, add_search_args, check_experiment, check_search_args, write_sweep_info
from trainables import METRIC, MODE, load_data, parse_config
from trainables.seeds import train_seeds

NAME = "pbt"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sweeps/pbt.py", description=__doc__.split("\n\n")[0])
    add_search_args(parser, num_samples=8, num_samples_help="population size: trials trained side by side")
    parser.add_argument("--perturbation-interval", type=int, default=None, help="epochs between exploit/explore steps (default: 4; 2 with --smoke-test)")
    parser.add_argument("--quantile-fraction", type=float, default=0.25, help="share of the population copied from / replaced, in (0, 0.5] (default: 0.25)")
    add_common_args(parser, name=NAME)
    args = parser.parse_args(argv)

    check_search_args(args)
    check_positive_int("--perturbation-interval", args.perturbation_interval)
    if not (0.0 < args.quantile_fraction <= 0.5):
        raise UsageError(f"--quantile-fraction={args.quantile_fraction:g} is outside the allowed range (0, 0.5]")
    if args.smoke_test:
        args.epochs = args.epochs or 4
        args.num_samples = min(args.num_samples, 4)
    args.epochs = args.epochs or 30
    args.perturbation_interval = args.perturbation_interval or (2 if args.smoke_test else 4)
    if args.perturbation_interval >= args.epochs:
        raise UsageError(f"--perturbation-interval={args.perturbation_interval} must be below --epochs ({args.epochs})")
    args.gpus_per_trial = parse_gpus_per_trial(args.gpus_per_trial)
    args.storage_path = check_storage_path(args.storage_path)
    return args


def clip_to_bounds(config: dict, bounds: dict) -> dict:
    """PBT's explore step multiplies by 0.8 / 1.2 without bounds: clip lr and weight decay back in."""
    for key, (low, high) in bounds.items():
        config[key] = min(max(config[key], low), high)
    return config


def trial_name(trial) -> str:
    """`pbt_00003`: the member's number in the population (its lr changes over time)."""
    return f"{NAME}_{int(trial.experiment_tag.split('_')[0]):05d}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    fixed = {"dataset": args.dataset, "data_root": args.data_root, "model": args.model, "loss": args.loss,
             "noise_type": args.noise_type, "noise_rate": args.noise_rate, "epochs": args.epochs,
             "checkpoint_every": args.perturbation_interval}  # PBT copies checkpoints at these epochs
    bounds = {"lr": args.lr_range, "weight_decay": args.weight_decay_range}
    try:
        data = load_data(parse_config({**fixed, "lr": args.lr_range[1], "weight_decay": args.weight_decay_range[1]}))
    except ValueError as e:
        raise UsageError(str(e)) from None
    experiment_dir = f"{args.storage_path}/{args.name}"
    settings = {**fixed, "lr": list(args.lr_range), "weight_decay": list(args.weight_decay_range), "repeat": args.repeat,
                "num_samples": args.num_samples, "perturbation_interval": args.perturbation_interval,
                "quantile_fraction": args.quantile_fraction}
    check_experiment(experiment_dir, args.resume, settings)

    init_ray(args.address, args.dashboard_host)
    gpus = default_gpus_per_trial() if args.gpus_per_trial is None else args.gpus_per_trial
    check_resources(gpus, args.cpus_per_trial)
    print(f"{'resuming' if args.resume else 'starting'} PBT: {args.num_samples} members x {args.repeat} seed(s), "
          f"{args.epochs} epochs, perturbation every {args.perturbation_interval} epochs; {args.noise_type} "
          f"noise {args.noise_rate:g} on {args.dataset}, loss {args.loss}", flush=True)

    trainable = tune.with_resources(
        tune.with_parameters(train_seeds, data=data, seeds=tuple(range(args.repeat))),
        {"cpu": args.cpus_per_trial, "gpu": gpus})
    if args.resume:
        tuner = Tuner.restore(experiment_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        write_sweep_info(experiment_dir, {"sweep": NAME, "metric": METRIC, "mode": MODE, "argv": sys.argv,
                                          "started": time.strftime("%Y-%m-%d %H:%M:%S"), "settings": settings})
        mutations = {"lr": tune.loguniform(*args.lr_range), "weight_decay": tune.loguniform(*args.weight_decay_range)}
        tuner = Tuner(
            trainable,
            param_space={**fixed, **mutations},  # each member starts from its own draw
            tune_config=TuneConfig(
                metric=METRIC, mode=MODE,
                scheduler=PopulationBasedTraining(
                    time_attr="training_iteration",
                    perturbation_interval=args.perturbation_interval,
                    hyperparam_mutations=mutations,
                    quantile_fraction=args.quantile_fraction,
                    custom_explore_fn=functools.partial(clip_to_bounds, bounds=bounds),
                ),
                num_samples=args.num_samples,
                time_budget_s=args.time_budget_s,
                trial_name_creator=trial_name, trial_dirname_creator=trial_name,
            ),
            run_config=RunConfig(
                name=args.name,
                storage_path=str(args.storage_path),
                # A member is restored from another's checkpoint some time after the exploit decision;
                # with <= 2 kept, the source may already have deleted it (Ray warns). One checkpoint
                # per perturbation interval, four kept, as in Ray's PBT guide.
                checkpoint_config=CheckpointConfig(num_to_keep=4),
                failure_config=FailureConfig(max_failures=2),
                sync_config=SyncConfig(sync_artifacts=True),
            ),
        )
    results = tuner.fit()

    df = results.get_dataframe()
    if len(df):
        names = {r.metrics["trial_id"]: Path(r.path).name for r in results if r.metrics}
        df["trial"] = df["trial_id"].map(names)
        print(top_trials(df, k=10).to_string(index=False))  # lr / weight_decay: each member's final values
    print(f"results: {experiment_dir}  (each trial's pbt_policy and exploit history: Tune's pbt_*.txt files there)")
    if results.errors:
        print(f"{len(results.errors)} trial(s) ended in error", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "1")
    run_main(main)
