"""Hyperparameter search under one label-noise setting: Optuna TPE proposes, ASHA stops early.

Run:
    python sweeps/lr_search.py                                  # sym 0.5 on digits, 20 trials
    python sweeps/lr_search.py --smoke-test                     # 4 trials x 2 epochs, about a minute on 2 cores
    python sweeps/lr_search.py --noise-type asym --noise-rate 0.4 --repeat 3 --num-samples 60 \\
        --lr-range 1e-3,0.5 --losses ce,gce,sce --batch-sizes 64,128 --gpus-per-trial 0.25
    python sweeps/lr_search.py --resume                         # continue an interrupted search

For a fixed data set / noise type / noise rate, searches the learning rate (log scale), weight
decay (log scale), batch size and loss (`ce`; `gce` with its q; `sce` with its alpha and beta)
with Ray Tune's `OptunaSearch` (TPE, seeded by --search-seed) and `ASHAScheduler` (--grace-period,
--reduction-factor). Optuna alone has no multi-GPU scheduler (optuna#1365); Tune places the trials.
With --repeat N each trial trains the configuration with seeds 0..N-1 side by side
(`trainables/seeds.py`) and reports their mean, which both TPE and ASHA see.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

import optuna
import ray
from ray import tune
from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig, Tuner
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.optuna import OptunaSearch

from analysis.search import top_trials

from sweeps.cli import UsageError, check_positive_int, check_storage_path, parse_gpus_per_trial, parse_range, run_main
from sweeps.cluster import check_resources, concurrent_slots, default_gpus_per_trial, init_ray
from sweeps.common import add_common_args, add_search_args, check_experiment, check_search_args, write_sweep_info
from trainables import METRIC, MODE, load_data, parse_config
from trainables.seeds import train_seeds

NAME = "lr_search"
SEARCHED_LOSSES = ("ce", "gce", "sce")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sweeps/lr_search.py", description=__doc__.split("\n\n")[0])
    add_search_args(parser, num_samples=20, num_samples_help="configurations TPE proposes")
    parser.add_argument("--losses", default="ce,gce,sce", help="losses to search over, of ce, gce, sce (default: all three)")
    parser.add_argument("--batch-sizes", default="32,64,128", help="batch sizes to choose from (default: 32,64,128)")
    parser.add_argument("--gce-q-range", default="0.1,1", help="LOW,HIGH of GCE's q, in (0, 1] (default: 0.1,1)")
    parser.add_argument("--sce-alpha-range", default="0.01,1", help="LOW,HIGH of SCE's alpha, log scale (default: 0.01,1)")
    parser.add_argument("--sce-beta-range", default="0.1,10", help="LOW,HIGH of SCE's beta, log scale (default: 0.1,10)")
    parser.add_argument("--grace-period", type=int, default=None, help="epochs before ASHA may stop a trial (default: 2; 1 with --smoke-test)")
    parser.add_argument("--reduction-factor", type=float, default=3.0, help="ASHA keeps the top 1/F at each rung, F > 1 (default: 3)")
    parser.add_argument("--search-seed", type=int, default=0, help="seed of the TPE sampler (default: 0)")
    add_common_args(parser, name=NAME)
    parser.set_defaults(loss=None)  # the loss is searched: --losses
    args = parser.parse_args(argv)

    if args.loss is not None:
        raise UsageError(f"--loss={args.loss}: lr_search searches the loss; use --losses (e.g. --losses {args.loss})")
    check_search_args(args)
    args.gce_q_range = parse_range("--gce-q-range", args.gce_q_range, 0.0, 1.0)
    args.sce_alpha_range = parse_range("--sce-alpha-range", args.sce_alpha_range, 0.0, 100.0)
    args.sce_beta_range = parse_range("--sce-beta-range", args.sce_beta_range, 0.0, 100.0)
    args.losses = [x.strip() for x in args.losses.split(",")]
    for loss in args.losses:
        if loss not in SEARCHED_LOSSES:
            raise UsageError(f"--losses: {loss!r} is not one of {', '.join(SEARCHED_LOSSES)}")
    if len(set(args.losses)) != len(args.losses):
        raise UsageError(f"--losses: {','.join(args.losses)!r} repeats a loss")
    try:
        args.batch_sizes = sorted({int(b) for b in args.batch_sizes.split(",")})
    except ValueError:
        raise UsageError(f"--batch-sizes={args.batch_sizes!r} is not a list of whole numbers") from None
    if args.batch_sizes[0] < 1:
        raise UsageError(f"--batch-sizes: {args.batch_sizes[0]} must be a whole number >= 1")
    check_positive_int("--grace-period", args.grace_period)
    if args.search_seed < 0:
        raise UsageError(f"--search-seed={args.search_seed} must be a whole number >= 0")
    if not (args.reduction_factor > 1):
        raise UsageError(f"--reduction-factor={args.reduction_factor:g} must be > 1")
    if args.smoke_test:
        args.epochs = args.epochs or 2
        args.num_samples = min(args.num_samples, 4)
    args.epochs = args.epochs or 30
    args.grace_period = args.grace_period or (1 if args.smoke_test else 2)
    if args.grace_period > args.epochs:
        raise UsageError(f"--grace-period={args.grace_period} must be <= --epochs ({args.epochs})")
    args.gpus_per_trial = parse_gpus_per_trial(args.gpus_per_trial)
    args.storage_path = check_storage_path(args.storage_path)
    return args


def search_space(trial: optuna.Trial, bounds: dict) -> None:
    """Optuna define-by-run space: loss-specific parameters exist only for their loss.

    Args:
        trial: the Optuna trial (Tune's `OptunaSearch` passes a recording wrapper).
        bounds: lr, weight_decay, gce_q, sce_alpha, sce_beta as (low, high); batch_sizes and
            losses as lists.
    """
    trial.suggest_float("lr", *bounds["lr"], log=True)
    trial.suggest_float("weight_decay", *bounds["weight_decay"], log=True)
    trial.suggest_categorical("batch_size", bounds["batch_sizes"])
    loss = trial.suggest_categorical("loss", bounds["losses"])
    if loss == "gce":
        trial.suggest_float("gce_q", *bounds["gce_q"])
    elif loss == "sce":
        trial.suggest_float("sce_alpha", *bounds["sce_alpha"], log=True)
        trial.suggest_float("sce_beta", *bounds["sce_beta"], log=True)


def trial_name(trial) -> str:
    """`lr_search_00003_gce_lr0.012`: the trial's number in the search, its loss and learning rate."""
    number = int(trial.experiment_tag.split("_")[0])  # Tune's running count of created trials
    c = trial.config
    return f"{NAME}_{number:05d}_{c['loss']}_lr{c['lr']:.2g}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    fixed = {"dataset": args.dataset, "data_root": args.data_root, "model": args.model,
             "noise_type": args.noise_type, "noise_rate": args.noise_rate, "epochs": args.epochs}
    bounds = {"lr": list(args.lr_range), "weight_decay": list(args.weight_decay_range),
              "batch_sizes": args.batch_sizes, "losses": args.losses, "gce_q": list(args.gce_q_range),
              "sce_alpha": list(args.sce_alpha_range), "sce_beta": list(args.sce_beta_range)}
    try:
        cfg = parse_config({**fixed, "lr": args.lr_range[1], "weight_decay": args.weight_decay_range[1]})
        data = load_data(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    experiment_dir = f"{args.storage_path}/{args.name}"
    settings = {**fixed, **bounds, "repeat": args.repeat, "num_samples": args.num_samples,
                "search_seed": args.search_seed, "grace_period": args.grace_period,
                "reduction_factor": args.reduction_factor}
    check_experiment(experiment_dir, args.resume, settings)

    init_ray(args.address, args.dashboard_host)
    gpus = default_gpus_per_trial() if args.gpus_per_trial is None else args.gpus_per_trial
    check_resources(gpus, args.cpus_per_trial)
    # With a searcher Tune keeps only one trial pending unless told how many may run at once.
    concurrent = min(args.max_concurrent or concurrent_slots(gpus, args.cpus_per_trial), args.num_samples)
    print(f"{'resuming' if args.resume else 'starting'} search: {args.num_samples} configurations x "
          f"{args.repeat} seed(s), {args.epochs} epochs, {concurrent} at once ({gpus:g} GPU, "
          f"{args.cpus_per_trial:g} CPU each); {args.noise_type} noise {args.noise_rate:g} on {args.dataset}", flush=True)

    seeds = tuple(range(args.repeat))
    trainable = tune.with_resources(tune.with_parameters(train_seeds, data=data, seeds=seeds),
                                    {"cpu": args.cpus_per_trial, "gpu": gpus})
    if args.resume:
        # The searcher (Optuna study with every told trial), ASHA's rungs and the trial list come
        # back from the experiment folder; unfinished trials continue from their last checkpoint.
        tuner = Tuner.restore(experiment_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        write_sweep_info(experiment_dir, {"sweep": NAME, "metric": METRIC, "mode": MODE, "argv": sys.argv,
                                          "started": time.strftime("%Y-%m-%d %H:%M:%S"), "settings": settings})
        tuner = Tuner(
            trainable,
            param_space=fixed,  # what stays fixed; the searched part is `search_space`
            tune_config=TuneConfig(
                metric=METRIC, mode=MODE,
                search_alg=OptunaSearch(functools.partial(search_space, bounds=bounds), metric=METRIC,
                                        mode=MODE, seed=args.search_seed),
                scheduler=ASHAScheduler(time_attr="training_iteration", max_t=args.epochs,
                                        grace_period=args.grace_period, reduction_factor=args.reduction_factor),
                num_samples=args.num_samples,
                max_concurrent_trials=concurrent,
                time_budget_s=args.time_budget_s,
                reuse_actors=True,
                trial_name_creator=trial_name, trial_dirname_creator=trial_name,
            ),
            run_config=RunConfig(
                name=args.name,
                storage_path=str(args.storage_path),
                checkpoint_config=CheckpointConfig(num_to_keep=1),  # the latest: enough to resume
                failure_config=FailureConfig(max_failures=2),
                sync_config=SyncConfig(sync_artifacts=True),
            ),
        )
    results = tuner.fit()

    df = results.get_dataframe()
    if len(df):
        names = {r.metrics["trial_id"]: Path(r.path).name for r in results if r.metrics}
        df["trial"] = df["trial_id"].map(names)
        stopped = int((df["training_iteration"] < args.epochs).sum())
        print(f"{len(df)} of {args.num_samples} trials ran; ASHA stopped {stopped} early")
        print(top_trials(df, k=10, epochs=args.epochs).to_string(index=False))
    if len(df) < args.num_samples:
        print(f"the search stopped before {args.num_samples} trials; continue it with the same flags and --resume")
    print(f"results: {experiment_dir}")
    if results.errors:
        print(f"{len(results.errors)} trial(s) ended in error", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "1")
    run_main(main)
