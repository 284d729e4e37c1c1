"""Where each metric of a command trial was read, kept per key in the trial's `metric_sources.json` (issue 54 item 5).

A value without its source cannot be checked: a Rich frame's rounded `val/acc`, a TensorBoard tag of the
wrong run folder and a `metrics.csv` column look alike in a table. So each key the trial reported gets
one origin, a dict with `source` and the fields that find it again:

- csv, hf, wandb, mlflow: `file` (relative to `{trial_dir}`) and `column` (CSV) or `key`
  (`logs/train/runs/<stamp>/csv/version_0/metrics.csv`, column `val/acc`);
- tensorboard: `run` (the run folder, relative to `{trial_dir}`) and `tag` (`tb/dashboard_test_acc_1`, `dashboard`);
- stdout, stderr: `pattern` (the `--metric-pattern` that gave it) or `line` (the shape of the first line
  it was read from, numbers as `<n>`: `Epoch <n>/<n> - val_acc: <n>`);
- jsonl: `file` (`metrics.jsonl`, $RAYSWEEP_METRICS_FILE).

`trainables/command/runner.py` writes the record whenever the keys or their sources change (`SourceRecord`);
`--check`, `status --json` and `analyze --json` show it (`describe` gives one line per key).
"""

from __future__ import annotations

import re
from pathlib import Path

from trainables.command import output_shapes
from trainables.experiment import records

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?")
SHAPE_CHARS = 120  # a line's shape is cut there (a Rich frame joins many lines)


def line_shape(line: str) -> str:
    """`line` as its shape: colours and bars' redraws gone, every number `<n>`, at most `SHAPE_CHARS`
    characters (`Epoch 3/50 - val_acc: 0.81` -> `Epoch <n>/<n> - val_acc: <n>`)."""
    shape = _NUMBER.sub("<n>", output_shapes.plain_text(line).strip())
    return shape if len(shape) <= SHAPE_CHARS else shape[: SHAPE_CHARS - 3] + "..."


def printed_origin(stream: str, line: str, patterns, key: str) -> dict:
    """The origin of `key` read from `line` of `stream` (`stdout`, `stderr`): the first of `patterns`
    (compiled `--metric-pattern`s) whose match holds it, else the line's shape."""
    for pattern in patterns or ():
        match = pattern.search(output_shapes.plain_text(line))
        if match and match.groupdict().get(key) is not None:
            return {"source": stream, "pattern": pattern.pattern}
    return {"source": stream, "line": line_shape(line)}


def file_origin(source: str, path: Path, work_dir: Path, key: str) -> dict:
    """The origin of `key` read from the tracker file `path` (`source`: csv, hf, wandb, mlflow)."""
    relative = path.relative_to(work_dir) if path.is_relative_to(work_dir) else path
    return {"source": source, "file": str(relative), ("column" if source == "csv" else "key"): key}


def describe(origin: dict) -> str:
    """One line for `origin`: `csv logs/.../metrics.csv, column val/acc`, `tensorboard run tb/x, tag loss`,
    `stdout, lines like Epoch <n>/<n> ...`, `stdout, --metric-pattern Iter (?P<iter>...)`."""
    source = origin.get("source", "?")
    if "pattern" in origin:
        return f"{source}, --metric-pattern {origin['pattern']}"
    if "line" in origin:
        return f"{source}, lines like {origin['line']}"
    if "run" in origin:
        return f"{source} run {origin['run'] or '.'}, tag {origin.get('tag')}"
    field = "column" if "column" in origin else "key"
    return f"{source} {origin.get('file')}" + (f", {field} {origin[field]}" if field in origin else "")


def trial_origins(context, events, file_keys=(), metrics_file: Path | None = None) -> dict:
    """{metric: its origin} of the rows a trial reports: the printed ones (`context`, a `parse.StepContext`)
    and $RAYSWEEP_METRICS_FILE's (`file_keys`), or, once `events` (`trackers.TrackerResults`) reads a
    tracker, that tracker's (over the printed ones when printed rows were reported before it took over)."""
    printed = dict(context.origins) if context is not None else {}
    if metrics_file is not None:
        printed.update({k: {"source": "jsonl", "file": metrics_file.name} for k in file_keys if k not in printed})
    if events is None or events.source is None:
        return printed
    return events.origins if events.printed_until is None else {**printed, **events.origins}


class SourceRecord:
    """The trial's `metric_sources.json`, written again (atomically) when the reported keys' sources change."""

    def __init__(self, trial_folder: Path):
        self.trial_folder, self.written = trial_folder, {}

    def update(self, keys, origins: dict) -> None:
        """Record the origin of each key of `keys` (the names the trial reported) found in `origins`."""
        found = {key: origins[key] for key in keys if key in origins}
        if found and found != self.written:
            records.write_metric_sources(self.trial_folder, found)
            self.written = found
