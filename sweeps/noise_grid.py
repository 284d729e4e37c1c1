"""The label-noise grid: noise type x noise rate x seed (x any trial option), one Ray Tune trial per cell.

Run:
    python sweeps/noise_grid.py                      # 12 trials on digits, CPU or GPUs
    python sweeps/noise_grid.py --smoke-test         # 2 epochs
    python sweeps/noise_grid.py --loss ce,gce,sce --lr 0.01,0.1 --seeds 3   # methods x lr x noise x seeds
    python sweeps/noise_grid.py --seeds 3 --gpus-per-trial 0.25 --dataset cifar10 \\
        --data-root ~/data/cifar-10-batches-py --model resnet18
    python sweeps/noise_grid.py --resume             # continue a sweep whose driver was killed
    python sweeps/noise_grid.py --seeds 3            # again: runs only the cells not finished yet

Every trial option (`TrainConfig` field) is a flag; a comma-separated value makes it an axis of the
grid. Replaces a bash loop of `CUDA_VISIBLE_DEVICES=i python train.py ... &` in batches of four:
Ray places each trial on a free GPU slice the moment one is free, checkpoints every epoch, and the
table over seeds is printed at the end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps.engine import estimate, flags, grid, run_flags  # noqa: E402  (light: no Ray, torch or pandas before the flags are checked)
from sweeps.engine.cluster import local_gpus
from sweeps.engine.run import preflight, process_exit
from sweeps.engine.seeds_auto import seed_flags

NAME = "noise_grid"
GRID_DEFAULTS = {"noise_type": "sym,asym", "noise_rate": "0.125,0.25,0.375,0.5,0.625,0.75"}  # the grid's own axes


def parse_args(argv: list[str]):
    parser = flags.ArgumentParser(prog="sweeps/noise_grid.py", description=__doc__.split("\n\n")[0])
    flags.add_config_flags(
        parser,
        axes=True,
        defaults=GRID_DEFAULTS,
        aliases={"noise_type": ["--noise-types"], "noise_rate": ["--noise-rates"]},
    )
    parser.add_argument("--dry-run", action="store_true", help="print the trials, steps and expected wall time; exit")
    run_flags.add_run_args(parser, name=NAME, grid=True)
    seed_flags.add_seed_args(parser, compare_default="loss")
    args = parser.parse_args(argv)
    run_flags.check_run_args(args)
    return args


def grid_axes(args) -> dict[str, list]:
    """Field -> values of the grid: the flags given, the grid's noise axes, and the seeds."""
    axes = flags.config_axes(args, axes=True, defaults=GRID_DEFAULTS)
    if args.seeds is not None and "seed" in axes:
        raise flags.UsageError("--seeds N (seeds 0..N-1) and --seed are both given; give one of them")
    if "seed" not in axes:
        axes["seed"] = list(range(seed_flags.seed_count(args) or 1))
    if args.smoke_test and "epochs" not in axes:
        axes["epochs"] = [run_flags.SMOKE_TEST_EPOCHS]
    return axes


def check_and_load(cells: list[dict]) -> tuple[list, dict]:
    """Every cell parsed as a `TrainConfig` and the data loaded once, before Ray or torch load.
    Returns (configs, data); raises UsageError naming a bad value (`ValueError` of either step)."""
    from trainables.config import parse_config
    from trainables.data import load_data

    try:
        configs = [parse_config(cell) for cell in cells]
        return configs, load_data(configs[0])
    except ValueError as e:
        raise flags.UsageError(str(e)) from None


def estimate_sweep(args, cells: list[dict], data: dict, auto: dict | None, load_s: float) -> int:
    """`--estimate`: the first cell trained for a few epochs in this process (`first_cell.time_builtin`),
    the grid's cost predicted (`sweeps/engine/estimate/prediction.py`); `load_s`: the data load, once per sweep."""
    from sweeps.engine.estimate.first_cell import time_builtin

    minimum = [c for c in cells if c["seed"] < auto["min_seeds"]] if auto else None
    return estimate.run_estimate(
        args,
        estimate.Plan(cells, "builtin", minimum=minimum),
        lambda epochs, limit_s, gpus: time_builtin(cells[0], data, epochs, limit_s, args.cpus_per_trial),
        lambda cell, gpus: time_builtin(cell, data, 0, estimate.ESTIMATE_LIMIT_S, args.cpus_per_trial),
        measured_s=load_s,
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    local_gpus.check_flags(args)  # the GPUs present, before anything runs or is written
    options = run_flags.run_options(args)
    axes = grid_axes(args)
    auto = seed_flags.seed_rule_settings(args, axes)  # --seeds auto: the stopping rule's settings, else None
    cells = grid.grid_cells(axes, args.max_trials)
    print(f"{len(cells)} trials in the grid", file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.dry_run and args.estimate:  # the estimate from a finished experiment, as --estimate prints it
        estimate.dry_run_estimate(args, cells, options.experiment_dir)
        return 0
    if args.dry_run:  # before Ray, torch or the data load
        estimated = estimate.estimate_lines(cells, options.experiment_dir, **estimate.run_flags_of(args))
        print(*estimated, "nothing was run (--dry-run)", sep="\n")
        return 0
    preflight.check_resume(options.experiment_dir, args.resume)  # before anything heavy loads
    preflight.check_before_writing(options.experiment_dir, options.mlflow_uri, options.wandb_project)

    loading = time.monotonic()
    configs, data = check_and_load(cells)
    if args.estimate:
        return estimate_sweep(args, cells, data, auto, time.monotonic() - loading)

    from ray.tune import Tuner

    from sweeps.engine.grid.plan import fit_grid, plan_grid, say_all_finished, say_nothing_to_resume
    from sweeps.engine.run import resume
    from sweeps.engine.run.launch import TrialFunction, start_sweep
    from trainables import train_classifier

    # The search space: a grid over every axis; when extending a grid, only the missing cells; when
    # trials differ in length (epochs, model), the cells longest first (`grid.plan.longest_first`).
    from trainables.config import TrialIdentity

    identity = TrialIdentity(on_gpu=local_gpus.trials_use_cuda(args.gpus_per_trial, args.address))
    plan = plan_grid(
        cells,
        axes,
        options.experiment_dir,
        skip_existing=args.skip_existing,
        relaunch=not args.resume,
        hash_fn=identity,
    )
    if not args.resume and not plan.todo and not auto:
        return say_all_finished(plan, options.experiment_dir, options.objective, options.report)
    if args.resume and not auto:
        done = say_nothing_to_resume(plan, options.experiment_dir, options.objective, identity, options.report)
        if done is not None:
            return done
    print(
        f"data: {args.dataset or 'digits'} ({len(data['y_train'])} train / {len(data['y_val'])} val / "
        f"{len(data['y_test'])} test); {len(plan.todo)} to run, {len(plan.reused)} reused",
        flush=True,
    )
    if auto:  # seeds by significance: a searcher hands out the next seed of the undecided methods
        from sweeps.engine.seeds_auto import seed_search  # its statistics import scipy: only for --seeds auto

        plan, rule = seed_search.auto_plan(plan, cells, args.compare, auto, options.experiment_dir, options.objective)
    ddp = None
    if args.gpus_per_trial == "auto" or (args.gpus_per_trial or 0) >= 2:  # only 2+ GPUs per trial run data-parallel:
        from trainables.ddp import train_classifier_ddp as ddp  # Ray Train's import is left out otherwise
    trial_function = TrialFunction(train_classifier, {"data": data}, ddp=ddp, probe_config=configs[0])
    sweep = start_sweep(options, trial_function)
    code, rounds = fit_grid(
        sweep,
        plan,
        grid.trial_namer(axes),
        lambda tune_config: Tuner(
            sweep.trainable, param_space=plan.param_space, tune_config=tune_config, run_config=sweep.run_config
        ),
    )
    if auto:
        seed_search.finish_auto(options.experiment_dir, cells, args.compare, rule, options.objective.metric)
    elif args.resume and (missing := resume.cells_not_in(rounds[0], plan.todo, identity)):
        print(
            f"{len(missing)} cell(s) of these flags are not part of the resumed sweep; "
            "run again without --resume to add them"
        )
    return code


if __name__ == "__main__":
    process_exit.run_main(main)
