"""The stopping rule of `--seeds auto` (`SeedRule`) and the words it is set with: light (no numpy or scipy), so
the command lines build their flags from it before anything heavy loads. The procedure is
`analysis/statistics/seeds.py`'s."""

from __future__ import annotations

from dataclasses import dataclass

DECISIONS = ("best", "better", "worse", "equivalent", "undecided")
SPENDING = ("pocock", "obf", "uniform")
BOUNDARIES = ("obf", "pocock", "union")
FAMILIES = ("cell", "sweep")


@dataclass(frozen=True)
class SeedRule:
    """The stopping rule of `--seeds auto`."""

    alpha: float = 0.05  # family-wise error rate over each family (`family`), all looks included
    min_seeds: int = 3  # first look: every method of a cell gets this many seeds before any decision
    max_seeds: int = 10  # the cap: an undecided comparison stops here
    min_effect: float | None = None  # equivalence margin D in the metric's units (None: no equivalence claims)
    mode: str = "max"  # "max": higher metric is better; "min": lower
    boundary: str = "obf"  # exact O'Brien-Fleming (obf) or Pocock boundary, or the union bound (union)
    family: str = "cell"  # Holm over the comparisons of one cell (cell) or of the whole sweep (sweep)
    spending: str = "obf"  # with boundary "union": the alpha spending function, pocock, obf or uniform

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

    def describe(self) -> str:
        """One sentence stating the stopping rule and the family of its claims, for under a table."""
        margin = f"; equivalent: TOST within ±{self.min_effect:g}" if self.min_effect else ""
        if self.boundary == "union":
            looks = f"{self.spending} alpha spending (Lan & DeMets 1983) combined by the union bound"
        else:
            from analysis.statistics import sequential  # numpy: loaded for the sentence only

            b = sequential.boundary(self.alpha, self.boundary, self.min_seeds, self.max_seeds)
            shape = "c·sqrt(N/n), O'Brien-Fleming" if self.boundary == "obf" else "c, Pocock"
            looks = (
                f"exact boundary z ≥ {shape}, c = {b['c']:.3f} from {b['paths']:,} simulated null paths "
                f"(Monte-Carlo s.e. {b['mc_se']:.4f})"
            )
        family = "the comparisons of each cell" if self.family == "cell" else "all comparisons of the sweep"
        return (
            f"Seeds by significance: paired t-tests against each cell's best method, looked at after each seed "
            f"from {self.min_seeds} to {self.max_seeds}, {looks}; Holm-corrected over {family} (family-wise "
            f"alpha {self.alpha:g}){margin}; n = seeds run, undecided = no claim at the cap."
        )
