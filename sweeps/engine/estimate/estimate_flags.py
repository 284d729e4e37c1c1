"""The `--estimate` flags of every sweep script (`sweeps/engine/estimate/prediction.py`) and their checks.

Nothing here imports Ray, torch, pandas or matplotlib (`--help` and usage errors stay fast).
"""

from __future__ import annotations

import argparse

from sweeps.engine.flags import UsageError

ESTIMATE_EPOCHS = 2  # --estimate: the first cell runs until this many epochs after its first are timed
ESTIMATE_LIMIT_S = 120.0  # ... or for this many seconds, whichever comes first


def add_estimate_args(parser: argparse.ArgumentParser) -> None:
    """The "estimate" flags of `add_run_args` (`sweeps/engine/estimate/prediction.py`)."""
    group = parser.add_argument_group("estimate (before the first run)")
    group.add_argument(
        "--estimate",
        action="store_true",
        help="run the first cell alone for a few epochs, without Ray, and print the sweep's expected wall "
        "time, GPU-hours and finish time on this cluster; nothing else runs, nothing is written to the "
        "experiment (with --dry-run: from a finished experiment instead, running nothing)",
    )
    group.add_argument(
        "--estimate-epochs",
        type=int,
        default=ESTIMATE_EPOCHS,
        help=f"with --estimate: epochs timed after the first one, at most {ESTIMATE_LIMIT_S:g} s in all "
        f"(default: {ESTIMATE_EPOCHS})",
    )
    group.add_argument(
        "--estimate-cells",
        choices=("first", "all"),
        default="first",
        help="with --estimate: time the first cell only, or also one epoch of each value of an axis that "
        "changes the cost of a cell (model, batch size, data set) (default: first)",
    )
    group.add_argument("--json", action="store_true", help="with --estimate: print it as one JSON document")


def check_estimate_args(args: argparse.Namespace) -> None:
    """Check the flags of `add_estimate_args`.

    Raises:
        UsageError: --estimate with --check or --resume, a non-positive --estimate-epochs, or an
            estimate flag (or --json) without --estimate.
    """
    if args.estimate_epochs < 1:
        raise UsageError(f"--estimate-epochs={args.estimate_epochs} must be a whole number >= 1")
    if not args.estimate:
        given = [f for f, on in (("--json", args.json), ("--estimate-cells all", args.estimate_cells == "all")) if on]
        if given or args.estimate_epochs != ESTIMATE_EPOCHS:
            raise UsageError(f"{(given or ['--estimate-epochs'])[0]} applies to --estimate only; give --estimate too")
        return
    if getattr(args, "check", False):
        raise UsageError("--estimate times the first cell and --check runs it to show its metrics; give one of them")
    if args.resume:
        raise UsageError(
            "--estimate predicts a new sweep; for one that runs or was stopped, `python -m analysis EXP --status` "
            "shows its ETA"
        )
