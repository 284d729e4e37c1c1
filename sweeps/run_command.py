"""Sweep your own training script: a grid over its flags, one Ray Tune trial per cell, GPU-placed.

Run:
    python sweeps/run_command.py --axis noise_rate=0.2,0.4,0.6 --axis noise_type=sym,asym --seeds 3 \\
        --gpus-per-trial 0.25 -- python train.py --noise-rate {noise_rate} --noise-type {noise_type} \\
        --seed {seed} --out {trial_dir}
    python sweeps/run_command.py ... --resume          # continue after the driver was killed

Everything after `--` is the command; `{name}` placeholders are filled per trial from the axes and
`{seed}`, `{trial_dir}` (a folder kept across retries and --resume: the script's own checkpoints
go there) and `{trial_name}`. The script needs no SDK: it prints `epoch=3 val_acc=0.81 loss=0.52`
(or `key: value`) lines, or appends JSON lines to $RAYSWEEP_METRICS_FILE (`trainables/report.py`).
Retries, resume, skip-existing, progress, the final table and the report are those of every sweep
(`sweeps/launch.py`); each trial is `trainables/command.py:train_command`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import cli, command_template  # noqa: E402  (light: no Ray, torch or pandas before the flags are checked)
from sweeps.cli import UsageError  # noqa: E402

NAME = "command"


def parse_args(argv: list[str]):
    flags, template = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = cli.ArgumentParser(prog="sweeps/run_command.py", description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [--axis NAME=V1,V2 ...] [--seeds N] [options] -- COMMAND {name} ...")
    parser.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                        help="an axis of the grid and its values; use {NAME} in the command (repeatable)")
    parser.add_argument("--metric", default="val_acc", help="the metric that ranks trials, as the script prints it (default: val_acc)")
    parser.add_argument("--mode", choices=("max", "min"), default="max", help="max or min (default: max)")
    parser.add_argument("--step-key", default="epoch", help="a result is a line (or JSON object) holding this key (default: epoch)")
    parser.add_argument("--metric-pattern", default=None,
                        help="a regex with named groups for lines not in key=value form, e.g. "
                        r"'Epoch (?P<epoch>\d+).*acc (?P<val_acc>[\d.]+)' (default: key=value and key: value pairs)")
    parser.add_argument("--grace-period-s", type=float, default=10.0,
                        help="seconds between SIGTERM and SIGKILL when a trial's command is stopped (default: 10)")
    cli.add_run_args(parser, name=NAME, grid=True)
    args = parser.parse_args(flags)
    cli.check_run_args(args)
    axes = {}
    for text in args.axis:
        name, values = command_template.parse_axis(text)
        if name in axes:
            raise UsageError(f"--axis {name} is given twice; give all its values in one --axis {name}=V1,V2")
        axes[name] = values
    command_template.check_template(template, axes, seeds=args.seeds is not None)
    if args.seeds is not None:
        axes["seed"] = list(range(args.seeds))
    pattern = command_template.compile_metric_pattern(args.metric_pattern) if args.metric_pattern else None
    command_template.check_metric_producible(args.metric, pattern, args.step_key)
    if not args.grace_period_s >= 0:
        raise UsageError(f"--grace-period-s={args.grace_period_s} must be >= 0 seconds")
    args.template, args.axes = template, axes
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cells = cli.grid_cells(args.axes, args.max_trials)
    print(f"{len(cells)} trials in the grid", flush=True)
    cli.check_resume(args)

    from ray import tune
    from ray.tune import CheckpointConfig
    from ray.tune.search import BasicVariantGenerator

    from sweeps import resume
    from sweeps.launch import Trainable, launch
    from trainables.command import train_command

    experiment_dir = f"{args.storage_path}/{args.name}"
    todo, reused = resume.plan_cells(cells, experiment_dir, args.skip_existing, hash_fn=resume.command_hash)
    if not args.resume and not todo:
        print(f"all {len(cells)} cells already finished in {experiment_dir}; --no-skip-existing reruns them")
        from sweeps.launch import print_summary
        print_summary(experiment_dir, args.metric, args.mode, test_metric=args.metric)
        return resume.report_outcome(None, reused, args.metric)
    cli.probe_storage(experiment_dir)
    print(f"command: {' '.join(args.template)}; {len(todo)} to run, {len(reused)} reused", flush=True)

    # The search space: a grid over every axis; when extending a grid, only the missing cells.
    param_space = {k: tune.grid_search(v) for k, v in args.axes.items()}
    search_alg = None
    if len(todo) < len(cells):  # every sample is one of the explicit points (Ray's restore cannot extend a grid)
        param_space = {k: tune.choice(v) for k, v in args.axes.items()}
        search_alg = BasicVariantGenerator(points_to_evaluate=todo)
    trainable = Trainable(train_command, {"template": args.template, "step_key": args.step_key,
                                          "metric_pattern": args.metric_pattern, "grace_period_s": args.grace_period_s,
                                          "cwd": os.getcwd()})
    code, _ = launch(cli.run_options(args), trainable, param_space=param_space, search_alg=search_alg,
                     num_samples=len(todo) if search_alg else 1, trial_name=cli.trial_namer(args.axes),
                     metric=args.metric, mode=args.mode, reused=reused, test_metric=args.metric,
                     # every result carries a small step checkpoint; keep the latest two, whatever the metric
                     checkpoint_config=CheckpointConfig(num_to_keep=2))
    return code


if __name__ == "__main__":
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "1")
    cli.run_main(main)
