"""Student-t confidence intervals of a mean over seeds: the one home of the t-quantile (`scipy.stats.t`).

Trainables (a trial's `val/acc_ci95` over its `--repeat` seeds) and analysis (every table's `ci95`,
`analysis.statistics.stats` re-exports it) call `t_half_width`, so the interval a search shows and the one a report
prints are the same. No torch, Ray or pandas here; scipy is imported when a width is computed.
"""

from __future__ import annotations

import math

CI_LEVEL = 0.95
"""Level of the confidence intervals (two-sided)."""


def t_half_width(std: float, n: int, level: float = CI_LEVEL) -> float:
    """Half width of the Student-t confidence interval of a mean: ``t(1 − (1 − level)/2, n − 1)
    · std / √n`` (Student 1908; quantile from ``scipy.stats.t.ppf``). NaN for n < 2 or a non-finite std."""
    if n < 2 or not math.isfinite(std):
        return math.nan
    from scipy import stats  # slow to import: only when a statistic is computed

    return float(stats.t.ppf(0.5 + level / 2, n - 1) * std / math.sqrt(n))
