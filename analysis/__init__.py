"""Tidy tables and plots for any Ray Tune experiment (see README of the package functions)."""

from analysis.load import (
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
