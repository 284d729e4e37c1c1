"""The regression gate: the quick benchmarks' same-run ratios against their limits (issue 50).

Run (what `make bench-quick` does after the quick benchmarks):
    python benchmarks/gate.py --startup DIR/startup.json --trainable-overhead DIR/trainable_overhead.json
    python benchmarks/gate.py --trainable-overhead slowed.json --expect-fail   # it must catch a slowed build

Ratios, not seconds: absolute times follow the machine and its load, a ratio of two things measured in
the same run much less. Each limit leaves a margin for a loaded CI machine above the goal on a quiet one:
    startup    the grid's time to its first trial / the bare Tune script's      (`startup.py`, `versus_bare`)
               limit 1.15 (goal 1.0); `startup.py` times as many pairs again before a ratio over a limit
               reaches this gate, so one draw of a loaded machine's load does not fail it
    in_trial   a cnn trial's epoch with the trial's own work (log, records, checkpoint, `tune.report`) /
               its compute alone, in the same trial (`trainable_overhead.py`, `in_trial_ratio`)
               limit 1.15 (goal 15 ms on a 0.5 s epoch, about 1.03)
    grid_wall  the grid's time to exit / the bare Tune script's, the same 12 trials (`startup.py`)
               limit 1.5
Exit status: 0 when every ratio given is within its limit, 1 when one passes it (the table says which),
2 when a figures file is missing or lacks the ratio. `--expect-fail` is the gate's own test on a
deliberately slowed build (`trainable_overhead.py --slow-report`): 0 when the gate fails as it should,
1 when it passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

LIMITS = {"startup": 1.15, "in_trial": 1.15, "grid_wall": 1.5}


@dataclasses.dataclass(frozen=True)
class Check:
    """One ratio of the gate against its limit."""

    name: str  # a key of LIMITS, with the form it was measured on: "startup (smoke)"
    ratio: float  # this build / its reference, same run
    limit: float
    detail: str  # what was measured, in seconds or ms

    @property
    def passed(self) -> bool:
        return self.ratio <= self.limit


def checks(startup: dict | None, overhead: dict | None, limits: dict = LIMITS) -> list[Check]:
    """The gate's checks of the figures given.

    Args:
        startup: `benchmarks/startup.py --json`'s document (its `versus_bare`: each form measured), or None.
        overhead: `benchmarks/trainable_overhead.py --json`'s document (its `in_trial_ratio`), or None.
    Raises:
        KeyError: a document without its ratio (an older benchmark's, or a failed run).
    """
    found, versus_bare = [], startup["versus_bare"] if startup is not None else {}
    if startup is not None and not versus_bare:
        raise KeyError("versus_bare")
    for form, figures in versus_bare.items():
        found.append(
            Check(
                f"startup ({form})",
                figures["startup_ratio"],
                limits["startup"],
                f"first trial after {figures['grid_first_trial_s']:.1f} s vs {figures['bare_first_trial_s']:.1f} s",
            )
        )
        found.append(
            Check(
                f"grid_wall ({form})",
                figures["wall_ratio"],
                limits["grid_wall"],
                f"exit after {figures['grid_exit_s']:.1f} s vs {figures['bare_exit_s']:.1f} s",
            )
        )
    if overhead is not None:
        model = next(iter(overhead["models"]))
        found.append(
            Check(
                f"in_trial ({model})",
                overhead["in_trial_ratio"],
                limits["in_trial"],
                f"{overhead['in_trial_ms']:.1f} ms per epoch beside {overhead['models'][model]['compute_ms']:.0f} ms "
                f"of compute" + (f", slowed x{overhead['slow_report']:g}" if overhead.get("slow_report") else ""),
            )
        )
    return found


def format_checks(found: list[Check]) -> str:
    """One line per check: name, ratio, limit, verdict, what was measured."""
    lines = [f"{'check':<20}{'ratio':>8}{'limit':>8}  verdict  measured"]
    for check in found:
        verdict = "ok" if check.passed else "OVER"
        lines.append(f"{check.name:<20}{check.ratio:>8.3f}{check.limit:>8.2f}  {verdict:<7}  {check.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--startup", help="benchmarks/startup.py's JSON")
    parser.add_argument("--trainable-overhead", help="benchmarks/trainable_overhead.py's JSON")
    parser.add_argument("--expect-fail", action="store_true", help="the self-test: a slowed build must fail")
    args = parser.parse_args(argv)
    if not (args.startup or args.trainable_overhead):
        parser.error("give --startup and/or --trainable-overhead")
    try:
        documents = [json.loads(Path(p).read_text()) if p else None for p in (args.startup, args.trainable_overhead)]
        found = checks(*documents)
    except (OSError, ValueError, KeyError) as e:
        print(f"gate: no figures to check ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    print(format_checks(found))
    failed = [check.name for check in found if not check.passed]
    if args.expect_fail:
        print("gate: caught the slowed build" if failed else "gate: the slowed build passed: the gate is blind")
        return 0 if failed else 1
    print(f"gate: over the limit: {', '.join(failed)}" if failed else "gate: every ratio within its limit")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
