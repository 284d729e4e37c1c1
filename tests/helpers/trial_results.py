"""What a sweep's trials reported, read from the files Tune writes (`result.json`: one JSON object per report)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def results_of(trial_dir: Path) -> list[dict]:
    """A trial's reported rows, oldest first."""
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line.strip()]


def history(trial: Path) -> pd.DataFrame:
    """A trial's reported rows (Tune's result.json, one JSON object per report)."""
    return pd.DataFrame([json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()])


def trials(experiment: Path) -> dict[str, Path]:
    """Trial folder name -> folder, for the folders holding a result.json."""
    return {p.name: p for p in experiment.iterdir() if (p / "result.json").exists()}
