"""The end of a sweep: its table on the console and its write-up (`analysis.write_up`) in its report folder."""

from __future__ import annotations

import threading

import ray

import analysis
from trainables.experiment.objective import Objective


def print_summary(experiment_dir: str, objective: Objective, shutdown_ray: bool = False) -> None:
    """Print the sweep's table (laid out as the grid, mean ± std over seeds of the objective's test metric,
    its selection rule stated, the best configuration by its metric named below) and then write its write-up
    (paper table, plots, report.md, with the same rule) into the report folder beside the results.

    With `shutdown_ray`, `ray.shutdown()` runs in a background thread while the write-up is
    written: both take seconds (plots; stopping Ray's processes, about 1 s each), neither needs
    the other, so the sweep exits after the slower of the two instead of their sum
    (benchmarks/startup.py).
    """
    stopper = threading.Thread(target=ray.shutdown, name="ray-shutdown") if shutdown_ray else None
    try:
        print("\n" + analysis.sweep_summary(experiment_dir, objective), flush=True)
        if stopper:
            stopper.start()
        folder = analysis.write_up(experiment_dir, objective=objective)
    except analysis.ExperimentError as e:
        print(f"no report: {e}")
        return
    finally:
        if stopper and stopper.is_alive():
            stopper.join()
    print(f"report: {folder / 'report.md'}")
