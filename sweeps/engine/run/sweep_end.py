"""The end of a sweep: its table on the console and the analysis report beside its results."""

from __future__ import annotations

import threading

import ray

import analysis
from trainables.config import METRIC, MODE


def print_summary(
    experiment_dir: str,
    metric: str = METRIC,
    mode: str = MODE,
    test_metric: str = "test/acc",
    shutdown_ray: bool = False,
) -> None:
    """Print the sweep's table (laid out as the grid, mean ± std over seeds, its selection rule
    stated, the best configuration by `metric` named below) and then write the analysis report
    (paper table, plots, report.md, with the same rule) next to the results.

    With `shutdown_ray`, `ray.shutdown()` runs in a background thread while the report is
    written: both take seconds (plots; stopping Ray's processes, about 1 s each), neither needs
    the other, so the sweep exits after the slower of the two instead of their sum
    (benchmarks/startup.py).
    """
    stopper = threading.Thread(target=ray.shutdown, name="ray-shutdown") if shutdown_ray else None
    try:
        print("\n" + analysis.sweep_summary(experiment_dir, metric, mode, test_metric=test_metric), flush=True)
        if stopper:
            stopper.start()
        report = analysis.write_report(experiment_dir, metric=metric, mode=mode, test_metric=test_metric)
    except analysis.ExperimentError as e:
        print(f"no report: {e}")
        return
    finally:
        if stopper and stopper.is_alive():
            stopper.join()
    print(f"report: {report / 'report.md'}")
