"""Sweep your own training script: a grid over its flags, one Ray Tune trial per cell, GPU-placed.

Run:
    python sweeps/run_command.py --axis noise_rate=0.2,0.4,0.6 --axis noise_type=sym,asym --seeds 3 \\
        --gpus-per-trial 0.25 -- python train.py --noise-rate {noise_rate} --noise-type {noise_type} \\
        --seed {seed} --out {trial_dir}
    python sweeps/run_command.py ... --resume          # continue after the driver was killed

Everything after `--` is the command; `{name}` placeholders are filled per trial from the axes and
`{seed}`, `{trial_dir}` (a folder kept across retries and --resume: the script's own checkpoints
go there), `{trial_name}` and `{gpu}` (the GPU ids Ray assigned). Each trial runs in its own copy
of the code taken at launch, in {trial_dir} (docs/trial-folders.md; --in-place: the launch folder).
The script needs no SDK: it prints, on stdout or stderr (Python logging), `epoch=3 val_acc=0.81
loss=0.52` (or `key: value`, `Epoch [3/50]` then metrics lines, a final `* accuracy: 97.0%` block,
the shapes of docs/output-shapes.md; others by --metric-pattern),
appends JSON lines to $RAYSWEEP_METRICS_FILE (`trainables/command/user_metrics.py`),
or writes TensorBoard events under {trial_dir} (--metrics-from tensorboard). Paired settings are one
linked axis (--axis dataset,num_classes=caltech101:100,oxford_pets:37) or rows of --tasks FILE;
--dry-run prints every cell's command, --check runs the first one without Ray.
Retries, resume, skip-existing, progress, the final table and the report are those of every sweep
(`sweeps/engine/run/launch.py`); each trial is `trainables/command/runner.py:train_command`.
"""

from __future__ import annotations

import os
import shlex
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps.engine import estimate, flags, grid, run_flags  # noqa: E402  (light: no Ray, torch or pandas before the flags are checked)
from sweeps.engine.cluster import local_gpus, mps_daemons
from sweeps.engine.command_sweep import code_snapshot, command_template, script_file
from sweeps.engine.command_sweep.programs import resolve_program
from sweeps.engine.flags import UsageError  # noqa: E402
from sweeps.engine.run import preflight, process_exit
from sweeps.engine.seeds_auto import seed_flags
from trainables.command.parse import METRICS_FROM, METRICS_SOURCES, STEP_KEY, STREAMS_READ  # noqa: E402
from trainables.command.watchdog import GRACE_PERIOD_S, WRITE_WAIT_S  # noqa: E402
from trainables.experiment.objective import COMMAND_METRIC, add_objective_flags, objective_of  # noqa: E402

NAME = "command"


def parse_args(argv: list[str]):
    """The flags before `--` and the command after it; raises UsageError on a bad value (exit 2).
    Returns the argparse namespace with `template`, `axes`, `cells` added."""
    own_flags, template = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = build_parser().parse_args(own_flags)
    run_flags.check_run_args(args)
    axes, tasks = read_grid(args, template)
    check_command_args(args)
    args.template, args.axes = template, axes
    args.cells = command_template.expand_cells(axes, tasks, args.max_trials)
    return args


def build_parser():
    """The parser of the flags before `--` (`--help` prints it; docs/own-scripts.md's table is checked against it)."""
    parser = flags.ArgumentParser(
        prog="sweeps/run_command.py",
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s [--axis NAME=V1,V2 ...] [--tasks FILE] [--seeds N] [options] -- COMMAND {name} ...",
    )
    add_grid_flags(parser)
    add_metric_flags(parser)
    add_command_flags(parser)
    run_flags.add_run_args(parser, name=NAME, grid=True)
    seed_flags.add_seed_args(parser, compare_default=None)
    return parser


def add_grid_flags(parser) -> None:
    """--axis and --tasks: the cells of the grid."""
    parser.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="an axis of the grid and its values; use {NAME} in the command (repeatable). Linked values: "
        "--axis dataset,num_classes=caltech101:100,oxford_pets:37 (one axis of pairs)",
    )
    parser.add_argument(
        "--tasks",
        default=None,
        metavar="FILE",
        help="explicit cells: a CSV with a header row, or a YAML/JSON list of mappings; "
        "crossed with --axis and --seeds",
    )


def add_metric_flags(parser) -> None:
    """--metric, --test-metric, --mode (the `Objective`, as the script prints its metrics) and how
    metrics are read from the command (--step-key, --metric-pattern, --metrics-from)."""
    add_objective_flags(
        parser,
        ("metric", "mode", "test_metric"),
        defaults={"metric": COMMAND_METRIC},
        later={"test_metric": "--metric"},
    )
    parser.add_argument(
        "--step-key",
        default=STEP_KEY,
        help="the metric counting progress: a line naming it starts a step, "
        f"read as epoch=3, epoch: 3, epoch 3, epoch 3/50, epoch [3/50] or [epoch 3] (default: {STEP_KEY})",
    )
    parser.add_argument(
        "--metric-pattern",
        action="append",
        default=[],
        help="a regex with named groups for lines not in key=value form, e.g. "
        r"'Epoch (?P<epoch>\d+).*acc (?P<val_acc>[\d.]+)'; repeat it for each line shape "
        "(default: key=value and key: value pairs)",
    )
    parser.add_argument(
        "--metrics-from",
        choices=METRICS_SOURCES,
        default=METRICS_FROM,
        help="output: lines printed to stdout and stderr (Python logging and tqdm write there), read in "
        "the order they arrive, and $RAYSWEEP_METRICS_FILE; stdout or stderr: that stream's lines and the file; "
        "jsonl: that file only; tensorboard, wandb, mlflow, csv, hf: the event files, W&B run, MLflow store, "
        "CSV file (one with --metric as a column, else metrics.csv) or trainer_state.json the script writes under "
        f"{{trial_dir}}, which output reads instead of printed lines when they hold --metric (default: {METRICS_FROM})",
    )


def add_command_flags(parser) -> None:
    """How the command runs: --grace-period-s, --write-wait-s, --in-place, --dry-run, --check."""
    parser.add_argument(
        "--grace-period-s",
        type=float,
        default=GRACE_PERIOD_S,
        help=f"seconds between SIGTERM and SIGKILL when a trial's command is stopped (default: {GRACE_PERIOD_S:g})",
    )
    parser.add_argument(
        "--write-wait-s",
        type=float,
        default=WRITE_WAIT_S,
        help="when a trial's command is stopped, first wait up to this many seconds for the files it is "
        f"writing under its trial folder to be closed, so a stop never tears a checkpoint (default: {WRITE_WAIT_S:g})",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="run every trial in the launch folder itself, for a script that must write into its repo "
        "(default: each trial runs in its own copy of the code, taken at launch, in {trial_dir})",
    )
    parser.add_argument(
        "--no-shared-fs",
        action="store_true",
        help="the code snapshot travels to every node as Ray's runtime_env working_dir (as with s3:// storage), "
        "for a cluster whose nodes share no folder (default: the snapshot is read from --storage-path)",
    )
    parser.add_argument(
        "--no-memory-cap",
        action="store_true",
        help="leave a fractional trial's PyTorch uncapped (default: its GPU memory is capped at the share minus "
        "10%% when CUDA starts in the command's Python, through a sitecustomize hook on its PYTHONPATH)",
    )
    parser.add_argument(
        "--mps",
        action="store_true",
        help="run fractional trials under NVIDIA MPS, one control daemon per GPU of this machine, each trial "
        "limited to its share of the GPU's threads and memory (needs nvidia-cuda-mps-control)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print every cell's command, one per line, and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="run the first cell's command once without Ray, print each metrics row read, and say "
        "whether --metric (and --test-metric) were seen; exit 0 only if they were",
    )


def read_grid(args, template: list[str]) -> tuple[dict, list[dict] | None]:
    """The axes ({name or (name, ...): values}, with `seed` from --seeds) and the --tasks rows (None
    without --tasks); sets `args.auto` (the --seeds auto rule, else None). Raises UsageError for an
    axis given twice, two sources of the seed, or a template whose placeholders do not match."""
    axes = {}
    for text in args.axis:
        name, values = command_template.parse_axis(text)
        given = set(name if isinstance(name, tuple) else (name,))
        twice = sorted(given & {n for key in axes for n in (key if isinstance(key, tuple) else (key,))})
        if twice:
            raise UsageError(f"--axis {twice[0]} is given twice; give all its values in one --axis {twice[0]}=V1,V2")
        axes[name] = values
    tasks = command_template.read_tasks(args.tasks) if args.tasks else None
    settings = {n: [] for key in axes for n in (key if isinstance(key, tuple) else (key,))} | dict.fromkeys(
        tasks[0] if tasks else [], []
    )
    if args.seeds is not None and "seed" in settings:
        raise UsageError("--seeds and a seed in --axis or --tasks both set the seed; give only one")
    command_template.check_template(
        template,
        settings,
        seeds=args.seeds is not None,
        tasks=args.tasks,
        task_columns=tasks[0] if tasks else (),
        resume=args.resume,
    )
    if args.seeds is not None:
        axes["seed"] = list(range(seed_flags.seed_count(args)))
    args.auto = seed_flags.seed_rule_settings(args, {k: v for k, v in axes.items() if isinstance(k, str)})
    if args.auto and "seed" not in command_template.placeholders(template):
        raise UsageError("--seeds auto runs seed after seed of each cell: put {seed} in the command")
    return axes, tasks


def check_command_args(args) -> None:
    """Raise UsageError for a --metric-pattern that reads no lines, a metric the command cannot
    produce, a negative --grace-period-s or --write-wait-s, or --dry-run with --check."""
    patterns = [command_template.compile_metric_pattern(p) for p in args.metric_pattern]
    if patterns and args.metrics_from not in STREAMS_READ:
        raise UsageError(
            f"--metric-pattern reads printed lines; --metrics-from {args.metrics_from} reads none "
            f"(use --metrics-from {' / '.join(STREAMS_READ)})"
        )
    args.objective = objective_of(args)  # made once: --check, the trials and Tune read it
    command_template.check_metric_producible(args.objective, patterns, args.step_key, args.metrics_from)
    for flag in ("--grace-period-s", "--write-wait-s"):
        if not getattr(args, flag[2:].replace("-", "_")) >= 0:
            raise UsageError(f"{flag}={getattr(args, flag[2:].replace('-', '_'))} must be >= 0 seconds")
    if args.dry_run and args.check:
        raise UsageError("--dry-run prints the commands and --check runs the first one; give one of them")
    mps_daemons.check_mps(args.mps and not (args.dry_run or args.check))


def warn_gpu_choice(template: list[str]) -> None:
    """Print `command_template.gpu_warnings` to stderr, one line each."""
    for line in command_template.gpu_warnings(template):
        print(f"warning: {line}", file=sys.stderr, flush=True)


def dry_run(args) -> int:
    """Print each cell's trial name and rendered command, one per line: `{trial_dir}` as the folder it
    will be, `{gpu}` empty on CPU trials, else `GPU_IDS` (Ray assigns the ids when the trial starts).
    With --estimate, only the estimate, from a finished experiment (`estimate.dry_run_estimate`)."""
    gpu = "" if args.gpus_per_trial == 0 else "GPU_IDS"
    namer = grid.trial_namer(command_template.cell_axes(args.cells))
    experiment_dir = run_flags.run_options(args).experiment_dir
    if args.estimate:
        estimate.dry_run_estimate(args, args.cells, experiment_dir)
        return 0
    for cell in args.cells:
        name = namer(types.SimpleNamespace(config=cell))
        folder = f"{experiment_dir}/{name}/work"
        argv = command_template.render(args.template, cell, folder, name, gpu=gpu)
        print(f"{name}: {shlex.join(argv)}")
    if gpu and "gpu" in command_template.placeholders(args.template):
        print("GPU_IDS: the ids of the GPUs Ray assigns to the trial when it starts, e.g. 3 or 2,3")
    print(
        *estimate.estimate_lines(args.cells, experiment_dir, **estimate.run_flags_of(args)),
        sep="\n",
    )
    print(f"{len(args.cells)} trials; nothing was run (--dry-run)")
    return 0


def estimate_sweep(args) -> int:
    """`--estimate`: the first cell's command timed as `--check` runs it, and the sweep's cost predicted
    (`sweeps/engine/estimate/prediction.py`); with `--seeds auto`, from its minimum seeds to the cap."""
    from sweeps.engine.command_sweep.command_check import time_command

    minimum = [c for c in args.cells if c["seed"] < args.auto["min_seeds"]] if args.auto else None
    return estimate.run_estimate(
        args,
        estimate.Plan(args.cells, "command", minimum=minimum, template=tuple(args.template)),
        lambda epochs, limit_s, gpus: time_command(args, args.cells[0], epochs, limit_s, gpus),
        lambda cell, gpus: time_command(args, cell, 0, estimate.ESTIMATE_LIMIT_S, gpus),
    )


def command_trial_function(args, snapshot: dict | None, template: list[str] | None = None, mps_dir: str | None = None):
    """`train_command` with the command (`template`, its program resolved: `programs.resolve_program`), how its
    metrics are read, the code copy (`snapshot`, None with --in-place) it runs in, and how fractional trials
    share a GPU (--no-memory-cap; `mps_dir`: --mps's daemons' folder); a snapshot with a `runtime_env` reaches
    the trials through it."""
    from sweeps.engine.run.launch import TrialFunction
    from trainables.command.gpu_sharing import GpuSharing
    from trainables.command.runner import train_command
    from trainables.command.workdir import RUNTIME_ENV_CODE

    runtime_env = snapshot and snapshot["runtime_env"]

    return TrialFunction(
        train_command,
        {
            "template": template or args.template,
            "step_key": args.step_key,
            "metric_pattern": args.metric_pattern or None,
            "metrics_from": args.metrics_from,
            "objective": args.objective,
            "grace_period_s": args.grace_period_s,
            "write_wait_s": args.write_wait_s,
            "cwd": os.getcwd(),
            "code_dir": RUNTIME_ENV_CODE if runtime_env else snapshot and snapshot["path"],
            "gpu_sharing": GpuSharing(memory_cap=not args.no_memory_cap, mps_dir=mps_dir),
        },
        runtime_env=runtime_env or None,
    )


def run_grid(args, options, plan, snapshot: dict | None, program: tuple[list[str], dict | None]) -> int:
    """Run the planned grid of commands (`grid.plan.plan_grid`) with Ray Tune, or resume it
    (`grid.plan.fit_grid` around this script's `Tuner`); `program`: the command as the trials run it and its
    program's record (`programs.resolve_program`). Returns the exit code."""
    from ray.tune import CheckpointConfig, Tuner

    from sweeps.engine.grid.plan import fit_grid
    from sweeps.engine.run.launch import start_sweep

    template, program = program
    with mps_daemons.mps_folder(args.mps) as mps_dir:  # --mps: the daemons' folder, removed at the end
        sweep = start_sweep(
            options,
            command_trial_function(args, snapshot, template, mps_dir),
            # every result carries a small step checkpoint; keep the latest two, whatever the metric
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            settings={"code_snapshot": snapshot, "program": program},
        )
        with mps_daemons.mps_daemons(mps_dir, sweep.gpus, *mps_daemons.sweep_gpus() if mps_dir else ([], {})):
            code, _ = fit_grid(
                sweep,
                plan,
                grid.trial_namer(command_template.cell_axes(args.cells)),
                lambda tune_config: Tuner(
                    sweep.trainable, param_space=plan.param_space, tune_config=tune_config, run_config=sweep.run_config
                ),
            )
    return code


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.dry_run:
        warn_gpu_choice(args.template)
        return dry_run(args)
    script_file.check_script(args.template, os.getcwd())  # a missing script, like a missing program: before anything
    local_gpus.check_flags(args)  # the GPUs present
    warn_gpu_choice(args.template)
    if args.check:
        from sweeps.engine.command_sweep.command_check import check_command

        return check_command(args)
    if args.estimate:
        return estimate_sweep(args)
    options = run_flags.run_options(args)
    cells = args.cells
    print(f"{len(cells)} trials in the grid", flush=True)
    preflight.check_resume(options.experiment_dir, args.resume)
    preflight.check_before_writing(options.experiment_dir, options.mlflow_uri, options.wandb_project)
    program = resolve_program(args.template, options.experiment_dir, args.resume)  # the launch's, on a resume

    from sweeps.engine.grid.plan import plan_grid, say_all_finished, say_nothing_to_resume
    from sweeps.engine.run import resume

    # The search space: a grid over every axis; with linked axes, a task file, or when extending a
    # grid, exactly the cells to run (Ray's restore cannot extend a grid).
    plan = plan_grid(
        cells,
        args.axes,
        options.experiment_dir,
        skip_existing=args.skip_existing,
        hash_fn=resume.command_hash,
        relaunch=not args.resume,
    )
    if not args.resume and not plan.todo and not args.auto:
        return say_all_finished(plan, options.experiment_dir, options.objective, options.report)
    if args.resume and not args.auto:
        done = say_nothing_to_resume(
            plan, options.experiment_dir, options.objective, resume.command_hash, options.report
        )
        if done is not None:
            return done
    snapshot = code_snapshot.take_snapshot(
        options.experiment_dir, args.in_place, args.resume, shared_fs=not args.no_shared_fs
    )
    print(command_template.launch_line(args.template, plan, args.metrics_from), flush=True)
    if args.auto:  # seeds by significance: a searcher hands out the next seed of the undecided methods
        from sweeps.engine.seeds_auto import seed_search  # its statistics import scipy: only for --seeds auto

        plan, rule = seed_search.auto_plan(
            plan, cells, args.compare, args.auto, options.experiment_dir, options.objective
        )
    code = run_grid(args, options, plan, snapshot, program)
    if args.auto:
        seed_search.finish_auto(options.experiment_dir, cells, args.compare, rule, options.objective.metric)
    return code


if __name__ == "__main__":
    process_exit.run_main(main)
