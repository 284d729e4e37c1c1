"""Results from the experiment trackers a command already logs to: W&B, MLflow, CSV loggers, Hugging Face.

`--metrics-from wandb|mlflow|csv|hf` reads one; the default `output` reads any of them that a trial
which prints no metric leaves under its `{trial_dir}` (`TrackerResults(auto=True)`). Each reader is a
pure function of a file or store returning rows `{step_key: step, metric: value, ...}`:

| source | read with | found |
| wandb  | `trainables/command/wandb_reader.py` | `{trial_dir}/wandb/*run-*/run-*.wandb` (WANDB_DIR) |
| mlflow | `MlflowClient().get_metric_history` | `{trial_dir}/mlflow.db` (MLFLOW_TRACKING_URI) |
| csv    | `csv.DictReader` (Lightning's / Keras' `CSVLogger`) | `metrics.csv` up to 4 folders down |
| hf     | `json` (`trainer_state.json`'s `log_history`) | `trainer_state.json` up to 3 folders down |
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

from trainables.command.parse import StepContext, parse_number
from trainables.command.wandb_reader import RUN_GLOB, read_history
from trainables.experiment.objective import Objective
from trainables.experiment.records import MLFLOW_STORE

TRACKERS = ("wandb", "mlflow", "csv", "hf")  # in the order auto-detection tries them
READ_EVERY_S = 2.0  # how often the files and stores are read while the command runs
STEP_COLUMNS = ("step", "epoch", "global_step")  # a row's step when it has no --step-key column
_DEPTHS = {"csv": ("metrics.csv", 4), "hf": ("trainer_state.json", 3)}


def sources_of(metrics_from: str) -> tuple:
    """The trackers `--metrics-from` reads: that one, or all of them for any other value (`output`
    auto-detects them; a stream's error lists what they held)."""
    return (metrics_from,) if metrics_from in TRACKERS else TRACKERS


def tracker_env(env: dict, work_dir: Path, metrics_from: str) -> list[str]:
    """Point the trackers `metrics_from` may read at the trial's folder, where `env` leaves them unset.

    Sets (in `env`) `WANDB_MODE=offline` (not with a `WANDB_API_KEY`: online runs write the same log)
    and `WANDB_DIR={trial_dir}` (W&B's run folder then is `{trial_dir}/wandb/offline-run-*`, which
    `wandb sync` uploads later), and
    `MLFLOW_TRACKING_URI=sqlite:///{trial_dir}/mlflow.db`, for `output` and the matching source.
    Returns:
        `NAME=value` for each variable set, to be said once in the trial's log.
    """
    wanted = {
        "wandb": {"WANDB_MODE": "offline", "WANDB_DIR": str(work_dir)},
        "mlflow": {"MLFLOW_TRACKING_URI": f"sqlite:///{work_dir / MLFLOW_STORE}"},
    }
    if env.get("WANDB_API_KEY"):  # logged in for online runs: they also write their log under WANDB_DIR
        del wanted["wandb"]["WANDB_MODE"]
    set_now = []
    for source, values in wanted.items():
        for name, value in values.items() if metrics_from in ("output", source) else ():
            if not env.get(name):
                env[name] = value
                set_now.append(f"{name}={value}")
    return set_now


def find_records(work_dir: Path, source: str, since: float | None = None) -> list[Path]:
    """The files of `source` under `work_dir`, oldest first; with `since` (epoch seconds) only those
    written since then (not a file of the code copy, nor one an earlier attempt left)."""
    if source == "wandb":
        paths = list(work_dir.glob(RUN_GLOB))
    elif source == "mlflow":
        paths = [work_dir / MLFLOW_STORE] if (work_dir / MLFLOW_STORE).exists() else []
    else:
        paths = _named_files(work_dir, *_DEPTHS[source])
    stamped = []
    for path in paths:
        try:
            stamped.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [p for mtime, p in sorted(stamped) if since is None or mtime >= since]


def _named_files(folder: Path, name: str, depth: int) -> list[Path]:
    """Files called `name` at most `depth` folders below `folder`; links to folders (the code copy's
    data links) and hidden folders are not entered, so a large dataset costs nothing."""
    found, top = [], len(folder.parts)
    for root, dirs, files in os.walk(folder):
        found += [Path(root) / name] if name in files else []
        dirs[:] = [] if len(Path(root).parts) - top >= depth else [d for d in dirs if not d.startswith(".")]
    return found


def csv_rows(text: str, step_key: str) -> list[dict]:
    """The rows of a CSV logger's `metrics.csv` text (header, then one row per log call), each with
    its step (`step_key`'s column, else `step` / `epoch` / `global_step`); empty cells and text are
    left out (Lightning writes train and val rows with each other's columns empty). A last line
    without its newline (being written) is not read."""
    text = text[: text.rfind("\n") + 1]
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
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


class TrackerResults:
    """Results from the tracker records a command writes under its `{trial_dir}`, read while it runs.

    Every `READ_EVERY_S` the records are read again; rows not seen before (W&B: records past the
    byte offset read; CSV, Hugging Face, MLflow: rows past the count read, their logs only grow) are
    grouped per step by a `StepContext`: a step is complete when a later step appears, or at `close`
    (not as soon as it holds the objective's metrics: MLflow and Lightning write a step's keys in several rows).
    Of `sources`, the first that holds a row is read from then on (`source`). With `auto` (the
    default `--metrics-from output`) nothing is read once the command printed a result first.
    """

    def __init__(
        self,
        work_dir: Path,
        step_key: str,
        sources=TRACKERS,
        objective: Objective | None = None,
        since=None,
        auto=False,
    ):
        """Args: since: only records written since then (epoch seconds; None: all, for a restart's
        recovery); objective: the sweep's (its error names the metric when no row held it)."""
        self.work_dir, self.step_key, self.sources, self.since, self.auto = work_dir, step_key, sources, since, auto
        self.context = StepContext(step_key)  # no objective: a step's keys may come in rows read apart
        self.metric = objective.metric if objective else None
        self.source: str | None = None  # the source read, once one held a row
        self.seen: dict = {}  # file or store -> rows read (W&B: bytes)
        self.held: dict = {}  # metric names in the rows read, in order of appearance
        self.silenced = False  # auto: the command printed a result first
        self.next_read = 0.0

    def poll(self, printed=()) -> list[dict]:
        """Results completed by the rows written since the last read (at most every `READ_EVERY_S`);
        `printed`: the results read from the command's own output meanwhile."""
        if self.auto and printed and self.source is None:
            self.silenced = True
        if self.silenced or time.monotonic() < self.next_read:
            return []
        self.next_read = time.monotonic() + READ_EVERY_S
        for source in [self.source] if self.source else self.sources:
            rows = self._read(source)
            if rows:
                if self.source is None and self.since is not None:  # read live (not a restart's recovery)
                    print(f"metrics from {source} records under {self.work_dir}", flush=True)
                self.source = source
                self.held.update(dict.fromkeys(k for row in rows for k in row if k != self.step_key))
                return [r for row in sorted(rows, key=lambda r: r[self.step_key]) for r in self.context.add(row)]
        return []

    def close(self) -> list[dict]:
        """The rows written since the last read and the last step's result."""
        self.next_read = 0.0
        return [] if self.silenced else self.poll() + self.context.close()

    def _read(self, source: str) -> list[dict]:
        """The rows of `source` not read before; [] while a record cannot be read yet."""
        key, rows = self.step_key, []
        paths = find_records(self.work_dir, source, self.since)
        for path in paths[-1:] if source == "hf" else paths:  # each trainer_state.json holds the whole history
            if source == "wandb":
                found, self.seen[path] = read_history(path, self.seen.get(path, 0))
                rows += [{**row["metrics"], key: row["step"]} for row in found]
                continue
            try:
                if source == "mlflow":
                    found = mlflow_rows(f"sqlite:///{path}", key) if _mlflow_has_runs(path) else []
                else:
                    found = (csv_rows if source == "csv" else hf_rows)(path.read_text(), key)
            except (OSError, ValueError):
                continue
            path = "hf" if source == "hf" else path  # the newest one counts
            rows += found[self.seen.get(path, 0) :]
            self.seen[path] = len(found)
        return rows


def _mlflow_has_runs(path: Path) -> bool:
    """Whether the MLflow SQLite store `path` holds a run yet, read only (the script may still be
    creating its tables: `MlflowClient` would create them too)."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
            return db.execute("SELECT count(*) FROM runs").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def describe_sources(work_dir: Path, step_key: str, sources=TRACKERS) -> str:
    """One clause for an error: the metric names each tracker record under `work_dir` held, e.g.
    `wandb held val/acc, train/loss; csv held nothing` ('' when there is no record at all)."""
    parts = []
    for source in sources:
        if find_records(work_dir, source):
            reader = TrackerResults(work_dir, step_key, (source,))
            reader.close()
            keys = list(reader.held)
            parts.append(f"{source} held {', '.join(keys[:12]) + (' ...' if len(keys) > 12 else '') or 'no row'}")
    return "; ".join(parts)
