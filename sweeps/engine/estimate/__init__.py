"""The cost of a sweep before it runs: `--estimate` (the first cell timed, `first_cell.py`, and the
prediction, `prediction.py`), `--dry-run`'s estimate from a finished experiment (`history_estimate.py`),
a search's estimate (`search_estimate.py`), the flags (`estimate_flags.py`) and the estimate kept for
the launch to record (`estimate_record.py`). Nothing here imports Ray, torch or pandas at import time.

The names below are what the sweep scripts and the launcher use."""

from sweeps.engine.estimate.estimate_flags import ESTIMATE_LIMIT_S, add_estimate_args, check_estimate_args
from sweeps.engine.estimate.estimate_record import record_actual, take_pending_estimate
from sweeps.engine.estimate.first_cell import time_builtin
from sweeps.engine.estimate.history_estimate import dry_run_estimate, estimate_lines, run_flags_of
from sweeps.engine.estimate.prediction import Plan, run_estimate
from sweeps.engine.estimate.search_estimate import estimate_search, search_point

__all__ = [
    "ESTIMATE_LIMIT_S",
    "Plan",
    "add_estimate_args",
    "check_estimate_args",
    "dry_run_estimate",
    "estimate_lines",
    "estimate_search",
    "record_actual",
    "run_estimate",
    "run_flags_of",
    "search_point",
    "take_pending_estimate",
    "time_builtin",
]
