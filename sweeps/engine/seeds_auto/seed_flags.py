"""The flags of `--seeds auto` (seeds by significance) and their checks; imports no Ray, torch or pandas."""

from __future__ import annotations

import argparse

from analysis.statistics.seed_rule import BOUNDARIES, FAMILIES, PAIR_TESTS, PAIRS, SeedRule
from sweeps.engine.flags import UsageError

_CHOICES = ("family", "boundary", "pair_test", "pairs", "futility")
"""The rule's settings given by flags as they are (unset: `SeedRule`'s default)."""


def add_seed_args(parser: argparse.ArgumentParser, compare_default: str | None) -> None:
    """The flags that shape `--seeds auto`; they are refused without it."""
    group = parser.add_argument_group("seeds by significance (--seeds auto; docs/seeds-auto.md)")
    group.add_argument(
        "--max-seeds", type=int, default=None, help=f"the cap on seeds per method (default: {SeedRule.max_seeds})"
    )
    group.add_argument(
        "--min-seeds", type=int, default=None, help=f"seeds before the first look (default: {SeedRule.min_seeds})"
    )
    group.add_argument(
        "--alpha", type=float, default=None, help=f"family-wise error of each family (default: {SeedRule.alpha:g})"
    )
    group.add_argument(
        "--family",
        choices=FAMILIES,
        default=None,
        help="Holm over the comparisons of one cell (cell, the default: a table's claims per cell) or of the sweep",
    )
    group.add_argument(
        "--boundary",
        choices=BOUNDARIES,
        default=None,
        help="exact Haybittle-Peto-type (hp, the default), O'Brien-Fleming or Pocock boundary over the looks, "
        "or the paired test's union bound",
    )
    group.add_argument(
        "--pair-test",
        choices=PAIR_TESTS,
        default=None,
        help="the test of two methods: combined (the default: the stronger of the paired and the two-sample "
        "t-test, valid when a seed never helps one method while hurting the other), paired, or unpaired",
    )
    group.add_argument(
        "--pairs",
        choices=PAIRS,
        default=None,
        help="which comparisons get seeds until decided: each method with its cell's best (best, the default) "
        "or every pair (all); every significant pair is reported either way",
    )
    group.add_argument(
        "--futility",
        type=float,
        default=None,
        metavar="CP",
        help="stop a comparison undecided when its conditional power falls below CP "
        f"(default {SeedRule.futility:g}; 0: never)",
    )
    group.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="equivalence margin in the metric's units: methods within it can be declared equivalent (TOST)",
    )
    group.add_argument(
        "--compare",
        default=compare_default,
        metavar="AXIS",
        help="the axis whose values are the compared methods"
        + (f" (default: {compare_default})" if compare_default else " (needed with --seeds auto)"),
    )


def seed_count(args: argparse.Namespace) -> int:
    """Seeds per configuration of the grid: `--seeds N`; with `--seeds auto`, its cap (`--max-seeds`)."""
    return (args.max_seeds or SeedRule.max_seeds) if args.seeds == "auto" else args.seeds


def seed_rule_settings(args: argparse.Namespace, axes: dict) -> dict | None:
    """Check the `--seeds auto` flags against the grid's `axes` (name -> values); None without auto.

    Returns:
        keyword arguments of `analysis.statistics.seed_rule.SeedRule` (alpha, min_seeds, max_seeds, min_effect,
        family, boundary, pair_test, pairs, futility; unset ones take `SeedRule`'s defaults).
    Raises:
        UsageError: a flag of auto given without it, a value out of range, or --compare not an
            axis of two or more values.
    """
    given = [f for f in ("max_seeds", "min_seeds", "alpha", "min_effect", *_CHOICES) if getattr(args, f) is not None]
    if args.seeds != "auto":
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} applies to --seeds auto only")
        return None
    rule = {name: getattr(args, name) or getattr(SeedRule, name) for name in ("alpha", "min_seeds", "max_seeds")}
    if not 2 <= rule["min_seeds"] <= rule["max_seeds"]:
        raise UsageError(f"--min-seeds={rule['min_seeds']} --max-seeds={rule['max_seeds']}: need 2 <= min <= max")
    if not 0 < rule["alpha"] < 1:
        raise UsageError(f"--alpha={args.alpha} must be in (0, 1)")
    if args.min_effect is not None and not args.min_effect > 0:
        raise UsageError(f"--min-effect={args.min_effect} must be > 0 (in the metric's units)")
    if not args.compare or len(axes.get(args.compare, [])) < 2:
        found = ", ".join(str(k) for k, v in axes.items() if len(v) > 1) or "none"
        raise UsageError(f"--compare={args.compare} must name an axis of 2 or more values (axes: {found})")
    if args.futility is not None and not 0 <= args.futility < 1:
        raise UsageError(f"--futility={args.futility} must be in [0, 1) (a conditional power; 0: never stop early)")
    if args.boundary == "union" and (args.pair_test or SeedRule.pair_test) != "paired":
        raise UsageError("--boundary union is the paired test's union bound: add --pair-test paired")
    chosen = {f: getattr(args, f) for f in _CHOICES if getattr(args, f) is not None}
    return rule | {"min_effect": args.min_effect} | chosen
