"""Experiment trackers for real: MLflow with a sqlite store and W&B offline, through `monitoring_callbacks`.

The set-up checks run where the sweep runs them, before Ray starts. The logging tests run a tiny
plain `Tuner` (a two-line trainable, not a sweep) with the callbacks `monitoring_callbacks` built,
and read the runs back with the trackers' own APIs. Skipped where the `trackers` extra is missing.
"""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from sweeps.engine import run_flags
from sweeps.engine.flags import UsageError
from sweeps.engine.run import monitoring
from tests.helpers.tracker_flags import flags, needs_mlflow, needs_wandb


@pytest.fixture(autouse=True)
def fresh_tracker_checks(monkeypatch):
    """Each test checks afresh: `check_trackers` remembers the trackers it found working in this process (a sweep
    an end-to-end test ran in-process on this pytest worker had W&B offline working)."""
    monkeypatch.setattr(monitoring, "_WORKING", set())


def test_mlflow_uri_alone_means_a_sqlite_database():
    parser = argparse.ArgumentParser()
    run_flags.add_run_args(parser, name="trackers", grid=False)
    assert parser.parse_args(["--mlflow-uri"]).mlflow_uri == "sqlite:///mlflow.db"
    assert parser.parse_args([]).mlflow_uri is None


@pytest.mark.parametrize(
    "module,kwargs,match",
    [
        (
            "mlflow",
            {"mlflow_uri": "sqlite:///x.db"},
            r"--mlflow-uri='sqlite:///x.db' needs the mlflow package: pip install 'raysweep\[trackers\]'",
        ),
        ("wandb", {"wandb_project": "noise"}, r"--wandb-project='noise' needs the wandb package"),
    ],
)
def test_a_missing_tracker_package_is_one_line(module, kwargs, match, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(UsageError, match=match):
        monitoring.monitoring_callbacks(**flags(**kwargs))


@needs_mlflow
@pytest.mark.parametrize(
    "uri,match",
    [
        (
            "file:./mlruns",
            r"--mlflow-uri='file:./mlruns': MLflow cannot use this tracking store \(.*filesystem tracking backend",
        ),
        (
            "http://127.0.0.1:9",
            r"--mlflow-uri='http://127.0.0.1:9': MLflow cannot use this tracking store \(API request",
        ),
        ("bogus://x", r"--mlflow-uri='bogus://x': MLflow cannot use this tracking store"),
    ],
)
def test_an_mlflow_store_that_cannot_work_is_one_line(uri, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(UsageError, match=match):
        monitoring.monitoring_callbacks(**flags(mlflow_uri=uri))
    assert not (tmp_path / "mlruns").exists()


@needs_wandb
def test_wandb_online_without_a_login_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    with pytest.raises(UsageError, match=r"--wandb-project='noise': no W&B login here; .*WANDB_MODE=offline"):
        monitoring.monitoring_callbacks(**flags(wandb_project="noise"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert type(monitoring.monitoring_callbacks(**flags(wandb_project="noise"))[-1]).__name__ == "WandbLoggerCallback"
