"""The stopping rule of `--seeds auto` (`SeedRule`) and the words it is set with: light (no numpy or scipy), so
the command lines build their flags from it before anything heavy loads. The procedure is
`analysis/statistics/seeds.py`'s; the test of one pair at one look `analysis/statistics/pair_test.py`'s."""

from __future__ import annotations

from dataclasses import dataclass

DECISIONS = ("best", "better", "worse", "equivalent", "undecided")
SPENDING = ("pocock", "obf", "uniform")
BOUNDARIES = ("hp", "obf", "pocock", "union")
FAMILIES = ("cell", "sweep")
PAIR_TESTS = ("combined", "paired", "unpaired")
PAIRS = ("best", "all")

_TESTS = {
    "combined": ("the larger z of the paired t-test (ttest_rel) and Welch's t-test (ttest_ind, from 5 seeds on)"),
    "paired": "paired t-tests (ttest_rel)",
    "unpaired": "Welch's t-tests (ttest_ind)",
}


@dataclass(frozen=True)
class SeedRule:
    """The stopping rule of `--seeds auto`."""

    alpha: float = 0.05  # family-wise error rate over each family (`family`), all looks included
    min_seeds: int = 3  # first look: every method of a cell gets this many seeds before any decision
    max_seeds: int = 10  # the cap: an undecided comparison stops here
    min_effect: float | None = None  # equivalence margin D in the metric's units (None: no equivalence claims)
    mode: str = "max"  # "max": higher metric is better; "min": lower
    boundary: str = "hp"  # exact Haybittle-Peto-type (hp), O'Brien-Fleming (obf) or Pocock boundary, or union bound
    family: str = "cell"  # Holm over the comparisons of one cell (cell) or of the whole sweep (sweep)
    spending: str = "obf"  # with boundary "union": the alpha spending function, pocock, obf or uniform
    pair_test: str = "combined"  # the test of a pair at a look: combined (default), paired or unpaired
    pairs: str = "best"  # comparisons that must be decided before a cell stops: with its best (best), or all
    futility: float = 0.05  # stop a comparison whose conditional power falls below this (0: never; non-binding)

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha={self.alpha} must be in (0, 1)")
        if not 2 <= self.min_seeds <= self.max_seeds:
            raise ValueError(
                f"min_seeds={self.min_seeds}, max_seeds={self.max_seeds}: need 2 <= min_seeds <= max_seeds"
            )
        if self.min_effect is not None and not self.min_effect > 0:
            raise ValueError(f"min_effect={self.min_effect} must be > 0 (in the metric's units)")
        if self.mode not in ("max", "min") or self.spending not in SPENDING:
            raise ValueError(f"mode={self.mode!r} must be max or min; spending={self.spending!r} one of {SPENDING}")
        if self.boundary not in BOUNDARIES or self.family not in FAMILIES:
            raise ValueError(
                f"boundary={self.boundary!r} must be one of {BOUNDARIES}; family={self.family!r} one of {FAMILIES}"
            )
        if self.pair_test not in PAIR_TESTS or self.pairs not in PAIRS:
            raise ValueError(f"pair_test={self.pair_test!r} must be one of {PAIR_TESTS}; pairs={self.pairs!r} {PAIRS}")
        if not 0 <= self.futility < 1:
            raise ValueError(f"futility={self.futility} must be in [0, 1) (a conditional power; 0 turns it off)")
        if self.boundary == "union" and self.pair_test != "paired":
            raise ValueError(f"boundary 'union' is the paired test's union bound, not {self.pair_test!r}'s")

    def describe(self, methods: int | None = None) -> str:
        """One sentence stating the stopping rule and the family of its claims, for under a table.

        Args:
            methods: the methods compared in a cell, when known: the sentence then counts the pairs.
        """
        margin = f"; equivalent: TOST within ±{self.min_effect:g} on the paired differences" if self.min_effect else ""
        if self.boundary == "union":
            looks = f"{self.spending} alpha spending (Lan & DeMets 1983) combined by the union bound"
        else:
            from analysis.statistics import sequential  # numpy: loaded for the sentence only

            b = sequential.boundary(self.alpha, self.boundary, self.min_seeds, self.max_seeds, self.pair_test)
            shape = sequential.SHAPE_WORDS[self.boundary]
            looks = (
                f"exact boundary z ≥ {shape}, c = {b['c']:.3f} from {b['paths']:,} simulated null paths "
                f"(Monte-Carlo s.e. {b['mc_se']:.4f})"
            )
        if methods:
            pairs = methods * (methods - 1) // 2
            cell = f"the {pairs} pair{'s' if pairs > 1 else ''} of methods of each cell"
        else:
            cell = "every pair of methods of each cell"
        family = cell if self.family == "cell" else "every pair of methods of every cell of the sweep"
        stop = "each method's comparison with its cell's best" if self.pairs == "best" else "every pair of a cell"
        reach = (
            f", or out of reach (conditional power below {self.futility:g})"
            if self.futility and not self.min_effect
            else ""
        )
        return (
            f"Seeds by significance: {_TESTS[self.pair_test]} between every pair of methods of a cell, looked at "
            f"after each seed from {self.min_seeds} to {self.max_seeds}, {looks}; Holm-corrected over {family} "
            f"(family-wise alpha {self.alpha:g}){margin}; seeds run until {stop} is decided{reach}; n = seeds "
            f"run, decision against the cell's best (undecided: no claim), > the methods it is significantly "
            f"better than."
        )
