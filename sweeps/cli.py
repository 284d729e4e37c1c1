"""`raysweep`: the console command, one subcommand per entry script (`[project.scripts]` in pyproject.toml).

    raysweep grid [flags]                      = python sweeps/noise_grid.py [flags]
    raysweep run [flags] -- COMMAND ...        = python sweeps/run_command.py [flags] -- COMMAND ...
    raysweep search [flags] [-- COMMAND ...]   = python sweeps/lr_search.py ...
    raysweep pbt [flags]                       = python sweeps/pbt.py ...
    raysweep analyze EXP ... [flags]           = python -m analysis EXP ... [flags]
    raysweep status EXP [--watch N] [--json]   = python -m analysis EXP --status ...

Each subcommand is its script's own parser and `main`: the same flags and exit codes (0 done, 1 a
trial failed, 2 a usage error, 130 interrupted), its help named as called (`raysweep grid --help`).
Made to run from the user's own repository: raysweep's packages load from raysweep's folder even
where the current folder has its own `analysis/`, `sweeps/` or `trainables/`, in this driver and in
Ray's workers (`sweeps/engine/cluster/job_env.py`). `--help` answers before Ray, torch, pandas or
matplotlib load.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys

from sweeps.engine.cluster.job_env import our_packages_first


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One subcommand: the module whose `main(argv)` runs it, and its line in `raysweep --help`."""

    module: str  # an entry script (`sweeps.noise_grid`) or `analysis.__main__`
    summary: str
    status: bool = False  # `python -m analysis --status`


SUBCOMMANDS = {
    "grid": Subcommand("sweeps.noise_grid", "the label-noise grid of the built-in trainable"),
    "run": Subcommand("sweeps.run_command", "a grid over your own script: run [flags] -- python train.py ..."),
    "search": Subcommand("sweeps.lr_search", "Optuna TPE + ASHA search (the built-in trainable or a command)"),
    "pbt": Subcommand("sweeps.pbt", "population-based training of learning rate and weight decay"),
    "analyze": Subcommand("analysis.__main__", "tables and report of sweeps (--paper, --json, --provenance)"),
    "status": Subcommand("analysis.__main__", "a sweep's status: trials running, done, ETA (--watch N, --json)", True),
}


def top_parser() -> argparse.ArgumentParser:
    """`raysweep [-h] [--version] COMMAND ...`: the subcommands and their one-line summaries."""
    parser = argparse.ArgumentParser(
        prog="raysweep",
        description="Parallel sweeps on one to many GPUs, scheduled by Ray Tune. "
        "`raysweep COMMAND --help` lists a command's flags.",
        epilog="e.g. cd my-repo && raysweep run --axis lr=0.1,0.01 --seeds 3 -- python train.py --lr {lr} "
        "--seed {seed}",
    )
    parser.add_argument("--version", action=PrintVersion, nargs=0, help="print raysweep's version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, sub in SUBCOMMANDS.items():
        commands.add_parser(name, help=sub.summary, add_help=False)
    return parser


class PrintVersion(argparse.Action):
    """`--version`: the installed distribution's version (`unknown` in a checkout never installed), looked
    up only when asked (importlib.metadata scans the installed distributions: 0.1-0.3 s)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"raysweep {version('raysweep')}")
        except PackageNotFoundError:
            print("raysweep unknown")
        parser.exit()


def main(argv: list[str] | None = None) -> None:
    """Run `raysweep COMMAND [ARGS...]` and exit with the command's code (2: no or an unknown command)."""
    argv = sys.argv[1:] if argv is None else argv
    our_packages_first()  # before anything imports trainables or analysis from the current folder
    if not argv:
        top_parser().print_help(sys.stderr)
        sys.exit(2)
    top_parser().parse_args(argv[:1])  # --help, --version, an unknown command: argparse answers and exits
    name, rest = argv[0], argv[1:]
    command = SUBCOMMANDS[name]
    if command.module == "analysis.__main__":
        from analysis import __main__ as analysis_main

        sys.exit(analysis_main.main(["--status", *rest] if command.status else rest, prog=f"raysweep {name}"))
    from sweeps.engine import flags
    from sweeps.engine.run import process_exit

    flags.ArgumentParser.COMMAND = f"raysweep {name}"
    process_exit.run_main(importlib.import_module(command.module).main, rest)


if __name__ == "__main__":
    main()
