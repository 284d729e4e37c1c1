"""Each tracker's records as result rows: pure functions of a file's text (a CSV logger's file,
`trainer_state.json`) or of an MLflow store (TensorBoard's: `tensorboard_reader.Runs`) (`trainables/command/trackers.py`
finds the records and reads them while the command runs)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from trainables.command.parse import parse_number

STEP_COLUMNS = ("step", "epoch", "global_step")  # a row's step when it has no --step-key column
CSV_DEFAULT = "metrics.csv"  # read by --metrics-from csv when no CSV file holds --metric


def csv_columns(path: Path) -> list[str]:
    """The header of the CSV file `path` (its first line); [] when it cannot be read."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            return next(csv.reader([f.readline()]), [])
    except OSError:
        return []


def csv_files(paths: list[Path], metric: str | None) -> list[Path]:
    """Of the CSV files `paths`, those holding `metric` as a column (a Lightning `metrics.csv`, timm's
    `summary.csv`, a `log.csv` of the script's own); with none, the `metrics.csv` files."""
    holding = [p for p in paths if metric is not None and metric in csv_columns(p)]
    return holding or [p for p in paths if p.name == CSV_DEFAULT]


def csv_rows(text: str, step_key: str) -> list[dict]:
    """The rows of a CSV logger's `metrics.csv` text (header, then one row per log call), each with
    its step (`step_key`'s column, else `step` / `epoch` / `global_step`); empty cells and text are
    left out (Lightning writes train and val rows with each other's columns empty). In a file with an
    `epoch` column, a row with an empty `epoch` is not an epoch's (Lightning's validation-step rows
    count with a `step` of their own): it is left out. A last line without its newline (being written)
    is not read."""
    text = text[: text.rfind("\n") + 1]
    rows = []
    reader = csv.DictReader(io.StringIO(text))
    for raw in reader:
        if "epoch" in (reader.fieldnames or ()) and raw.get("epoch") in (None, ""):
            continue
        row = {k: parse_number(v) for k, v in raw.items() if k is not None and v not in (None, "")}
        row = {k: v for k, v in row.items() if v is not None}
        rows += _with_step(row, step_key)
    return rows


def hf_rows(text: str, step_key: str) -> list[dict]:
    """The entries of `trainer_state.json`'s `log_history` (Hugging Face `Trainer`: training logs and
    evaluations, each with `epoch` and `step`), numbers only. Raises ValueError for a torn file."""
    history = json.loads(text).get("log_history", [])
    rows = []
    for entry in history if isinstance(history, list) else []:
        row = {k: v for k, v in entry.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        rows += _with_step(row, step_key)
    return rows


def mlflow_rows(uri: str, step_key: str) -> list[dict]:
    """One row per logged value of every metric of every run in the MLflow store `uri`, runs in
    start order: `{step_key: the value's step, name: value}` (`MlflowClient.get_metric_history`)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    rows = []
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        for name in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, name)
            rows += [{step_key: m.step, name: m.value, "_at": (m.timestamp, m.step)} for m in history]
    rows.sort(key=lambda r: r.pop("_at"))
    return rows


def _with_step(row: dict, step_key: str) -> list[dict]:
    """`[row]` with `step_key` set from the first step column it has; [] when it has none."""
    for column in (step_key, *STEP_COLUMNS):
        if isinstance(row.get(column), (int, float)):
            return [{**row, step_key: row[column]}]
    return []
