"""The status of a sweep, running or not, from its experiment folder alone: `python -m analysis EXP --status`.

    [0:01:30] 12 trials: 4 running, 6 pending, 2 finished, 0 errored, 0 diverged | best val/acc 0.9120 (sym_0.125_seed0)
      | epochs 20/360 | ETA 0:12:30   (one line on the console)
      sym_0.25_seed0   epoch 5/30  val/acc 0.8800  train/loss 0.4120  GPU 0
        sym_0.25_seed0:INFO | [GPU 0 | pid 4242] Epoch [5/30] | Loss 0.4120 | Val Acc 0.8800 | ...
    driver: alive on gpu-box, pid 4242, since 2026-11-22 18:50:18

The block is the driver's progress block (`analysis/progress.py`) plus each running trial's last
log line and the driver's state. Where it comes from (a local folder or a URI such as s3://):
- the newest `experiment_state-*.json` that Tune snapshots while it runs: every trial's status,
  config, last result and best values (`analysis/reading/tune_state.py`);
- for the trials it lists as running, and trial folders it does not list yet: the last lines
  of `result.json` (newer than the snapshot) and of the `stdout` log (as last copied to storage:
  at a report, at most every `sweeps/engine/run/launch.py:ARTIFACT_SYNC_PERIOD_S`, so it may be an epoch or
  a few seconds behind the metrics);
- `raysweep.json`: the sweep's metric and mode, its command line and the grid's size;
- `driver.json`: the driver's host, pid and heartbeat (`analysis/reading/driver_record.py`).
Only the running trials' files are opened, so a 1,000-trial experiment answers in well under 2 s
(`benchmarks/status_speed.py`).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
import sys
import time
from typing import TextIO

import pyarrow.fs as pafs

from analysis.progress import format_duration, format_progress, sweep_status
from analysis.reading.driver_record import continue_advice, exit_code, holder_alive, read_holder, resume_command
from analysis.reading.oom_rounds import reruns, round_folders
from analysis.reading.tune_state import (
    config_key,
    describe_duplicates,
    end_recorded,
    list_dir,
    listed_trials,
    read_bytes,
    repeats,
    resolve_source,
    sweep_settings,
)
from trainables.experiment import records, storage
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import ALL_ENDED, ERRORED, TIME_BUDGET, ran_to_end, trial_outcome
from trainables.experiment.release import label
from trainables.experiment.scheduler_stops import pruning_stops

LOG_TAIL_BYTES = 8192  # read of a log's end, for its last line
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU_IN_LOG = re.compile(r"\[GPU ([\d,]+) \|")  # the trial log prefix `[GPU 0,1 | pid 42]`


@dataclasses.dataclass
class TrialRecord:
    """One trial as `analysis.progress.sweep_status` reads it (the fields of a Tune `Trial` it uses)."""

    name: str
    status: str  # RUNNING, PENDING, PAUSED, TERMINATED or ERROR
    config: dict
    last_result: dict
    metric_analysis: dict  # metric -> {"max": ..., "min": ...}
    start: float | None = None  # Unix seconds
    end: float | None = None  # Unix seconds of its last result
    folder: str | None = None  # its folder in the experiment
    state: str | None = None  # the experiment_state-*.json listing it, None for a folder found by scanning
    trial_id: str | None = None  # Tune's id, None for a folder found by scanning

    def __str__(self) -> str:
        return self.name


def read_status(source, now: float | None = None) -> dict:
    """Read a sweep's status from its experiment folder.

    Args:
        source: experiment folder or URI (s3://bucket/runs/noise_grid).
        now: time.time() (the default), for the driver's heartbeat and the elapsed time.
    Returns:
        dict with `status` (`analysis.progress.sweep_status`), `metric`, `mode`, `elapsed_s` (seconds
        from the driver's start to now, or to its end: `_elapsed`),
        `ended_by` and `why` (why an ended sweep ended, `driver.json`'s; None while it runs, or unknown),
        `log_lines` (running trial -> last log line), `metric_sources` (running command trial -> {metric:
        where it was read}, `trainables/command/key_sources.py`), `driver` (the `driver.json` record or None),
        `driver_alive` (bool or None when unknown), `left` (trials not finished: running, pending,
        interrupted or not run), `argv` (the sweep's command line, or None), `launch` (what
        `resume_command` reads), `where`, `resumable` and `duplicates`: the folders of trials
        left out as repeats of another (`analysis.reading.tune_state.repeats`: a copied folder, an
        unfinished rerun of a finished cell).
    Raises:
        ExperimentError: not a folder, or no Tune experiment in it (no state file, no trial folder).
    """
    now = time.time() if now is None else now
    fs, root, prefix = resolve_source(source, None)
    entries = list_dir(fs, root, prefix + root)
    files = {e.base_name for e in entries if e.type == pafs.FileType.File}
    dirs = sorted(e.base_name for e in entries if e.type == pafs.FileType.Directory)
    state, listed = listed_trials(fs, root, files, dirs)  # every state file: an extended grid writes one per run
    if state is None and not files & {
        records.SETTINGS_FILE,
        records.DRIVER_FILE,
    }:  # a sweep that is starting has these first
        raise ExperimentError(f"{prefix + root} is not a Ray Tune experiment folder (no experiment_state-*.json)")
    info = (records.read_settings(prefix + root) if records.SETTINGS_FILE in files else None) or {}
    settings = sweep_settings(fs, root, files, state)
    objective = Objective(**{name: settings[name] for name in ("metric", "mode") if settings.get(name)})

    trials, log_lines, duplicates = _trial_records(fs, root, dirs, listed, objective.metric)
    for folder in round_folders(fs, root):  # out-of-memory re-runs count in place of their failures
        _add_reruns(fs, folder, objective.metric, trials, log_lines, duplicates)
    running = [t for t in trials if t.status == "RUNNING" and t.folder]
    metric_sources = {t.name: _metric_sources(fs, posixpath.join(root, t.folder)) for t in running}
    total = max(int(info.get("total_trials") or 0), len(trials))
    driver = read_holder(prefix + root)
    alive = holder_alive(driver, now) if driver else None
    record = driver or {}
    if alive is False and record.get("not_created") is not None:  # the planned trials never made, as its last line
        total = len(trials) + int(record["not_created"])  # counted them (none for a searcher that ended by itself)
    stopped = set(record.get("stopped") or ())  # the trials the driver stopped (a time budget, ...)
    stops = record.get("scheduler_stops") or {}  # and those their scheduler stopped: pruned, unless ran on to the end
    stops = pruning_stops(
        stops,
        {
            t.trial_id: (prefix + posixpath.join(root, t.folder), (t.last_result or {}).get("epoch"))
            for t in trials
            if t.trial_id in stops and t.folder
        },
    )
    status = sweep_status(trials, total, objective, over=alive is False, stopped=stopped, scheduler_stops=stops)
    left = sum(status[k] for k in ("running", "pending", "interrupted", "not_run"))
    return {
        "status": status,
        "metric": objective.metric,
        "mode": objective.mode,
        "where": prefix + root,
        "elapsed_s": _elapsed(trials, record, alive, left, now),
        "ended_by": record.get("ended_by") if alive is False else None,
        "why": record.get("why") if alive is False else None,
        "log_lines": log_lines,
        "metric_sources": {name: keys for name, keys in metric_sources.items() if keys},
        "driver": driver,
        "driver_alive": alive,
        "left": left,
        "argv": info.get("argv"),
        "launch": {"argv": info.get("argv"), "python": info.get("python")},  # for `resume_command`
        "raysweep": info.get("raysweep"),  # the release that launched it; None before 0.8.0
        "resumable": "tuner.pkl" in files,  # what `--resume` restores (`Tuner.restore`)
        "duplicates": duplicates,
        "report_unfinished": records.REPORT_DIR + records.WRITING in dirs,  # its writer stopped midway
    }


def _elapsed(trials: list[TrialRecord], record: dict, alive: bool | None, left: int, now: float) -> float:
    """Seconds the sweep (its latest run) has taken: from its driver's start (`driver.json`'s `started`) to now,
    or to the end its console's final block said (`elapsed_s`); a sweep without those (an older raysweep's),
    from its first trial's start to now, or to its last result once it is over."""
    started = record.get("started")
    if isinstance(started, (int, float)):
        if alive is False and isinstance(record.get("elapsed_s"), (int, float)):
            return max(0.0, record["elapsed_s"])
        until = record.get("ended") if alive is False and record.get("ended") else now
        return max(0.0, until - started)
    starts, ends = [t.start for t in trials if t.start], [t.end for t in trials if t.end]
    until = now if left and alive is not False else max(ends, default=now)  # an ended sweep's clock stops
    return max(0.0, until - min(starts)) if starts else 0.0


def format_status(state: dict, now: float | None = None) -> list[str]:
    """The status block of a `read_status` dict: the progress block, then the driver's line (and, once the
    driver has ended or is gone, what continues the sweep: `driver_record.continue_advice`)."""
    lines = format_progress(state["status"], state["elapsed_s"], metric=state["metric"], log_lines=state["log_lines"])
    if describe_duplicates(state["duplicates"]):
        lines.append(describe_duplicates(state["duplicates"]))
    lines.append(driver_line(state, time.time() if now is None else now))
    if state.get("raysweep"):
        lines.append(f"  launched by {label(state['raysweep'])}")
    if state["driver_alive"] is not False:
        return lines
    if state.get("report_unfinished"):
        lines.append(
            f"  report: not finished (its writer was stopped while writing it; {records.REPORT_DIR}"
            f"{records.WRITING}/ holds the part written): rebuild it with "
            f"`python -m analysis {shlex.quote(state['where'])}`"
        )
    if state["left"] and not state["resumable"]:  # killed before Tune saved the sweep: nothing to restore yet
        command = resume_command(state["launch"], resume=False)
        quoted = f"`{command}`" if state["launch"].get("argv") else command
        return lines + [f"  {state['left']} trial(s) left, none saved yet: start the sweep again with {quoted}"]
    if state["ended_by"] == TIME_BUDGET and state["left"]:
        return lines + [
            f"  {state['left']} trial(s) left: the time budget ended the sweep ({state['why']}); "
            "--resume would run none of them"
        ]
    resumed = bool((state["driver"] or {}).get("resumed", True))
    advice = _quoted_command(continue_advice(state["launch"], state["status"], state["ended_by"], resumed))
    left = f"{state['left']} trial(s) left: " if state["left"] else ""
    return lines + ([f"  {left}{advice}"] if advice else [])


def _quoted_command(advice: str) -> str:
    """`continue_advice` with its command in backticks (Markdown code): after `: `, up to ` (` or the end."""
    head, colon, rest = advice.rpartition(": ")
    command, paren, tail = rest.partition(" (add ")
    return f"{head}{colon}`{command}`{paren}{tail}" if colon else advice


def driver_line(state: dict, now: float) -> str:
    """`driver: alive on HOST, pid N, since ...`, `driver: finished ...`, `driver: gone ...` or unknown."""
    record = state["driver"]
    if record is None:
        missing = f"no {records.DRIVER_FILE} in the experiment folder"
        return f"driver: unknown ({missing}: a sweep started by an older raysweep)"
    where = f"{record.get('host', '?')}, pid {record.get('pid')}"
    beat = record.get("heartbeat")
    ago = f"last heartbeat {format_duration(now - beat)} ago" if isinstance(beat, (int, float)) else "no heartbeat"
    if state["driver_alive"]:
        return f"driver: alive on {where}, since {record.get('since', '?')} ({ago})"
    if record.get("ended") is not None:
        ended = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["ended"]))
        how = f" ({record['why']})" if record.get("why") and record.get("ended_by") != ALL_ENDED else ""
        return f"driver: finished at {ended} on {where}, exit code {record.get('exit_code')}{how}"
    return f"driver: gone (was on {where}, since {record.get('since', '?')}; {ago})"


def watch(source, every_s: float | None, stream: TextIO | None = None, as_json: bool = False) -> int:
    """Print the status block once, or (every_s > 0) every `every_s` seconds until the sweep is over
    (its driver ended or is gone; with no driver record: no trial left). Returns `exit_code`.
    `as_json`: each time one line, the `raysweep.status/1` document (`analysis/tables/json_output.py`)."""
    stream = stream or sys.stdout
    while True:
        state = read_status(source)
        if as_json:
            from analysis.tables.json_output import dumps, status_document  # imports this module: not at the top

            stream.write(dumps(status_document(state)) + "\n")
        else:
            stream.write("\n".join(format_status(state)) + "\n")
        stream.flush()
        over = state["driver_alive"] is False or (state["driver"] is None and not state["left"])
        if not every_s or over:
            return exit_code(state)
        time.sleep(every_s)
        if not as_json:
            stream.write("\n")


def _trial_records(
    fs, root: str, dirs: list[str], listed: list[dict], metric: str
) -> tuple[list[TrialRecord], dict[str, str | None], list[str]]:
    """The trials of the state files, updated from the result.json of those not finished there, and
    the folders with results that no state file lists yet; repeats left out (`tune_state.repeats`).

    Returns (trials, running trial name -> last log line, folders left out as repeats)."""
    trials = [
        TrialRecord(
            t["trial_name"] or t["dir"],
            t["status"] or "PENDING",
            t["config"] or {},
            t["last_result"],
            t["metric_analysis"],
            t["start"],
            t["end"],
            t["dir"],
            t["state"],
            t["trial_id"],
        )
        for t in listed
    ]
    folders = {t["dir"]: trial for t, trial in zip(listed, trials) if t["dir"]}
    log_lines = {}
    for folder in dirs:  # trials the snapshot lists as running, and those it does not list yet
        trial = folders.get(folder)
        if trial is not None and trial.status in ("TERMINATED", "ERROR"):
            continue  # finished in the snapshot: nothing newer to read
        rows = storage.json_lines(read_bytes(fs, posixpath.join(root, folder, "result.json")) or b"")
        if trial is None:
            if not rows:
                continue  # not a trial folder, or one that has reported nothing yet
            config = rows[-1].get("config") if isinstance(rows[-1].get("config"), dict) else {}
            trial = TrialRecord(folder, "RUNNING", config, {}, {}, rows[0].get("timestamp"), folder=folder)
            trials.append(trial)
        _update_from_rows(trial, rows, metric)
        if trial.status == "RUNNING" and end_recorded(fs, posixpath.join(root, folder)):
            trial.status = "TERMINATED"  # its end reached no saved state: the driver was killed first
        if trial.status == "RUNNING":
            log_lines[trial.name] = _last_line(fs, posixpath.join(root, folder, "stdout"))
            if not trial.last_result.get("gpu_ids") and (gpus := _placed_on(fs, root, folder, log_lines[trial.name])):
                trial.last_result = {**trial.last_result, "gpu_ids": gpus}
    dropped = set(repeats([vars(t) for t in trials]))  # a copied folder or a repeat is not another trial
    duplicates = sorted(trials[i].folder or trials[i].name for i in dropped)
    trials = [t for i, t in enumerate(trials) if i not in dropped]
    names = {t.name for t in trials}
    return trials, {name: line for name, line in log_lines.items() if name in names}, duplicates


def _metric_sources(fs, folder: str) -> dict | None:
    """{metric: where it was read} of a running command trial (its `metric_sources.json`), or None."""
    path = posixpath.join(folder, records.METRIC_SOURCES_FILE)
    record = records.parse_record(read_bytes(fs, path) or b"{}", path) or {}
    return record.get("keys") if isinstance(record.get("keys"), dict) else None


def _placed_on(fs, root: str, folder: str, log_line: str | None) -> str | None:
    """The GPU ids of a running trial that has reported none yet: its `placement.json` (written at its
    start, `trainables/gpu_use.py:record_placement`), else its log line's prefix `[GPU 0 | pid 42]`."""
    placed = records.parse_record(read_bytes(fs, posixpath.join(root, folder, records.PLACEMENT_FILE)) or b"{}", folder)
    if (placed or {}).get("gpu_ids"):
        return str(placed["gpu_ids"])
    gpus = _GPU_IN_LOG.search(log_line or "")
    return gpus.group(1) if gpus else None


def _add_reruns(fs, folder: str, metric: str, trials: list, log_lines: dict, duplicates: list) -> None:
    """Put the trials of an out-of-memory re-run round (`folder`) in place of the errored trials they re-ran
    (`analysis.reading.oom_rounds.reruns`), with their log lines and repeats left out."""
    try:
        entries = list_dir(fs, folder, folder)
    except ExperimentError:
        return
    files = {e.base_name for e in entries if e.type == pafs.FileType.File}
    dirs = sorted(e.base_name for e in entries if e.type == pafs.FileType.Directory)
    _, listed = listed_trials(fs, folder, files, dirs)
    rerun, rerun_lines, rerun_duplicates = _trial_records(fs, folder, dirs, listed, metric)
    earlier = [(config_key(t.config), trial_outcome(t.status, t.last_result) == ERRORED) for t in trials]
    for i, j in reruns(earlier, [config_key(t.config) for t in rerun]).items():
        trials[i] = rerun[j]
        if rerun[j].name in rerun_lines:
            log_lines[rerun[j].name] = rerun_lines[rerun[j].name]
    duplicates += rerun_duplicates


def _update_from_rows(trial: TrialRecord, rows: list[dict], metric: str) -> None:
    """A running trial's last result and best values from its result.json (newer than Tune's snapshot)."""
    if not rows:
        return
    trial.last_result = rows[-1]
    trial.end = rows[-1].get("timestamp", trial.end)
    if ran_to_end(rows[-1], trial.config):  # a torn or older snapshot lists it running, or none lists it
        trial.status = "TERMINATED"
    values = [r[metric] for r in rows if isinstance(r.get(metric), (int, float)) and r[metric] == r[metric]]
    if values:
        trial.metric_analysis = {**trial.metric_analysis, metric: {"max": max(values), "min": min(values)}}


def _last_line(fs, path: str) -> str | None:
    """The last non-empty line of a log file (its last LOG_TAIL_BYTES only), ANSI colours removed."""
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
                data = f.read()
        else:
            with fs.open_input_file(path) as f:
                f.seek(max(0, f.size() - LOG_TAIL_BYTES))
                data = f.read()
    except (FileNotFoundError, NotADirectoryError, OSError):
        return None
    lines = [_ANSI.sub("", ln).strip() for ln in data.decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else None
