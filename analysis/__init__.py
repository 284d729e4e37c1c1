"""Tidy DataFrames, best-run tables and plots for any Ray Tune experiment.

    trials, history = load_experiment("runs/noise_grid")
    table = best_runs(trials, "val/acc", "max")      # n, mean, std, 95 % CI over seeds
    fig = plot_metric_vs_noise_rate(trials, "val/acc")
    write_report("runs/noise_grid")                  # what `python -m analysis` does
"""

from analysis.load import (
    SEED_KEY,
    ExperimentError,
    config_column,
    guess_mode,
    latest_experiment,
    load_experiment,
    load_history,
    load_trials,
    metric_column,
    reported_metrics,
    varying_config_columns,
)
from analysis.plots import (
    plot_heatmap,
    plot_learning_curves,
    plot_metric_vs_noise_rate,
    plot_timeline,
    save_figure,
)
from analysis.report import resolve_metric, write_report
from analysis.tables import best_runs, failed, format_table, write_table
from analysis.timeline import sweep_efficiency, timeline

__all__ = [
    "SEED_KEY", "ExperimentError", "best_runs", "config_column", "failed", "format_table",
    "guess_mode", "latest_experiment", "load_experiment", "load_history", "load_trials",
    "metric_column", "plot_heatmap", "plot_learning_curves", "plot_metric_vs_noise_rate",
    "plot_timeline", "reported_metrics", "resolve_metric", "save_figure", "sweep_efficiency",
    "timeline", "varying_config_columns", "write_report", "write_table",
]
