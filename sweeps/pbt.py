"""Population-based training (Jaderberg et al. 2017) of the learning rate and weight decay.

Run:
    python sweeps/pbt.py                                   # 8 members, sym 0.5 on digits
    python sweeps/pbt.py --smoke-test                      # 4 members x 4 epochs
    python sweeps/pbt.py --loss gce --noise-rate 0.4 --num-samples 16 --perturbation-interval 5 \\
        --repeat 3 --gpus-per-trial 0.25
    python sweeps/pbt.py --resume                          # continue an interrupted run

Same trainable as `sweeps/lr_search.py` (`trainables/seed_group.py`: one trial trains --repeat seeds
and reports their mean). Every --perturbation-interval epochs Tune's `PopulationBasedTraining`
copies the checkpoint of a member in the top quantile into one in the bottom quantile (exploit)
and perturbs its lr / weight decay (explore: x0.8 or x1.2, or a fresh draw); the trainable writes
the new values into the restored optimizer (`apply_hyperparameters`). Values stay in the bounds.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps.engine import flags, run_flags  # noqa: E402  (light: no Ray, torch or pandas before the flags are checked)
from sweeps.engine.cluster import local_gpus
from sweeps.engine.flags import UsageError  # noqa: E402
from sweeps.engine.run import preflight, process_exit

NAME = "pbt"
SEARCHED = {
    "lr": "use --lr-range",
    "weight_decay": "use --weight-decay-range",
    "checkpoint_every": "PBT checkpoints every --perturbation-interval epochs",
}  # set by PBT


def parse_args(argv: list[str]):
    """The checked flags; raises UsageError (one line, exit 2) on a bad value, or a command after `--`."""
    if "--" in argv:  # before argparse, whose "unrecognized arguments" would not say why
        search = "raysweep search" if flags.ArgumentParser.COMMAND else "python sweeps/lr_search.py"
        raise UsageError(
            "PBT trains the built-in trainable (its members continue from each other's checkpoints), not a "
            f"command after --; to search your own script's hyperparameters use {search} [flags] -- COMMAND"
        )
    parser = flags.ArgumentParser(prog="sweeps/pbt.py", description=__doc__.split("\n\n")[0])
    run_flags.add_search_args(parser, num_samples=8, num_samples_help="population size: trials trained side by side")
    parser.add_argument(
        "--perturbation-interval",
        type=int,
        default=None,
        help="epochs between exploit/explore steps (default: 4; 1 with --smoke-test)",
    )
    parser.add_argument(
        "--quantile-fraction",
        type=float,
        default=0.25,
        help="share of the population copied from / replaced, in (0, 0.5] (default: 0.25)",
    )
    flags.add_config_flags(parser, axes=False, exclude=SEARCHED, defaults={"noise_rate": "0.5"})
    run_flags.add_run_args(parser, name=NAME, grid=False)
    args = parser.parse_args(argv)

    run_flags.check_run_args(args)
    run_flags.check_search_args(args)
    flags.check_positive_int("--perturbation-interval", args.perturbation_interval)
    if not (0.0 < args.quantile_fraction <= 0.5):
        raise UsageError(f"--quantile-fraction={args.quantile_fraction:g} is outside the allowed range (0, 0.5]")
    args.fixed = {k: v[0] for k, v in flags.config_axes(args, axes=False, defaults={"noise_rate": "0.5"}).items()}
    if args.smoke_test:
        args.fixed.setdefault("epochs", run_flags.SMOKE_TEST_EPOCHS)
        args.num_samples = min(args.num_samples, 4)
    args.perturbation_interval = args.perturbation_interval or (1 if args.smoke_test else 4)
    epochs = flags.epochs_of(args.fixed)
    if args.perturbation_interval >= epochs:
        raise UsageError(f"--perturbation-interval={args.perturbation_interval} must be below --epochs ({epochs})")
    args.fixed["checkpoint_every"] = args.perturbation_interval  # PBT copies checkpoints at these epochs
    return args


def clip_to_bounds(config: dict, bounds: dict) -> dict:
    """PBT's explore step multiplies by 0.8 / 1.2 without bounds: clip lr and weight decay back in."""
    for key, (low, high) in bounds.items():
        config[key] = min(max(config[key], low), high)
    return config


def trial_name(trial) -> str:
    """`pbt_00003`: the member's number in the population (its lr changes over time)."""
    return f"{NAME}_{int(trial.experiment_tag.split('_')[0]):05d}"


def print_outcome(options, args) -> None:
    """After PBT: its members by outcome and the ten best, each ranked by the best value it logged, with that
    epoch and the lr / weight decay in force then (`analysis/reading/pbt_members.py`), as its report's search
    table says (`analysis.tables.search_table.search_outcome_lines`), and where the exploit history is."""
    from analysis.tables.search_table import search_outcome_lines

    print(*search_outcome_lines(options.experiment_dir, options.objective, args.num_samples), sep="\n")
    print("each trial's pbt_policy and exploit history: Tune's pbt_*.txt files in the experiment folder")


def pbt_settings(args) -> dict:
    """The population's settings, recorded in `raysweep.json` (a resumed population must match them)."""
    return {
        **args.fixed,
        "lr": list(args.lr_range),
        "weight_decay": list(args.weight_decay_range),
        "repeat": args.repeat,
        "num_samples": args.num_samples,
        "perturbation_interval": args.perturbation_interval,
        "quantile_fraction": args.quantile_fraction,
    }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    local_gpus.check_flags(args)  # the GPUs present, before anything runs or is written
    if args.estimate:  # before the search's checks of its folder: nothing is written
        from sweeps.engine.estimate.search_estimate import estimate_search, middle

        searched = {"lr": middle(args.lr_range), "weight_decay": middle(args.weight_decay_range)}
        note = "PBT: every member trains all its epochs; each exploit's checkpoint restore adds a little"
        return estimate_search(args, searched, note=note)
    bounds = {"lr": args.lr_range, "weight_decay": args.weight_decay_range}
    settings = pbt_settings(args)
    options = run_flags.run_options(args)
    cfg, data = preflight.prepare_search(args, options.experiment_dir, settings)

    from ray import tune
    from ray.tune import CheckpointConfig, TuneConfig, Tuner
    from ray.tune.schedulers import PopulationBasedTraining

    from sweeps.engine.run.launch import TrialFunction, start_sweep
    from trainables import train_classifier

    print(
        f"PBT: {args.num_samples} members x {args.repeat} seed(s), {cfg.epochs} epochs, perturbation every "
        f"{args.perturbation_interval} epochs; {cfg.noise_type} noise {cfg.noise_rate:g} on {cfg.dataset}, "
        f"loss {cfg.loss}",
        flush=True,
    )

    mutations = {"lr": tune.loguniform(*args.lr_range), "weight_decay": tune.loguniform(*args.weight_decay_range)}
    trial_function = TrialFunction(
        train_classifier, {"data": data, "seeds": tuple(range(args.repeat))}, probe_config=cfg
    )
    # A member is restored from another's checkpoint some time after the exploit decision; with <= 2
    # kept, the source may already have deleted it (Ray warns). One checkpoint per perturbation
    # interval, four kept, as in Ray's PBT guide.
    sweep = start_sweep(options, trial_function, checkpoint_config=CheckpointConfig(num_to_keep=4), settings=settings)
    param_space = {**args.fixed, **mutations}  # each member starts from its own draw
    tune_config = TuneConfig(
        scheduler=PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=args.perturbation_interval,
            hyperparam_mutations=mutations,
            quantile_fraction=args.quantile_fraction,
            custom_explore_fn=functools.partial(clip_to_bounds, bounds=bounds),
        ),
        num_samples=args.num_samples,
        metric=options.objective.metric,  # val/acc, max: the built-in trainable's
        mode=options.objective.mode,
        trial_name_creator=trial_name,
    )
    code, rounds = sweep.fit(
        tune_config,
        param_space,
        lambda tune_config: Tuner(
            sweep.trainable, param_space=param_space, tune_config=tune_config, run_config=sweep.run_config
        ),
    )
    print_outcome(options, args)
    return code


if __name__ == "__main__":
    process_exit.run_main(main)
