"""Hyperparameter search under one label-noise setting: Optuna TPE proposes, ASHA stops early.

Run:
    python sweeps/lr_search.py                                  # sym 0.5 on digits, 20 trials
    python sweeps/lr_search.py --smoke-test                     # 4 trials x 2 epochs, about a minute on 2 cores
    python sweeps/lr_search.py --noise-type asym --noise-rate 0.4 --repeat 3 --num-samples 60 \\
        --lr-range 1e-3,0.5 --losses ce,gce,sce --batch-sizes 64,128 --gpus-per-trial 0.25
    python sweeps/lr_search.py --resume                         # continue an interrupted search
    python sweeps/lr_search.py --metric val_acc --space wd=loguniform:1e-5,1e-2 --space bs=choice:64,128 \\
        -- python train.py --epochs 10 --lr {lr} --wd {wd} --batch-size {bs} --out {trial_dir}  # your own script

For a fixed data set / noise type / noise rate, searches the learning rate (log scale), weight
decay (log scale), batch size and loss (`ce`; `gce` with its q; `sce` with its alpha and beta)
with Ray Tune's `OptunaSearch` (TPE, seeded by --search-seed) and `ASHAScheduler` (--grace-period,
--reduction-factor). Optuna alone has no multi-GPU scheduler (optuna#1365); Tune places the trials.
With --repeat N each trial trains the configuration with seeds 0..N-1 side by side
(`trainables/seed_group.py`) and reports their mean, which both TPE and ASHA see.

With a command after `--` (your own script, as `sweeps/run_command.py` runs it), the search space is its
placeholders only (`sweeps/engine/command_sweep/search_space.py`: `{lr}` from --lr-range, others from
`--space NAME=FORM`); ASHA's max_t is the command's `--epochs N` (or `{epochs}`), else unknown.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps.engine import estimate, flags, run_flags  # noqa: E402  (light: no Ray, torch or pandas before the flags are checked)
from sweeps.engine.cluster import local_gpus
from sweeps.engine.command_sweep import command_template, script_file  # noqa: E402
from sweeps.engine.command_sweep import search_space as search_space_of  # noqa: E402
from sweeps.engine.command_sweep.programs import resolve_program  # noqa: E402
from sweeps.engine.flags import UsageError  # noqa: E402
from sweeps.engine.run import preflight, process_exit
from trainables.command.parse import STEP_KEY  # noqa: E402
from trainables.experiment.objective import COMMAND_METRIC, Objective, add_objective_flags  # noqa: E402

NAME = "lr_search"
SEARCHED = {
    "lr": "use --lr-range",
    "weight_decay": "use --weight-decay-range",
    "batch_size": "use --batch-sizes",
    "loss": "use --losses",
    "gce_q": "use --gce-q-range",
    "sce_alpha": "use --sce-alpha-range",
    "sce_beta": "use --sce-beta-range",
}  # set by the searcher
SEARCHED_LOSSES = ("ce", "gce", "sce")
# the built-in trainable's search flags: a command receives only its placeholders, so they are refused with one
TRAINABLE_ONLY = ("weight_decay_range", "losses", "batch_sizes", "gce_q_range", "sce_alpha_range", "sce_beta_range")
DEFAULTS = {"noise_rate": "0.5"}  # the built-in trainable's fixed noise setting; a command gets only what it is given


def make_parser(command: bool) -> flags.ArgumentParser:
    """The search's flags; `command`: a command follows `--`, so a trial option given (`--seed 0`) fills its
    placeholder and `--lr` is not refused (without one, the searched options are: `SEARCHED`)."""
    parser = flags.ArgumentParser(prog="sweeps/lr_search.py", description=__doc__.split("\n\n")[0])
    run_flags.add_search_args(parser, num_samples=20, num_samples_help="configurations TPE proposes")
    parser.add_argument(
        "--losses", default="ce,gce,sce", help="losses to search over, of ce, gce, sce (default: all three)"
    )
    parser.add_argument("--batch-sizes", default="32,64,128", help="batch sizes to choose from (default: 32,64,128)")
    parser.add_argument("--gce-q-range", default="0.1,1", help="LOW,HIGH of GCE's q, in (0, 1] (default: 0.1,1)")
    parser.add_argument(
        "--sce-alpha-range", default="0.01,1", help="LOW,HIGH of SCE's alpha, log scale (default: 0.01,1)"
    )
    parser.add_argument(
        "--sce-beta-range", default="0.1,10", help="LOW,HIGH of SCE's beta, log scale (default: 0.1,10)"
    )
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=FORM",
        help="with a command after --: the range of its placeholder {NAME}, FORM one of loguniform:LOW,HIGH, "
        "uniform:LOW,HIGH, int:LOW,HIGH, choice:A,B,... (repeatable; {lr} takes --lr-range)",
    )
    parser.add_argument(
        "--grace-period",
        type=int,
        default=None,
        help="epochs before ASHA may stop a trial (default: 2; 1 with --smoke-test)",
    )
    parser.add_argument(
        "--reduction-factor", type=float, default=3.0, help="ASHA keeps the top 1/F at each rung, F > 1 (default: 3)"
    )
    parser.add_argument("--search-seed", type=int, default=0, help="seed of the TPE sampler (default: 0)")
    add_objective_flags(
        parser,
        ("metric", "mode"),
        later={
            "metric": f"with a command after --, {COMMAND_METRIC}; the built-in trainable always uses "
            f"{Objective.metric}"
        },
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="with a command after --: run every trial in the launch folder itself (default: each in its own "
        "copy of the code, taken at launch, in {trial_dir})",
    )
    flags.add_config_flags(
        parser, axes=False, exclude={} if command else SEARCHED, defaults={} if command else DEFAULTS
    )
    run_flags.add_run_args(parser, name=NAME, grid=False)
    return parser


def parse_args(argv: list[str]):
    """The checked flags, `template` (the command after `--`, or []), `fixed` (the trial options given),
    `space` and `epochs` (`check_command`).

    Raises:
        UsageError: one line naming the flag or placeholder, its value and what is allowed.
    """
    argv, template = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = make_parser(bool(template))
    trainable_defaults = {name: parser.get_default(name) for name in TRAINABLE_ONLY}
    parser.set_defaults(**dict.fromkeys(TRAINABLE_ONLY))  # None: not given (refused with a command)
    args = parser.parse_args(argv)
    given = [name for name in TRAINABLE_ONLY if getattr(args, name) is not None]
    if template and given:
        raise UsageError(
            f"--{given[0].replace('_', '-')}: the built-in trainable's; a command receives only its placeholders: "
            "search {lr} with --lr-range and any other {name} with --space name=FORM"
        )
    for name in TRAINABLE_ONLY:
        setattr(args, name, getattr(args, name) or trainable_defaults[name])

    run_flags.check_run_args(args)
    run_flags.check_search_args(args)
    check_search_space_flags(args)
    fixed = flags.config_axes(args, axes=False, defaults={} if template else DEFAULTS)
    args.fixed = {k: v[0] for k, v in fixed.items()}
    args.template = template
    if args.smoke_test:
        if not template or "epochs" in command_template.placeholders(template):
            args.fixed.setdefault("epochs", run_flags.SMOKE_TEST_EPOCHS)
        args.num_samples = min(args.num_samples, 4)
    check_command(args)
    args.grace_period = args.grace_period or (1 if args.smoke_test else 2)
    max_t = args.epochs or search_space_of.MAX_T_UNKNOWN
    if args.grace_period > max_t:
        raise UsageError(
            f"--grace-period={args.grace_period} must be <= {'ASHA max_t' if template else '--epochs'} ({max_t})"
        )
    return args


def check_search_space_flags(args) -> None:
    """Parse and check the flags of the search space and ASHA (ranges, losses, batch sizes, seeds).

    Raises:
        UsageError: one line naming the flag, its value and the allowed range.
    """
    args.gce_q_range = flags.parse_range("--gce-q-range", args.gce_q_range, 0.0, 1.0)
    args.sce_alpha_range = flags.parse_range("--sce-alpha-range", args.sce_alpha_range, 0.0, 100.0)
    args.sce_beta_range = flags.parse_range("--sce-beta-range", args.sce_beta_range, 0.0, 100.0)
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
    flags.check_positive_int("--grace-period", args.grace_period)
    if args.search_seed < 0:
        raise UsageError(f"--search-seed={args.search_seed} must be a whole number >= 0")
    if not (args.reduction_factor > 1):
        raise UsageError(f"--reduction-factor={args.reduction_factor:g} must be > 1")


def check_command(args) -> None:
    """Set the search's metric, mode, test metric, `epochs` (those of a trial when known: ASHA's max_t) and,
    with a command after `--` (your own script, `trainables/command/runner.py`), its search space `space`
    ({placeholder: `search_space.Dimension`}) from its placeholders; `--repeat` is the built-in trainable's.

    Raises:
        UsageError: one line naming the placeholder, the `--space`, the program or the flag.
    """
    if not args.template:
        if args.metric not in (None, Objective.metric):
            raise UsageError(
                f"--metric={args.metric}: the built-in trainable is ranked by {Objective.metric}; "
                "--metric names what a command after -- prints"
            )
        if args.space:
            raise UsageError(f"--space {args.space[0]}: searches a command's placeholders; give the command after --")
        args.objective = Objective()  # the built-in trainable's metric, mode and test metric
        args.space, args.epochs = None, flags.epochs_of(args.fixed)
        return
    args.objective = Objective(args.metric or COMMAND_METRIC, args.mode, test_metric=None)  # its table: the metric
    if args.repeat != 1:
        raise UsageError(
            "--repeat trains seeds inside the built-in trainable; a command gets {seed} from a grid "
            "(sweeps/run_command.py --seeds)"
        )
    args.space = search_space_of.command_space(args.template, args.lr_range, args.space, args.fixed)
    args.epochs = search_space_of.command_epochs(args.template, args.fixed)
    command_template.check_template(
        args.template, dict.fromkeys([*args.space, *args.fixed], [0]), seeds=False, resume=args.resume
    )
    command_template.check_metric_producible(args.objective, None, STEP_KEY)


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
    """`lr_search_00003_gce_lr0.012`: the trial's number in the search, its loss and learning rate
    (a command's trial: `lr_search_00003_lr0.012`, or only the number where `{lr}` is not searched)."""
    number = int(trial.experiment_tag.split("_")[0])  # Tune's running count of created trials
    config = trial.config
    loss = f"_{config['loss']}" if "loss" in config else ""
    lr = f"_lr{config['lr']:.2g}" if isinstance(config.get("lr"), (int, float)) else ""
    return f"{NAME}_{number:05d}{loss}{lr}"


def search_bounds(args) -> tuple[dict, dict]:
    """(the bounds `search_space` draws from, the settings a resumed search must keep). A command's
    settings hold its space in `--space` form and ASHA's `max_t` (None: unknown), never the built-in
    trainable's bounds."""
    common = {key: getattr(args, key) for key in ("num_samples", "search_seed", "grace_period", "reduction_factor")}
    if args.template:
        space = {name: dimension.text() for name, dimension in args.space.items()}
        return {}, {**args.fixed, "space": space, "max_t": args.epochs, **common}
    bounds = {
        "lr": list(args.lr_range),
        "weight_decay": list(args.weight_decay_range),
        "batch_sizes": args.batch_sizes,
        "losses": args.losses,
        "gce_q": list(args.gce_q_range),
        "sce_alpha": list(args.sce_alpha_range),
        "sce_beta": list(args.sce_beta_range),
    }
    return bounds, {**args.fixed, **bounds, "repeat": args.repeat, **common}


def print_outcome(options, args, objective: Objective) -> None:
    """After the search: its trials by outcome and its ten best by `objective`, how each ended, as its report's
    search table says (`analysis.tables.search_table.search_outcome_lines`: pruned only where ASHA stopped a
    trial before its last epoch; a trial that ended by itself is finished)."""
    from analysis.tables.search_table import search_outcome_lines

    print(*search_outcome_lines(options.experiment_dir, objective, args.num_samples), sep="\n")


def launch_line(args, cfg) -> str:
    """The search's first line: what is searched, how many trials, and (a command's) ASHA's max_t."""
    if args.template:
        return search_space_of.launch_line(args.space, args.fixed, args.num_samples, args.epochs, args.template)
    return (
        f"search: {args.num_samples} configurations x {args.repeat} seed(s), {cfg.epochs} epochs; "
        f"{cfg.noise_type} noise {cfg.noise_rate:g} on {cfg.dataset}"
    )


def choose_trial_function(args, options, cfg, data, template: list[str] | None = None):
    """The trainable each trial runs: the shared classifier (with `args.repeat` seeds), or the user's own
    script (`template`: the command after --, its program resolved), the searched values reaching it through
    its {placeholders}."""
    from sweeps.engine.run.launch import TrialFunction
    from trainables import train_classifier

    if not args.template:
        return TrialFunction(train_classifier, {"data": data, "seeds": tuple(range(args.repeat))}, probe_config=cfg)
    from sweeps.engine.command_sweep.code_snapshot import take_snapshot
    from trainables.command.runner import train_command
    from trainables.command.workdir import RUNTIME_ENV_CODE

    snapshot = take_snapshot(options.experiment_dir, args.in_place, args.resume)
    runtime_env = snapshot and snapshot["runtime_env"]  # object storage: the code travels with the job
    return TrialFunction(
        train_command,
        {
            "template": template or args.template,
            "cwd": os.getcwd(),
            "code_dir": RUNTIME_ENV_CODE if runtime_env else snapshot and snapshot["path"],
            "objective": options.objective,  # each step reported as soon as it has the metric
        },
        runtime_env=runtime_env or None,
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    local_gpus.check_flags(args)  # the GPUs present, before anything runs or is written
    if args.template:  # a missing script, like a missing program: before anything runs
        script_file.check_script(args.template, os.getcwd())
    if args.estimate:  # before the search's checks of its folder: nothing is written
        point = estimate.search_point(args)
        return estimate.estimate_search(args, *point, upper_bound="ASHA stops trials early")
    bounds, settings = search_bounds(args)
    options = run_flags.run_options(args)
    if args.template:  # the built-in trainable's data is not loaded; the command's program: the launch's
        template, settings["program"] = resolve_program(args.template, options.experiment_dir, args.resume)
        preflight.check_resume(options.experiment_dir, args.resume, settings, new_ok=False)
        preflight.check_before_writing(options.experiment_dir, options.mlflow_uri, options.wandb_project)
        cfg = data = None
    else:
        cfg, data = preflight.prepare_search(args, options.experiment_dir, settings)

    from ray.tune import CheckpointConfig, TuneConfig, Tuner
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from sweeps.engine.optuna_searcher import skip_results_without
    from sweeps.engine.run.launch import start_sweep

    print(launch_line(args, cfg), flush=True)
    trial_function = choose_trial_function(args, options, cfg, data, template if args.template else None)
    checkpoint_config = CheckpointConfig(num_to_keep=2) if args.template else None
    sweep = start_sweep(options, trial_function, checkpoint_config=checkpoint_config, settings=settings)
    objective = options.objective
    if args.template:  # the command's placeholders as Tune's sampling functions; OptunaSearch converts them
        space, define_by_run = {name: dimension.domain() for name, dimension in args.space.items()}, None
    else:  # define-by-run: a loss's own parameters exist only for that loss
        space, define_by_run = {}, functools.partial(search_space, bounds=bounds)
    param_space = {**args.fixed, **space}
    tune_config = TuneConfig(
        search_alg=skip_results_without(OptunaSearch, objective.metric)(
            define_by_run, metric=objective.metric, mode=objective.mode, seed=args.search_seed
        ),
        scheduler=ASHAScheduler(
            time_attr="training_iteration",
            max_t=args.epochs or search_space_of.MAX_T_UNKNOWN,
            grace_period=args.grace_period,
            reduction_factor=args.reduction_factor,
            stop_last_trials=not args.template,  # a script ends by itself, its last lines read
        ),
        num_samples=args.num_samples,
        metric=objective.metric,
        mode=objective.mode,
        trial_name_creator=trial_name,
    )
    # a resumed search goes on with its searcher's state
    code, rounds = sweep.fit(
        tune_config,
        param_space,
        lambda tune_config: Tuner(
            sweep.trainable, param_space=param_space, tune_config=tune_config, run_config=sweep.run_config
        ),
    )
    print_outcome(options, args, objective)
    return code


if __name__ == "__main__":
    process_exit.run_main(main)
