"""The `raysweep.json` record of a new sweep: what `python -m analysis` and a resume read of how it started."""

from __future__ import annotations

import sys
import time

from ray.tune import TuneConfig

from sweeps.engine import grid
from trainables.experiment.objective import Objective
from trainables.experiment.redaction import redacted_argv
from trainables.experiment.release import release


def sweep_info(objective: Objective, tune_config: TuneConfig, param_space: dict, settings: dict | None) -> dict:
    """The `raysweep.json` record of a new sweep: its objective's metric, mode and test metric (None: a
    command that reports only its validation metric), its searcher's and scheduler's class names (None:
    grid, FIFO; a search's report reads them), command line, settings, start time and `total_trials`
    (num_samples x the grid's size), and raysweep's `version` and `commit`.
    `python -m analysis` reads it (`analysis/reading/tune_state.py`).
    `--notify` URLs keep their scheme and host only (`trainables/experiment/redaction.py`)."""
    return {
        "metric": objective.metric,
        "mode": objective.mode,
        "test_metric": objective.test_metric,
        "searcher": type(tune_config.search_alg).__name__ if tune_config.search_alg is not None else None,
        "scheduler": type(tune_config.scheduler).__name__ if tune_config.scheduler is not None else None,
        "argv": redacted_argv(
            sys.argv
        ),  # the script's path as launched, its flags (--notify URLs redacted): `resume_command`
        "python": sys.executable,
        "raysweep": release(),  # {"version", "commit"}: the release that launched it (`trainables.experiment.release`)
        "settings": settings or {},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "total_trials": tune_config.num_samples * grid.grid_size(param_space),
    }
