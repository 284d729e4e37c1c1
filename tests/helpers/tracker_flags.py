"""Experiment trackers in tests: `monitoring_callbacks`' keyword arguments as the run flags make them, and skip
marks for where the `trackers` extra (mlflow, wandb) is missing."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from sweeps.engine import run_flags

HAS_MLFLOW = importlib.util.find_spec("mlflow") is not None
HAS_WANDB = importlib.util.find_spec("wandb") is not None
needs_mlflow = pytest.mark.skipif(not HAS_MLFLOW, reason="needs the trackers extra (mlflow)")
needs_wandb = pytest.mark.skipif(not HAS_WANDB, reason="needs the trackers extra (wandb)")


def flags(**values) -> dict:
    """`monitoring_callbacks`' keyword arguments: the run flags' defaults, with `values`."""
    parser = argparse.ArgumentParser()
    run_flags.add_run_args(parser, name="trackers", grid=False)
    options = run_flags.run_options(parser.parse_args([]))
    fields = {
        "name": "trackers",
        "progress_every": options.progress_every,
        "quiet": options.quiet,
        "mlflow_uri": options.mlflow_uri,
        "wandb_project": options.wandb_project,
    }
    return fields | values
