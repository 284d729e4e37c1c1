"""The label-noise grid: noise type x noise rate x seed, one Ray Tune trial per cell.

Run:
    python sweeps/noise_grid.py                      # 12 trials on digits, CPU or GPUs
    python sweeps/noise_grid.py --smoke-test         # 2 epochs, about a minute on 2 cores
    python sweeps/noise_grid.py --seeds 3 --gpus-per-trial 0.25 --dataset cifar10 \\
        --data-root ~/data/cifar-10-batches-py --model resnet18
    python sweeps/noise_grid.py --resume             # continue a sweep whose driver was killed
    python sweeps/noise_grid.py --seeds 3            # again: runs only the cells not finished yet

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

import ray
from ray import tune
from ray.tune import Tuner
from ray.tune.search import BasicVariantGenerator

import analysis
from sweeps import resume
from sweeps.cli import (
    UsageError, check_dashboard_host, check_positive_int, check_storage_path, parse_float_list, run_main,
)
from sweeps.cluster import check_resources, default_gpus_per_trial, init_ray
from sweeps.common import add_common_args, sweep_run_config, sweep_tune_config, write_sweep_info
from sweeps.gpus import (
    add_gpu_args, auto_gpus_per_trial, check_shared_storage, choose_local_gpus, parse_gpu_flags, probe_on_gpu, requeued_trial_paths,
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
    faults = parser.add_argument_group("failures, resuming and extending")
    faults.add_argument("--max-failures", type=int, default=None, help="retries of a failed trial, each from its latest checkpoint (default: 2)")
    faults.add_argument("--fail-fast", action="store_true", help="stop the whole sweep at the first trial error")
    faults.add_argument("--resume", action="store_true", help="continue the sweep --name whose driver was killed (Tuner.restore)")
    faults.add_argument("--retry-errored", action="store_true", help="with --resume: continue errored trials from their checkpoints")
    faults.add_argument("--skip-existing", action=argparse.BooleanOptionalAction, default=True,
                        help="reuse trials of this --name that already finished with the same config (default: on)")
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
    check_dashboard_host(args.dashboard_host)
    if not args.name or args.name in (".", "..") or "/" in args.name or "\\" in args.name:
        raise UsageError(f"--name={args.name!r} must be a plain folder name (no '/', not '.' or '..')")
    check_fault_args(args)
    return args


def check_fault_args(args: argparse.Namespace) -> None:
    """Check --max-failures, --fail-fast, --resume, --retry-errored, --skip-existing together."""
    if args.max_failures is not None and args.max_failures < 0:
        raise UsageError(f"--max-failures={args.max_failures} must be a whole number >= 0")
    if args.fail_fast and args.max_failures:
        raise UsageError(f"--fail-fast stops at the first error, so --max-failures={args.max_failures} cannot apply; give one of them")
    args.max_failures = 0 if args.fail_fast else (2 if args.max_failures is None else args.max_failures)
    if args.retry_errored and not args.resume:
        raise UsageError("--retry-errored needs --resume (it continues the errored trials of a killed or finished sweep)")
    if args.resume and not args.skip_existing:
        raise UsageError("--resume continues trials from their checkpoints; --no-skip-existing (rerun everything) contradicts it")
    experiment_dir = f"{args.storage_path}/{args.name}"
    if args.resume and not Tuner.can_restore(experiment_dir):
        raise UsageError(f"--resume: no sweep to resume in {experiment_dir} (no experiment_state file); "
                         f"check --name and --storage-path, or run without --resume to start it")


def trial_name(trial) -> str:
    """`asym_0.375_seed1`: what ran, readable in the console, the dashboard and on disk."""
    c = trial.config
    return f"{c['noise_type']}_{c['noise_rate']:g}_seed{c['seed']}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    base_config = {"dataset": args.dataset, "data_root": args.data_root, "model": args.model,
                   "loss": args.loss, "epochs": args.epochs}
    cells = [{**base_config, "noise_type": t, "noise_rate": r, "seed": s}
             for t in args.noise_types for r in args.noise_rates for s in range(args.seeds)]
    try:
        # Check every cell of the grid and load the data once, before Ray starts anything.
        for cell in cells:
            cfg = parse_config(cell)
        data = load_data(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    experiment_dir = f"{args.storage_path}/{args.name}"
    todo, reused = resume.plan_cells(cells, experiment_dir, skip_existing=args.skip_existing)
    if not args.resume and not todo:
        print(f"all {len(cells)} cells already finished in {experiment_dir}; --no-skip-existing reruns them")
        _, code = resume.report_outcome(None, reused)
        print_report(experiment_dir)
        return code

    callbacks = monitoring_callbacks(args)  # console progress (+ MLflow / W&B when asked for)
    init_ray(args.address, args.dashboard_host, num_gpus=choose_local_gpus(args.gpus, args.address))
    check_shared_storage(args.storage_path, sum(n["Alive"] for n in ray.nodes()), args.storage_is_shared)
    gpus = default_gpus_per_trial() if args.gpus_per_trial is None else args.gpus_per_trial
    if gpus == "auto":
        gpus, why = auto_gpus_per_trial(ray.cluster_resources().get("GPU", 0), lambda: probe_on_gpu(cfg, data, args.cpus_per_trial), cfg.gpu_memory_headroom)
        print(f"--gpus-per-trial auto: {gpus:g} GPU per trial; {why}", flush=True)
    check_resources(gpus, args.cpus_per_trial)
    print(f"{len(cells) if args.resume else len(todo)} trials, {gpus:g} GPU and "
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
    search_alg = None
    if len(todo) < len(cells):  # extending a grid: only the cells not finished yet, as explicit configs
        param_space = {**base_config, "noise_type": tune.choice(args.noise_types), "noise_rate": tune.choice(args.noise_rates),
                       "seed": tune.choice(list(range(args.seeds)))}  # every sample is one of the points below
        search_alg = BasicVariantGenerator(points_to_evaluate=[{k: c[k] for k in ("noise_type", "noise_rate", "seed")} for c in todo])
    # A diverged trial's last report has no val/acc, so that schedulers skip it: allow that.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Short epochs checkpoint often; Tune then snapshots its state often, cheaply (ms), and warns each time.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    run_config = sweep_run_config(args.name, args.storage_path, max_failures=args.max_failures,
                                  fail_fast=args.fail_fast, callbacks=callbacks)
    if args.resume:  # the sweep as it was killed: restore cannot change a search space (ray#42221)
        tuner = Tuner.restore(experiment_dir, trainable_for(gpus), resume_unfinished=True, resume_errored=args.retry_errored)
    else:
        write_sweep_info(experiment_dir, {"sweep": NAME, "metric": METRIC, "mode": MODE, "argv": sys.argv,
                                          "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        tuner = Tuner(
            trainable_for(gpus),
            param_space=param_space,
            tune_config=sweep_tune_config(
                args.max_concurrent, search_alg=search_alg, num_samples=len(todo) if search_alg else 1,
                trial_name_creator=trial_name, trial_dirname_creator=resume.fresh_dirname(experiment_dir, trial_name),
            ),
            run_config=run_config,
        )
    results = tuner.fit()
    rounds = rerun_oom_trials(results, trainable_for, gpus, run_config, trial_name)  # [results] when no GPU OOM

    _, code = resume.report_outcome(rounds, reused, requeued_trial_paths(rounds))  # names failed / diverged trials
    print_report(experiment_dir)
    print(f"results: {experiment_dir}" + "".join(f", {r.experiment_path}" for r in rounds[1:]))
    if args.resume and (missing := resume.cells_not_in(results, todo)):
        print(f"{len(missing)} cell(s) of these flags are not part of the resumed sweep; run again without --resume to add them")
    return code


def print_report(experiment_dir: str) -> None:
    """Print the best-run table (per configuration over seeds: best val/acc and final test/acc) and
    write the analysis report (tables, plots, report.md) next to the results."""
    try:
        trials = analysis.load_trials(experiment_dir)
        val = analysis.best_runs(trials, METRIC, MODE, scope="best")
        keys = list(val.columns[: list(val.columns).index("n")])
        test = analysis.best_runs(trials, "test/acc", "max", by=keys or None, scope="last")
        report = analysis.write_report(experiment_dir)
    except analysis.ExperimentError as e:
        print(f"no report: {e}")
        return
    table = val[keys + ["n", "n_failed", "mean", "std"]].rename(columns={"mean": f"best {METRIC} mean", "std": "std"})
    if keys:
        table = table.merge(test[keys + ["mean", "std"]], on=keys, how="left", suffixes=("", " "))
    else:
        table[["mean", "std "]] = test[["mean", "std"]].to_numpy()
    table = table.rename(columns={"mean": "final test/acc mean", "n_failed": "failed"})
    print("\nper configuration over seeds (n seeds; errored and diverged trials counted as failed):")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="-"))
    print(f"report: {report / 'report.md'}")


if __name__ == "__main__":
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "1")
    run_main(main)
