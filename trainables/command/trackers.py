"""Results from the experiment trackers a command already logs to: W&B, MLflow, CSV files, Hugging Face, TensorBoard.

`--metrics-from wandb|mlflow|csv|hf|tensorboard` reads one; the default `output` reads the one whose
records under `{trial_dir}` hold `--metric` when the command's printed lines do not
(`TrackerResults(auto=True)`). Each reader is a pure function of a file or store returning rows
`{step_key: step, metric: value, ...}`:

| source | read with | found |
| wandb  | `trainables/command/wandb_reader.py` | `{trial_dir}/wandb/*run-*/run-*.wandb` (WANDB_DIR) |
| mlflow | `MlflowClient().get_metric_history` | `{trial_dir}/mlflow.db` (MLFLOW_TRACKING_URI) |
| csv    | `csv.DictReader` (Lightning's, Keras' `CSVLogger`; timm) | a `*.csv` with a `--metric` column |
|        |                     | (else `metrics.csv`) at any depth (Hydra's `logs/train/runs/<stamp>/csv/version_0/`) |
| hf     | `json` (`trainer_state.json`'s `log_history`) | `trainer_state.json` up to 3 folders down |
| tensorboard | `trainables/command/tensorboard_reader.py` | `*tfevents*` files at any depth |

Only files written since the command started are read (`since`), so a file of the code copy is never one.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from trainables.command.key_sources import file_origin
from trainables.command.parse import StepContext
from trainables.command.tensorboard_reader import Runs
from trainables.command.tracker_rows import STEP_COLUMNS, csv_files, csv_rows, hf_rows, mlflow_rows
from trainables.command.wandb_reader import RUN_GLOB, read_history
from trainables.experiment.objective import Objective
from trainables.experiment.records import MLFLOW_STORE

TRACKERS = ("wandb", "mlflow", "csv", "hf", "tensorboard")  # in the order auto-detection tries them
READ_EVERY_S = 2.0  # how often the files and stores are read while the command runs
_DEPTHS = {"csv": ("*.csv", None), "hf": ("trainer_state.json", 3), "tensorboard": ("*tfevents*", None)}  # None: any


def sources_of(metrics_from: str) -> tuple:
    """The trackers `--metrics-from` reads: that one, or all of them for any other value (`output`
    auto-detects them; a stream's error lists what they held)."""
    return (metrics_from,) if metrics_from in TRACKERS else TRACKERS


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


def _named_files(folder: Path, pattern: str, depth: int | None) -> list[Path]:
    """Files matching `pattern` (`metrics.csv`, `*.csv`) at most `depth` folders below `folder` (None: at
    any depth, Hydra's `logs/<task>/runs/<stamp>/csv/version_0/` is 6 down); links to
    folders (the code copy's data links) and hidden folders are not entered, so a large dataset costs nothing."""
    found, top = [], len(folder.parts)
    for root, dirs, files in os.walk(folder):
        found += [Path(root) / name for name in files if Path(name).match(pattern)]
        deep = depth is not None and len(Path(root).parts) - top >= depth
        dirs[:] = [] if deep else [d for d in dirs if not d.startswith(".")]
    return found


class TrackerResults:
    """Results from the tracker records a command writes under its `{trial_dir}`, read while it runs.

    Every `READ_EVERY_S` the records are read again; rows not seen before (W&B: records past the
    byte offset read; TensorBoard: events past those read; CSV, Hugging Face, MLflow: rows past the
    count read, their logs only grow) are grouped per step by a `StepContext`: a step is complete when
    a later step appears, or at `close` (not as soon as it holds the objective's metrics: MLflow and
    Lightning write a step's keys in several rows).

    Which source is read (`source`): of several, the first whose rows hold `--metric` (at `close`,
    failing that, the first holding any row); of one, that one. With `auto` (the default
    `--metrics-from output`) a tracker whose rows hold `--metric` wins over the command's printed rows
    (`poll(printed)`: Rich frames, rounded values): printed rows are held back until a read of the
    records after them finds none holding it (at most `2 * READ_EVERY_S`), then reported as they come;
    a tracker found holding it later still takes over from the next step on (said in the trial's log).
    Once a tracker is read, the printed `--metric` is only compared with it, and `close` says where
    they disagree (`disagreed`). A last step whose keys no earlier step had (Lightning's `test_loss`,
    logged at `max_epochs` after the fit) is an end-of-run result: it joins the last epoch's row, which
    is held back until a later step holding an epoch's keys starts, or `close` (one row per epoch).
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
        recovery), and none that is already there, unchanged (a copy of the code's own files);
        objective: the sweep's (its error names the metric when no row held it)."""
        self.work_dir, self.step_key, self.sources, self.since, self.auto = work_dir, step_key, sources, since, auto
        self.context = StepContext(step_key)  # no objective: a step's keys may come in rows read apart
        self.objective, self.metric = objective, objective.metric if objective else None
        self.source: str | None = None  # the source read, once chosen
        self.printed: bool | None = None if auto else False  # auto: the printed rows are read (True) or not
        self.waiting: list = []  # printed rows held back until a read of the records finds no tracker holding --metric
        self.ripe = 0  # how many of `waiting` were there at the last read of the records
        self.unread: dict = {s: [] for s in sources}  # rows read from a source not chosen yet
        self.files: dict = {}  # source -> the files its rows came from, in order
        self.origins_of: dict = {}  # source -> {metric: where it was read (`key_sources`)}
        self.seen: dict = {}  # file or store -> rows read (W&B: bytes)
        self.held: dict = {}  # metric names in the rows of the source read, in order of appearance
        self.values: dict = {}  # step -> --metric as printed
        self.recorded: dict = {}  # step -> --metric as the tracker read holds it
        self.printed_until = None  # the last printed step reported before a tracker took over
        self.disagreed: list = []  # (step, printed, recorded) where the printed --metric differs from the tracker's
        self.newest: dict | None = None  # the newest complete step's row, held until a later epoch starts
        self.returned: dict = {}  # metric names of the rows returned; `last_step`: their last step
        self.last_step = None
        self.tensorboard = Runs(step_key, (objective.step_metrics if objective else ()))  # its run folders
        self.logged_step: set = set()  # W&B run logs holding `step_key` as a metric of their own
        self.closing = False
        self.announce = since is not None  # say which files are read (a live read, not a restart's recovery)
        self.existing = {} if since is None else {p: _stamp(p) for s in sources for p in find_records(work_dir, s)}
        self.next_read = 0.0

    def poll(self, printed=()) -> list[dict]:
        """The rows to report now: `printed` (the results read from the command's own output meanwhile)
        when those are read (see the class), and the tracker rows completed since the last read (at
        most every `READ_EVERY_S`)."""
        out = self._printed_rows(list(printed))
        if time.monotonic() < self.next_read:
            return out
        self.next_read = time.monotonic() + READ_EVERY_S
        if self.source is None:
            return out + self._choose()
        return out + self._step_rows(self._read(self.source))

    def close(self, printed=()) -> list[dict]:
        """`poll`'s rows, the rows written since the last read and the last step's result."""
        self.next_read, self.closing = 0.0, True
        out = self.poll(printed)
        if self.source is None and not self.printed:
            if self.waiting:  # no source holds --metric: the printed rows, as they are
                self.printed, self.ripe = True, len(self.waiting)
                out += self._printed_rows([])
            elif source := next((s for s in self.sources if self.unread.get(s)), None):
                out += self._take(source)
        if self.source is None:
            return out
        out += self._end_of_run(self.context.close())
        self._compare()
        return out

    def _printed_rows(self, printed: list) -> list[dict]:
        """The printed rows to report now: all of them once they are read; none while held back, nor
        once a tracker is read (their --metric is then kept for `_compare`)."""
        if not self.auto:
            return printed
        self.values.update({r[self.step_key]: r[self.metric] for r in printed if self.metric in r})
        if self.printed is False:
            return []
        self.waiting += printed
        ripe = self.waiting[: self.ripe] if self.metric is not None else self.waiting
        if self.printed or any(self.metric is None or self.metric in r for r in ripe):
            self.printed, rows, self.waiting, self.ripe = True, self.waiting, [], 0
            return rows
        return []

    def _choose(self) -> list[dict]:
        """Read every source; the rows of the first whose rows hold --metric (the only one, of one);
        else the printed rows that waited through this read, when they hold it."""
        for source in self.sources:
            self.unread[source] += self._read(source)
            rows = self.unread[source]
            if rows and (self.metric is None or len(self.sources) == 1 or any(self.metric in r for r in rows)):
                if not (self.printed and self.metric is None):  # no --metric to tell them apart: as printed
                    return self._take(source)
        rows = self._printed_rows([]) if self.printed is None else []  # those that waited through the last read
        self.ripe = len(self.waiting)
        return rows

    def _take(self, source: str) -> list[dict]:
        """Read `source` from now on (said in the trial's log when read live); its rows read so far
        (after a printed step already reported, a step of its rows at or below it is not reported twice)."""
        self.source, rows = source, self.unread[source]
        self.unread = {}
        if self.auto and self.printed:
            self.printed_until = max(self.values, default=None)
        if self.announce:
            files = ", ".join(str(_relative(f, self.work_dir)) for f in self.files.get(source, ()))
            why = f" (the printed lines hold no --metric {self.metric})" if self.auto else ""
            why = f" (they hold --metric {self.metric}; the printed one is only compared)" if self.values else why
            if self.printed_until is not None:
                why = f" (they hold --metric {self.metric}; the printed rows up to {self.step_key} {self.printed_until}"
                why += " were reported before)"
            print(f"metrics from {source} records: {files or self.work_dir}{why}", flush=True)
        if self.auto:
            self.printed, self.waiting = False, []
        return self._step_rows(rows)

    def _step_rows(self, rows: list[dict]) -> list[dict]:
        """`rows` grouped per step: the steps completed, but the newest of them while no later step
        holding an earlier step's keys has started (it may be the last epoch, which the end-of-run
        figures join at `close`)."""
        key = self.step_key
        self.held.update(dict.fromkeys(k for row in rows for k in row if k != key))
        done = [r for row in sorted(rows, key=lambda r: r[key]) for r in self.context.add(row)]
        done = ([self.newest] if self.newest else []) + done
        self.newest = done.pop() if done else None
        if self.newest and self._epoch_started(self.newest):
            done, self.newest = done + [self.newest], None
        for row in done:
            self.returned.update(dict.fromkeys(k for k in row if k != key and k not in STEP_COLUMNS))
            self.last_step = row[key]
            self.recorded.update({row[key]: row[self.metric]} if self.metric in row else {})
        return done

    def _epoch_started(self, newest: dict) -> bool:
        """Whether the step being read after `newest` holds a key of a step before it (an epoch's, not
        only end-of-run figures)."""
        known = self.returned.keys() | newest.keys()
        started = self.context.step is not None and self.context.step != newest[self.step_key]
        return started and any(k in known and k not in STEP_COLUMNS for k in self.context.pending)

    def _end_of_run(self, last: list[dict]) -> list[dict]:
        """The newest step held back, joined by the last step's result when none of its keys was in an
        earlier step (then reported at the newest step's, once)."""
        key, newest, self.newest = self.step_key, self.newest, None
        if newest is None:  # an epoch's keys started the step after the last held: `last` is an epoch's
            return self._step_rows_done(last)
        self.returned.update(dict.fromkeys(k for k in newest if k != key and k not in STEP_COLUMNS))
        if last and not set(last[0]) & self.returned.keys():
            return self._step_rows_done([{**newest, **{k: v for k, v in last[0].items() if k not in STEP_COLUMNS}}])
        return self._step_rows_done([newest, *last])

    def _step_rows_done(self, rows: list[dict]) -> list[dict]:
        for row in rows:
            self.last_step = row[self.step_key]
            self.recorded.update({row[self.step_key]: row[self.metric]} if self.metric in row else {})
        return rows

    def _compare(self) -> None:
        """Say in the trial's log where the printed --metric differs from the tracker's at a step (`disagreed`)."""
        self.disagreed = [
            (step, value, self.recorded[step])
            for step, value in self.values.items()
            if step in self.recorded and not _agree(value, self.recorded[step])
        ]
        if self.disagreed and self.announce:
            step, printed, recorded = self.disagreed[0]
            more = f" (and at {len(self.disagreed) - 1} more)" if len(self.disagreed) > 1 else ""
            files = ", ".join(str(_relative(f, self.work_dir)) for f in self.files.get(self.source, ()))
            kept = "the recorded values"
            if self.printed_until is not None:
                kept += f" (the printed ones up to {self.step_key} {self.printed_until}, reported before)"
            print(
                f"metrics: the printed {self.metric} and the {self.source} records ({files}) disagree at "
                f"{self.step_key} {step}: {printed} printed, {recorded} recorded{more}; the history holds {kept}",
                flush=True,
            )

    def _read(self, source: str) -> list[dict]:
        """The rows of `source` not read before; [] while a record cannot be read yet."""
        key, rows = self.step_key, []
        paths = [p for p in find_records(self.work_dir, source, self.since) if self.existing.get(p) != _stamp(p)]
        if source == "tensorboard":
            return self._read_tensorboard(paths)
        paths = csv_files(paths, self.metric) if source == "csv" else paths
        # each trainer_state.json holds the whole history; of several runs' CSV logs (Hydra's runs/<stamp>/), the newest
        for path in paths[-1:] if source in ("hf", "csv") else paths:
            if source == "wandb":
                found, self.seen[path] = read_history(path, self.seen.get(path, 0))
                rows += self._wandb_rows(path, found)
                self._note_file(source, path, found)
                continue
            try:
                if source == "mlflow":
                    found = mlflow_rows(f"sqlite:///{path}", key) if _mlflow_has_runs(path) else []
                else:
                    found = (csv_rows if source == "csv" else hf_rows)(path.read_text(), key)
            except (OSError, ValueError):
                continue
            self._note_file(source, path, found)
            path = "hf" if source == "hf" else path  # the newest one counts
            rows += found[self.seen.get(path, 0) :]
            self.seen[path] = len(found)
        return rows

    @property
    def origins(self) -> dict:
        """{metric: where it was read} of the source read (`trainables/command/key_sources.py`)."""
        if self.source == "tensorboard":
            return self.tensorboard.origins
        return self.origins_of.get(self.source, {})

    def _wandb_rows(self, path: Path, found: list[dict]) -> list[dict]:
        """W&B history rows with their step: the run's own `step_key` metric where it logs one (an
        `epoch` it counts itself, whatever `_step` says), else W&B's step; once a run has logged its own,
        a row without it is not a step's."""
        rows = []
        for row in found:
            if self.step_key in row["metrics"]:
                self.logged_step.add(path)
                rows.append(dict(row["metrics"]))
            elif path not in self.logged_step:
                rows.append({**row["metrics"], self.step_key: row["step"]})
        return rows

    def _read_tensorboard(self, paths: list[Path]) -> list[dict]:
        """The rows of the TensorBoard log calls written since the last read (`tensorboard_reader.Runs`);
        a tag found in several run folders is not read (said once in the trial's log)."""
        known = self.tensorboard.ambiguous
        rows, files = self.tensorboard.read(paths, self.work_dir, final=self.closing)
        for path in files:
            self._note_file("tensorboard", path, [path])
        for tag, runs in self.tensorboard.ambiguous.items() - known.items():
            self.held.pop(tag, None)
            if self.announce:
                print(
                    f"metrics: TensorBoard tag {tag} is in {len(runs)} run folders ({', '.join(runs)}): not read",
                    flush=True,
                )
        return rows

    def _note_file(self, source: str, path: Path, found: list) -> None:
        """Keep `path` among `source`'s files, and the origin of each key its rows `found` hold."""
        if found and path not in self.files.setdefault(source, []):
            self.files[source].append(path)
        if source != "tensorboard":
            origins = self.origins_of.setdefault(source, {})
            keys = {k for row in found for k in (row["metrics"] if source == "wandb" else row)}
            origins.update({k: file_origin(source, path, self.work_dir, k) for k in keys})  # the newest file's


def _stamp(path: Path) -> tuple | None:
    """A file's (modification time in ns, size); None when it is gone."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _relative(path: Path, folder: Path) -> Path:
    return path.relative_to(folder) if path.is_relative_to(folder) else path


def _agree(printed: float, recorded: float) -> bool:
    """Whether `recorded` rounds to `printed` at the decimals printed (`0.812` and 0.81234 agree)."""
    text = repr(printed) if isinstance(printed, float) else ""
    if "." in text and "e" not in text:
        return abs(printed - recorded) <= 0.5 * 10 ** -len(text.split(".")[1]) + 1e-12
    return math.isclose(printed, recorded, rel_tol=1e-6, abs_tol=0.5 if isinstance(printed, int) else 0.0)


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
        found = find_records(work_dir, source)
        if csv_files(found, None) if source == "csv" else found:
            reader = TrackerResults(work_dir, step_key, (source,))
            reader.close()
            keys = list(reader.held)
            parts.append(f"{source} held {', '.join(keys[:12]) + (' ...' if len(keys) > 12 else '') or 'no row'}")
            if source == "tensorboard":
                parts += reader.tensorboard.unread()
    return "; ".join(parts)
