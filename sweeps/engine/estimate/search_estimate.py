"""`--estimate` of a search (`lr_search.py`, `pbt.py`): its `--num-samples` trials at the middle of each
searched range (`search_point`), timed and predicted as a grid's (`estimate.run_estimate`)."""

from __future__ import annotations

import dataclasses
import time

from sweeps.engine.estimate.estimate_flags import ESTIMATE_LIMIT_S
from sweeps.engine.estimate.prediction import Plan, run_estimate


def estimate_search(args, searched: dict, choices: dict | None = None, upper_bound: str | None = None, note="") -> int:
    """`--estimate` of a search (`lr_search.py`, `pbt.py`): `--num-samples` trials of the fixed options
    and `searched` (the middle of each searched range), each `choices` axis ({key: values}, the
    searcher's categorical choices) taken in turn, so that `--estimate-cells all` times each value.

    Args:
        args: the search's checked flags (`fixed`, `num_samples`, `repeat`, `template`: a command after --).
        upper_bound: why trials may end sooner (ASHA); note: what PBT's exploits add.
    Returns: as `run_estimate`.
    """
    from sweeps.engine.estimate.first_cell import time_builtin

    first = {**args.fixed, **searched}
    choices = choices or {}
    cells = [first | {k: v[i % len(v)] for k, v in choices.items()} for i in range(args.num_samples)]
    command = getattr(args, "template", None)  # lr_search.py: a command after --
    kind = "command" if command else "builtin"
    plan = Plan(cells, kind, upper_bound=upper_bound, note=note, template=tuple(command or ()))
    if command:
        from sweeps.engine.command_sweep.command_check import time_command

        return run_estimate(
            args,
            plan,
            lambda epochs, limit_s, gpus: time_command(args, cells[0], epochs, limit_s, gpus),
            lambda cell, gpus: time_command(args, cell, 0, ESTIMATE_LIMIT_S, gpus),
        )
    from trainables.config import parse_config
    from trainables.data import load_data

    loading = time.monotonic()
    data = load_data(parse_config(cells[0]))
    plan = dataclasses.replace(plan, repeat=args.repeat)
    return run_estimate(
        args,
        plan,
        lambda epochs, limit_s, gpus: time_builtin(cells[0], data, epochs, limit_s, args.cpus_per_trial),
        lambda cell, gpus: time_builtin(cell, data, 0, ESTIMATE_LIMIT_S, args.cpus_per_trial),
        measured_s=time.monotonic() - loading,
    )


def middle(bounds: tuple[float, float]) -> float:
    """The middle of a log-scale range (its geometric mean)."""
    return (bounds[0] * bounds[1]) ** 0.5


def search_point(args) -> tuple[dict, dict]:
    """What `--estimate` trains: (the middle of each searched range, {name: choices} of the categorical
    dimensions, taken in turn by its cells); the built-in trainable's dimensions, or a command's `space`."""
    if not args.template:
        ranges = ("lr", "weight_decay", "gce_q", "sce_alpha", "sce_beta")
        return {k: middle(getattr(args, f"{k}_range")) for k in ranges}, {
            "batch_size": args.batch_sizes,
            "loss": args.losses,
        }
    searched, choices = {}, {}
    for name, dimension in args.space.items():
        if dimension.kind == "choice":
            choices[name] = list(dimension.values)
            continue
        low, high = dimension.values
        value = middle((low, high)) if dimension.kind == "loguniform" else (low + high) / 2
        searched[name] = round(value) if dimension.kind == "int" else value
    return searched, choices
