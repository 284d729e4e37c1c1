"""`run_command.py --check`: run the first cell's command once, without Ray, and show what the sweep would read.

The command runs as a trial would run it (same environment, `RAYSWEEP_*` variables, working
folder: a copy of the code in `{trial_dir}` unless --in-place, metric parsing by
`trainables/command/parse.py:StepContext`), but in this process, with `{trial_dir}` a temporary
folder removed afterwards: nothing is written under --storage-path. `{gpu}` is empty (no Ray).
"""

from __future__ import annotations

import math
import os
import queue
import re
import shlex
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from sweeps.engine import grid
from sweeps.engine.command_sweep import command_template
from sweeps.engine.flags import UsageError


def check_command(args) -> int:
    """Run `args.cells[0]`'s command, stream its output, print each metrics row read.

    Args:
        args: the parsed flags of `sweeps/run_command.py` (cells, template, step key, patterns,
            --metrics-from, --metric, --test-metric).
    Returns:
        0 when the command exited 0 and --metric (and --test-metric) were in some row; else 1.
    """
    from trainables.command.key_sources import trial_origins
    from trainables.command.parse import STREAMS_READ, StepContext
    from trainables.command.process import start_command
    from trainables.command.runner import METRICS_FILE
    from trainables.command.sources import candidate_keys, read_metrics_file, record_reader, skipped_lines
    from trainables.command.watchdog import terminate_group

    cell = args.cells[0]
    name = grid.trial_namer(command_template.cell_axes(args.cells))(types.SimpleNamespace(config=cell))
    patterns = [re.compile(p) for p in args.metric_pattern]
    streams = STREAMS_READ.get(args.metrics_from, ())
    seen: set = set()
    printed: dict = {"stdout": [], "stderr": []}
    with tempfile.TemporaryDirectory(prefix="raysweep-check-") as folder:
        work_dir, metrics_file = _prepare_folder(args, Path(folder), METRICS_FILE)
        argv = command_template.render(args.template, cell, str(work_dir), name)
        print(f"--check {name}: {shlex.join(argv)}", flush=True)
        context = StepContext(args.step_key, patterns, args.objective)
        events = record_reader(args.metrics_from, work_dir, args.step_key, args.objective, since=time.time() - 2.0)

        def show(rows: list[dict]) -> None:
            for row in rows:
                seen.update(row)
                print("  metrics row: " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)

        cwd = None if args.in_place else str(work_dir)
        env = _command_env(args, cell, (work_dir, Path(cwd or os.getcwd())), (name, argv), metrics_file)
        proc = start_command(argv, env, cwd)
        try:
            for label, line in _interleaved(proc):
                print(f"  {'' if label == 'stdout' else 'stderr '}| {line}", flush=True)
                printed[label].append(line)
                printed_rows = context.feed(line, label) if label in streams else []
                show(events.poll(printed_rows) if events else printed_rows)
            code = proc.wait()
        finally:
            terminate_group(proc, 2.0)
        _keep_new_paths(Path(folder), work_dir, code, args.in_place)
        last = context.close(crashed=code != 0) if streams else []  # a crash before any step: a preamble
        written = read_metrics_file(metrics_file, 0, args.step_key)[0]
        show(events.close(last + written) if events else last + written)
        held = _say_source(args, events, bool(seen), work_dir)
        _say_key_sources(seen, trial_origins(context, events, [k for row in written for k in row], metrics_file))
    if code != 0:
        return _crashed(code, printed["stderr"], os.getcwd() if args.in_place else f"{work_dir} {COPY_REMOVED}")
    found = candidate_keys(printed, args.step_key, patterns)
    candidates = (found, skipped_lines(printed, args.step_key, patterns))
    return _verdict(code, args.objective.step_metrics, seen, candidates, streams, held)


def time_command(args, cell: dict, epochs: int | None, limit_s: float, gpus: float = 0.0):
    """`--estimate`: run `cell`'s command as `--check` does (its working folder and environment, no
    Ray), silently, and time it until `epochs` epochs after its first have ended (None: until it exits, or,
    once it printed its total (`epoch 3/50`), `--estimate-epochs` epochs after its first), for at most
    `limit_s` seconds, or until it exits.

    Args:
        args: the parsed flags of a command sweep (template, step key, patterns, --metrics-from, --metric).
        gpus: the GPU share per trial (`RAYSWEEP_GPU_MEMORY_FRACTION`, `{gpu}`: the first GPU when > 0).
    Returns:
        `sweeps.engine.estimate.first_cell.CellTiming`: seconds from the command's start to the end of each
        epoch (a row of its step key, as a trial reports it), the copies of the code, the epoch total
        it printed (`epoch 3/50`), whether it exited by itself and with which code.
    """
    from sweeps.engine.estimate.first_cell import CellTiming
    from trainables.command.parse import step_pattern
    from trainables.command.process import tracker_env
    from trainables.command.runner import (
        METRICS_FILE,
        STREAMS_READ,
        StepContext,
        command_env,
        start_command,
        terminate_group,
    )
    from trainables.command.sources import read_metrics_file, record_reader

    cells = getattr(args, "cells", [cell])  # lr_search.py's command reads the step and metrics by default
    step_key, metrics_from = getattr(args, "step_key", "epoch"), getattr(args, "metrics_from", "output")
    name = grid.trial_namer(command_template.cell_axes(cells))(types.SimpleNamespace(config=cell))
    streams, steps = STREAMS_READ.get(metrics_from, ()), step_pattern(step_key)
    times: dict = {}
    with tempfile.TemporaryDirectory(prefix="raysweep-estimate-") as folder:
        work_dir, metrics_file = _prepare_folder(args, Path(folder), METRICS_FILE, times)
        argv = command_template.render(args.template, cell, str(work_dir), name, gpu="0" if gpus else "")
        env = command_env(cell, work_dir, name, metrics_file, gpus, not getattr(args, "no_memory_cap", False))
        tracker_env(env, work_dir, metrics_from)
        context = StepContext(step_key, [re.compile(p) for p in getattr(args, "metric_pattern", [])], args.objective)
        events = record_reader(metrics_from, work_dir, step_key, args.objective, since=time.time() - 2.0)
        started = time.monotonic()
        proc = start_command(argv, env, None if args.in_place else str(work_dir))
        lines: queue.Queue = queue.Queue()
        for stream, label in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            threading.Thread(target=_queue_lines, args=(stream, label, lines), daemon=True).start()
        ends, seen, total, offset, open_streams = [], set(), None, 0, 2
        try:
            while len(ends) <= _wanted(epochs, total, args) and time.monotonic() - started < limit_s and open_streams:
                rows = []
                try:
                    label, line = lines.get(timeout=0.2)
                    if line is None:
                        open_streams -= 1
                    elif label in streams:
                        rows = context.feed(line)
                        found = steps.search(line)
                        total = int(found["total"]) if found and found["total"] else total
                except queue.Empty:
                    pass
                if not open_streams:  # it exited: what its last step printed, then what it wrote last
                    rows += context.close(crashed=proc.wait() != 0) if streams else []
                written, offset = read_metrics_file(metrics_file, offset, step_key)
                rows += written + (events.poll(rows + written) if events else [])
                for row in rows:
                    if row[step_key] not in seen:  # an epoch ended: the first row of its step
                        seen.add(row[step_key])
                        ends.append(time.monotonic() - started)
            ran_s = time.monotonic() - started
        finally:
            terminate_group(proc, 2.0)
        code = proc.wait() if not open_streams else None  # None: stopped here, not ended by itself
    return CellTiming(ends, ran_s, times.get("snapshot_s", 0.0), times.get("fill_s", 0.0), total, code)


def _command_env(args, cell: dict, folders: tuple, command: tuple, metrics_file: Path) -> dict:
    """The command's environment, as a trial's (`command_env`, no GPU share), with W&B and MLflow pointed
    at `{trial_dir}` where the environment leaves them unset (`tracker_env`); each setting of a tracker
    the command or its script names (`trackers_named`) printed. `folders`: `{trial_dir}` and the folder the
    command runs in; `command`: the trial's name and argv."""
    from trainables.command.process import command_env, tracker_env, trackers_named

    (work_dir, cwd), (name, argv) = folders, command
    env = command_env(cell, work_dir, name, metrics_file, 0.0)
    named = trackers_named(argv, cwd, args.metrics_from)
    for setting in tracker_env(env, work_dir, args.metrics_from, named):
        print(f"  (set {setting}: unset in the environment)", flush=True)
    return env


def _say_source(args, events, read_any: bool, work_dir: Path) -> str:
    """Print the source the rows came from: the tracker `events` read (`wandb`, ...), else
    --metrics-from; returns the keys each tracker record held (`describe_sources`), for `_verdict`."""
    from trainables.command.trackers import TRACKERS, describe_sources, find_records, sources_of

    source, metrics_from = getattr(events, "source", None), args.metrics_from
    if source:
        found = "" if metrics_from == source else f"; found by --metrics-from output: they hold {args.metric}"
        files = [str(f.relative_to(work_dir)) for f in events.files.get(source, ()) if f.is_relative_to(work_dir)]
        files_read = f" read from {', '.join(files)}" if files else ""
        print(f"metrics source: {source} (its records under {{trial_dir}}{found}){files_read}", flush=True)
        if getattr(events, "disagreed", None):  # (step, printed, recorded)
            steps = ", ".join(
                f"{step} ({printed} printed, {recorded} recorded)" for step, printed, recorded in events.disagreed
            )
            print(
                f"metrics: the printed text disagreed with the {source} records at {args.step_key} {steps}", flush=True
            )
    else:
        print(f"metrics source: {metrics_from}{'' if read_any else ' (no row read)'}", flush=True)
        since = getattr(events, "since", None)
        written = [p for s in TRACKERS for p in (find_records(work_dir, s, since) if since else ())]
        if written:  # printed text was read while the command also wrote a tracker file
            names = ", ".join(str(p.relative_to(work_dir)) for p in written if p.is_relative_to(work_dir))
            print(f"metrics: read printed text only; tracker files written but not read: {names}", flush=True)
    return describe_sources(work_dir, args.step_key, sources_of(metrics_from))


def _say_key_sources(keys, origins: dict) -> None:
    """Print where each metric shown was read (`trainables/command/key_sources.py`), one line per key."""
    from trainables.command.key_sources import describe

    for key in [k for k in origins if k in keys]:  # in the order first read
        print(f"  metric source: {key} <- {describe(origins[key])}", flush=True)


def _prepare_folder(args, folder: Path, metrics_name: str, times: dict | None = None) -> tuple[Path, Path]:
    """Make `folder`/work (a copy of the code, as in a sweep, unless --in-place) and an empty metrics
    file; returns their paths. With `times` (--estimate): silent, and the seconds of the sweep's copy
    of the code (`snapshot_s`, once per sweep) and of the trial's (`fill_s`, once per trial) go there.
    Raises UsageError when the code is too large to copy."""
    from trainables.command.workdir import SnapshotTooLarge, fill_work_dir, snapshot_code
    from trainables.experiment import records

    work_dir, metrics_file = records.work_dir(folder), folder / metrics_name
    metrics_file.touch()
    if args.in_place:
        work_dir.mkdir()
        return work_dir, metrics_file
    started = time.monotonic()
    try:  # the trial's working folder: a copy of the code in the launch folder's place, as in a sweep
        snapshot_code(Path.cwd(), records.code_dir(folder), skip=(Path(args.storage_path),))
    except SnapshotTooLarge as e:
        raise UsageError(str(e)) from None
    copied = time.monotonic()
    working = fill_work_dir(records.code_dir(folder), work_dir)
    if times is not None:
        times.update(snapshot_s=copied - started, fill_s=time.monotonic() - copied)
    else:
        print(f"--check runs in a copy of {Path.cwd().resolve()}: {working}", flush=True)
    return work_dir, metrics_file


COPY_REMOVED = "(a copy of the launch folder, as each trial's; removed now)"


def _crashed(code: int, stderr: list[str], folder: str) -> int:
    """Say that the command crashed, not that a metric was missing: its exit, its exception line (or
    last stderr line), the folder it ran in, and a hint fitting the cause (from the failure record a
    trial would write, `failure.crash_failure`). Returns 1."""
    from trainables.command.failure import crash_failure
    from trainables.command.initial_failures import hint
    from trainables.command.process import exit_status

    lines = [line for line in stderr if line.strip()]
    failure = crash_failure(code, lines[-30:], "", folder.split(" (")[0], {}, early=True)
    error = failure.exception or (lines[-1].strip() if lines else "(no stderr output)")
    print(f"the command crashed ({exit_status(code)}) before --check could judge its metrics: {error}", flush=True)
    print(f"it ran in {folder}", flush=True)
    print(hint(failure, in_check=True), file=sys.stderr, flush=True)
    return 1


def _keep_new_paths(folder: Path, work_dir: Path, code: int, in_place: bool) -> None:
    """After a command that exited 0, what it created through `..` moves to the real folders, as a
    trial's does (`trainables/command/workdir.py:keep_new_paths`): data fetched by --check is there for the sweep."""
    from trainables.command.workdir import keep_new_paths
    from trainables.experiment import records

    for path in keep_new_paths(records.code_dir(folder), work_dir) if code == 0 and not in_place else []:
        print(f"--check: {path} (created through `..`) kept, for the sweep's trials", flush=True)


def _verdict(code: int, complete: tuple, seen: set, candidates: tuple, streams, held: str = "") -> int:
    """Print whether each of `complete` (--metric, --test-metric) was seen; when one was not, which
    stream held candidate lines and the keys nearest to it, the lines with numbers not read
    (`candidates`: `candidate_keys`, `skipped_lines`) and which tracker record what keys (`held`).
    Returns the exit code of --check."""
    from trainables.command.sources import describe_candidates

    missing = [m for m in complete if m not in seen]
    print(
        f"exit code {code}; "
        + "; ".join(
            f"{flag} {m}: {'seen' if m in seen else 'NOT seen'}"
            for flag, m in zip(("--metric", "--test-metric"), complete)
        ),
        flush=True,
    )
    if missing:
        print(
            f"{describe_candidates(candidates[0], streams, missing[0], candidates[1])}{'; ' + held if held else ''}; "
            "check --metric / --metric-pattern / --step-key / --metrics-from",
            file=sys.stderr,
        )
    return 0 if code == 0 and not missing else 1


def _interleaved(proc):
    """`(stream, line)` of `proc`'s stdout and stderr, interleaved as read (as the trial reads them)."""
    lines: queue.Queue = queue.Queue()
    for stream, label in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        threading.Thread(target=_queue_lines, args=(stream, label, lines), daemon=True).start()
    open_streams = 2
    while open_streams:
        label, line = lines.get()
        if line is None:
            open_streams -= 1
        else:
            yield label, line


def _queue_lines(stream, label: str, lines) -> None:
    """Put `(label, line)` on `lines` for each line of `stream` (bytes), then `(label, None)` at its end."""
    for raw in iter(stream.readline, b""):
        lines.put((label, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
    lines.put((label, None))


def _wanted(epochs: int | None, total: int | None, args) -> float:
    """Epochs after the first to time: `epochs`; unknown (None), until the command exits, or, once it printed
    its total, `--estimate-epochs`."""
    if epochs is not None:
        return epochs
    return args.estimate_epochs if total else math.inf
