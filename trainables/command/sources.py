"""Where a command trial's results come from besides its live lines: earlier attempts, JSON lines, trackers.

`trainables/command/runner.py` runs the command; this module reads what it left: `command_stdout.txt`
(both streams, every attempt, in the order the trial read them), the files the command writes its
stdout and stderr to (`OUTPUT_FILES`, caught up into `command_stdout.txt` after a kill),
`$RAYSWEEP_METRICS_FILE`, the tracker records (`trackers.TrackerResults`: W&B, MLflow, CSV files,
Hugging Face, TensorBoard), and the last step Tune recorded (checkpoints and `result.json`).
"""

from __future__ import annotations

import difflib
import json
import math
import queue
import re
import threading
import time
from pathlib import Path

from ray.tune import Checkpoint
from ray.tune.result import AUTO_RESULT_KEYS, DONE, EXPERIMENT_TAG, SHOULD_CHECKPOINT, TRIAL_ID

from trainables.command.output_shapes import NUMBER
from trainables.command.parse import STREAMS_READ, StepContext, line_metrics
from trainables.command.trackers import TRACKERS, TrackerResults, describe_sources, sources_of
from trainables.command.user_metrics import METRICS_FILE_ENV
from trainables.experiment import records, storage
from trainables.experiment.objective import Objective

STDOUT_LOG = "command_stdout.txt"  # <trial folder on storage>/command_stdout.txt: the command's lines, every attempt
ATTEMPT_LINE = "# raysweep: command started "  # first line of each attempt in STDOUT_LOG
ERR_MARK = "# raysweep stderr | "  # in STDOUT_LOG before each line the command wrote to stderr
# <trial folder on storage>/...: the running attempt's command writes its stdout / stderr straight to these
# files (no pipe, so a line printed survives a killed worker); the trial tails them into STDOUT_LOG
OUTPUT_FILES = {"OUT": "command_out.txt", "ERR": "command_err.txt"}


def unreported_results(
    stdout_log: Path,
    last_step,
    step_key: str,
    patterns: list[re.Pattern],
    objective: Objective | None = None,
    streams=("stdout",),
    recorded: set | None = None,
) -> list[dict]:
    """Results in the lines of earlier attempts (`command_stdout.txt`) that Tune never recorded.

    After a driver kill the command may have printed rows Tune never recorded; a resumed script
    restarts from its own checkpoint, which may be later. Each attempt's lines (after its
    `ATTEMPT_LINE`) of the `streams` read (`stdout`, `stderr`) are read with their own
    `StepContext`, in the order the trial read them.
    Args:
        last_step: results at or below it are skipped, unless `recorded` is given.
        recorded: the steps in the trial's own history (`recorded_steps`): every other step is
            returned, also one below the highest recorded (a row the killed worker never got into
            the history while a later one did).
    Returns:
        The results to report, in step order, each step once.
    """
    try:
        text = stdout_log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    found = {}
    for attempt in text.split(ATTEMPT_LINE)[1:]:
        context = StepContext(step_key, patterns, objective)
        lines = [line for _, line in stream_lines(attempt.splitlines()[1:], streams)]
        for result in [r for line in lines for r in context.feed(line)] + context.close():
            if not_reported(result[step_key], last_step, recorded):
                found.setdefault(result[step_key], result)
    return [found[step] for step in sorted(found)]


def not_reported(step, last_step, recorded: set | None) -> bool:
    """Whether a restarted trial reports `step` again: it is not in the trial's history (`recorded`),
    or, without one, above the last step reported."""
    return (step not in recorded) if recorded is not None else step > last_step


def record_reader(metrics_from: str, work_dir: Path, step_key: str, objective: Objective | None = None, since=None):
    """What reads the records a command writes under `work_dir` for `metrics_from` while it runs and
    chooses the rows to report (`TrackerResults`): that tracker's (`tensorboard` included), or for
    `output` the printed rows unless a tracker's hold --metric and they do not; None for the other
    sources (the streams and the metrics file only)."""
    if metrics_from in TRACKERS or metrics_from == "output":
        sources = sources_of(metrics_from)
        return TrackerResults(work_dir, step_key, sources, objective, since, auto=metrics_from == "output")
    return None


def catch_up(trial_folder: Path) -> int:
    """Copy into `command_stdout.txt` the lines the last attempt's command wrote (`OUTPUT_FILES`) that
    its trial never read (the worker was killed first), then remove those files; returns the lines copied.

    The last attempt's section of `command_stdout.txt` holds the lines read so far, stdout's first and
    stderr's (`ERR_MARK`) in the order read; the lines of each file after that many are appended,
    stdout's then stderr's. A last line the command left without a newline counts as a line.
    """
    log, files = trial_folder / STDOUT_LOG, {name: trial_folder / f for name, f in OUTPUT_FILES.items()}
    if not any(path.exists() for path in files.values()):
        return 0
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    read = text.rsplit(ATTEMPT_LINE, 1)[1].split("\n")[1:-1] if ATTEMPT_LINE in text else []
    counts = {"ERR": sum(line.startswith(ERR_MARK) for line in read)}
    counts["OUT"] = len(read) - counts["ERR"]
    missed = []
    for name, path in files.items():
        written = path.read_bytes().split(b"\n") if path.exists() else [b""]
        written = written if written[-1] else written[:-1]  # the newline that ends the last line
        missed += [(ERR_MARK if name == "ERR" else "") + decode_line(raw) for raw in written[counts[name] :]]
    with open(log, "a", encoding="utf-8") as f:
        f.write("" if ATTEMPT_LINE in text or not missed else ATTEMPT_LINE + "(lines found after a kill)\n")
        f.write("".join(line + "\n" for line in missed))
    for path in files.values():
        path.unlink(missing_ok=True)
    return len(missed)


def decode_line(raw: bytes) -> str:
    """A line of the command's output as the trial reads it: UTF-8 (bad bytes replaced), no line ending."""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def stream_lines(logged: list[str], streams=("stdout", "stderr")) -> list[tuple[str, str]]:
    """`(stream, line)` for each line of `command_stdout.txt` (an `ERR_MARK` line is stderr) in `streams`."""
    pairs = [("stderr", line[len(ERR_MARK) :]) if line.startswith(ERR_MARK) else ("stdout", line) for line in logged]
    return [(stream, line) for stream, line in pairs if stream in streams]


class StreamLog:
    """`command_stdout.txt`: the lines of both streams in the order they are read, stderr's marked
    `ERR_MARK`, each flushed at once: while the trial waits in `tune.report` for a driver that was
    killed, the lines still reach the file that a retry and `--resume` read back. One lock makes the
    file's order the order the trial parses the lines in (`put` queues them under it)."""

    def __init__(self, path: Path):
        self.file, self.lock = open(path, "a", encoding="utf-8"), threading.Lock()
        self.write(ATTEMPT_LINE + time.strftime("%Y-%m-%d %H:%M:%S"))

    def write(self, text: str) -> None:
        self.file.write(text + "\n")
        self.file.flush()

    def put(self, name: str, line: str, lines: queue.Queue) -> None:
        """Log `line` of stream `name` (`OUT` / `ERR`) and queue `(name, line)` for the trial."""
        with self.lock:
            if not self.file.closed:
                self.write(line if name == "OUT" else ERR_MARK + line)
            lines.put((name, line))

    def close(self) -> None:
        with self.lock:
            self.file.close()


def read_metrics_file(path: Path, offset: int, step_key: str) -> tuple[list[dict], int]:
    """Results appended to the JSON-lines file `path` since byte `offset`.

    Returns:
        (results, new offset). Only complete lines are read (a line being written stays for the
        next call); lines that are not a JSON object holding `step_key` are skipped.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    results = []
    for raw in chunk[:end].splitlines():
        try:
            result = json.loads(raw)
        except ValueError:
            continue
        if isinstance(result, dict) and isinstance(result.get(step_key), (int, float)):
            results.append(result)
    return results, offset + end


def last_reported_step(checkpoint: Checkpoint | None, trial_folder: Path | None) -> float | None:
    """The highest step in Tune's checkpoint for this trial and in its `checkpoint_*` folders (none read
    when `trial_folder` is None); None: none yet."""
    steps = []
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            steps += read_step(Path(folder))
    for path in trial_folder.glob(f"checkpoint_*/{records.COMMAND_STEP_FILE}") if trial_folder else ():
        steps += read_step(path.parent)
    return max(steps) if steps else None


def recorded_steps(result_file: Path) -> set:
    """The `epoch` (= step) of each row of the trial's history, Tune's `result.json` (one JSON object a
    line; a line torn by a killed driver is skipped); empty when it holds none.

    A step's checkpoint is stored by the worker before the driver logs its row, so after a driver
    kill the newest `checkpoint_*` folder may belong to a row the history never got: that row is
    then reported again (from `command_stdout.txt`), not lost."""
    rows = storage.json_lines(result_file.read_bytes())
    return {row["epoch"] for row in rows if isinstance(row.get("epoch"), (int, float))}


TUNE_KEYS = frozenset((*AUTO_RESULT_KEYS, DONE, EXPERIMENT_TAG, SHOULD_CHECKPOINT, TRIAL_ID))  # Tune adds them


def recorded_row(result_file: Path, step: float) -> dict:
    """The metrics of the last row at `step` in the trial's history (`recorded_steps`' file), without the keys
    Tune adds to each result (`TUNE_KEYS`: `training_iteration`, `time_total_s`, `config`, ...): the result a
    restarted trial's final figures at that step join (`StepReporter.after_restart`); {} when no row holds it."""
    rows = [row for row in storage.json_lines(result_file.read_bytes()) if row.get("epoch") == step]
    return {k: v for k, v in rows[-1].items() if k not in TUNE_KEYS} if rows else {}


def read_step(checkpoint_folder: Path) -> list:
    """[the step] a checkpoint folder holds (`records.read_command_step`); [] when it holds none."""
    step = (records.read_command_step(checkpoint_folder) or {}).get("step")  # a torn file: warned, skipped
    return [step] if isinstance(step, (int, float)) else []


def candidate_keys(lines_by_stream: dict, step_key: str, patterns: list[re.Pattern] | None = None) -> dict:
    """{stream: [metric names]} for each stream whose lines hold any metric (`line_metrics`), names in
    order of first appearance; `lines_by_stream` maps `stdout` / `stderr` to lines."""
    found = {}
    for stream, lines in lines_by_stream.items():
        keys = [k for line in lines for part in line.split("\r") for k in line_metrics(part, step_key, patterns)]
        if keys:
            found[stream] = list(dict.fromkeys(keys))
    return found


# `name number`, `name: number`, `name=number`: a pair a reader may expect to be read (`valid loss  2.94`)
_LOOKS_LIKE_PAIR = re.compile(rf"(?P<name>[A-Za-z_][\w./@-]*)[ \t]*[:=]?[ \t]+(?P<value>{NUMBER})%?(?![\w.:/])")
SKIPPED_SHOWN = 3  # lines quoted in an error


def skipped_lines(lines_by_stream: dict, step_key: str, patterns: list[re.Pattern] | None = None) -> list[str]:
    """The lines (of any stream, in `lines_by_stream`'s order) holding a `name number` pair that was not
    read as a metric (`line_metrics` read no key ending in that name): what a reader may have expected
    to be read, e.g. `*** Best metric: 16.67 (epoch 0)`, `Namespace(lr=0.1, ...)`, `valid loss 2.94`."""
    skipped = []
    for lines in lines_by_stream.values():
        for line in lines:
            read = line_metrics(line, step_key, patterns)
            pairs = [m["name"] for m in _LOOKS_LIKE_PAIR.finditer(line)]
            if any(not any(k.lower().endswith(name.lower()) for k in read) for name in pairs):
                skipped.append(line.strip())
    return skipped


def describe_candidates(found: dict, streams, metric: str | None = None, skipped=()) -> str:
    """One clause for an error: which stream held candidate lines, their keys, and whether it is read,
    e.g. `stderr held lines with epoch, eval_acc (not read: --metrics-from stdout)`; `no line of
    stdout or stderr held a number` when `found` is empty. With `metric` (--metric, not seen), the keys
    nearest to it (`difflib`); with `skipped` (`skipped_lines`), the last of them, quoted."""
    if not found:
        text = "no line of stdout or stderr held a `name: number` pair"
    else:
        text = "; ".join(
            f"{stream} held lines with {', '.join(keys[:12])}{' ...' if len(keys) > 12 else ''}"
            + ("" if stream in streams else f" (not read: add --metrics-from output or {stream})")
            for stream, keys in found.items()
        )
    keys = list(dict.fromkeys(k for stream_keys in found.values() for k in stream_keys))
    nearest = difflib.get_close_matches(metric, keys, n=3, cutoff=0.5) if metric else []
    text += f"; nearest to {metric}: {', '.join(nearest)}" if nearest else ""
    quoted = [f"`{line[:100]}{'...' if len(line) > 100 else ''}`" for line in list(skipped)[-SKIPPED_SHOWN:]]
    return text + (f"; lines with numbers not read as metrics: {' '.join(quoted)}" if quoted else "")


def no_metrics_message(
    step_key: str,
    patterns: list,
    metrics_from: str,
    metrics_file: Path,
    work_dir: Path,
    tails: dict,
    metric: str | None = None,
) -> str:
    """The first line of a trial's error when its command exited 0 but reported no result: what was
    expected from `metrics_from`, and which stream's last lines (`tails`: `OUT` / `ERR` -> lines) held
    which keys (with `metric`, those nearest to it) and which lines with numbers were not read."""
    streams = STREAMS_READ.get(metrics_from, ())
    if metrics_from == "tensorboard":
        expected = f"TensorBoard scalars in event files under {work_dir} (write them to {{trial_dir}})"
    elif metrics_from in TRACKERS:
        expected = f"{metrics_from} records under {work_dir} (docs/own-scripts.md: where each tracker is looked for)"
    else:
        where = " or ".join(streams) + " lines"
        expected = (
            f"{where} matching --metric-pattern {' or '.join(repr(p.pattern) for p in patterns)}"
            if patterns
            else f"{where} naming the step (e.g. `{step_key}=3 val_acc=0.81`)"
        )
        expected = (expected + " or " if streams else "") + f"JSON lines in ${METRICS_FILE_ENV} ({metrics_file})"
        expected += f" or records of {', '.join(TRACKERS)} under {work_dir}" if metrics_from == "output" else ""
    lines = {"stdout": tails["OUT"], "stderr": tails["ERR"]}
    found = candidate_keys(lines, step_key, patterns)
    described = describe_candidates(found, streams, metric, skipped_lines(lines, step_key, patterns))
    held = describe_sources(work_dir, step_key, sources_of(metrics_from))
    return f"command exited 0 but reported no metric: expected {expected}; {described}" + (f"; {held}" if held else "")


def unreported_tracker_rows(
    work_dir: Path, reporter, metrics_from: str, objective: Objective | None = None, printed=()
) -> tuple[list[dict], str]:
    """The rows a restarted trial's history lacks (`reporter`: its step key, last step and recorded steps,
    `command.StepReporter`), chosen as the live read chooses them (`record_reader`, `TrackerResults.close`):
    the rows of the tracker records under `work_dir` (every attempt's) when one holds --metric, else
    `printed` (every attempt's printed results, `unreported_results`) when `metrics_from` reads them, else
    a tracker's rows without it; in step order, with where they came from (`csv records`, `command_stdout.txt`)."""
    key = reporter.step_key
    reader = record_reader(metrics_from, work_dir, key, objective)
    rows = reader.close(list(printed) if metrics_from in STREAMS_READ else [])
    last = reporter.last_step if reporter.last_step is not None else -math.inf
    found = {row[key]: row for row in rows if not_reported(row[key], last, reporter.recorded)}
    return [found[step] for step in sorted(found)], f"{reader.source} records" if reader.source else STDOUT_LOG
