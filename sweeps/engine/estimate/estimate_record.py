"""The estimate `--estimate` made, kept beside the experiment until the sweep's launch records it in
`raysweep.json`, and set against the wall time measured at the end of the run
(`wall time 0:01:05, estimated 0:01:10 (+8 %)`)."""

from __future__ import annotations

import sys
import time

from analysis.progress import format_duration
from trainables.experiment import records


def pending_record(document: dict) -> dict:
    """What `--estimate` keeps beside the experiment for the launch: the estimate, when, and the command
    line it was made for (without the estimate's own flags)."""
    return {"argv": launch_argv(sys.argv), "made": time.time(), **document}


def launch_argv(argv: list[str]) -> list[str]:
    """`argv` without the flags that change nothing the sweep costs: the estimate's own (`--estimate`,
    `--estimate-epochs N`, `--estimate-cells X`, `--json`) and the console's (`--quiet`, `--report` /
    `--no-report`, `--progress-every S`, `--notify URL`), before a `--` (a command's own words after it stay): an
    estimate made for one command line applies to the launch of another with the same words left."""
    alone, valued = (
        ("--estimate", "--json", "--quiet", "--report", "--no-report"),
        ("--estimate-epochs", "--estimate-cells", "--progress-every", "--notify"),
    )
    own = argv[: argv.index("--")] if "--" in argv else argv  # after `--`: the user's command, as it is
    out, skip = [], False
    for word in own:
        flag = word.split("=", 1)[0]
        if skip or flag in alone or flag in valued:
            skip = not skip and flag in valued and "=" not in word
            continue
        out.append(word)
    return out + argv[len(own) :]


def take_pending_estimate(storage_path: str, name: str) -> dict | None:
    """At a new sweep's launch: the estimate `--estimate` made for this very command line (removed
    from beside the experiment: it is the experiment's now), or None."""
    record = records.read_pending_estimate(storage_path, name)
    if record is None:
        return None
    records.delete_pending_estimate(storage_path, name)
    if record.get("argv") != launch_argv(sys.argv):
        return None
    return record["estimate"] | {"made": record.get("made")}


def record_actual(experiment_dir: str, resumed: bool) -> str:
    """At the end of a run: its wall time (process start to now), set against the estimate that its
    launch kept in `raysweep.json` (a new sweep's run only; recorded there as `actual_wall_s`).
    Returns the final line's words: `wall time 0:01:05, estimated 0:01:10 (+8 %)`."""
    from sweeps.engine.sweep_records.provenance_capture import process_start_time

    wall_s = time.time() - process_start_time()
    settings = records.read_settings(experiment_dir) or {}
    kept = None if resumed else settings.get("estimate")
    if kept:
        records.write_settings(experiment_dir, settings | {"estimate": kept | {"actual_wall_s": wall_s}})
    return estimate_vs_actual(kept, wall_s)


def estimate_vs_actual(estimate: dict | None, wall_s: float) -> str:
    """`wall time 0:01:05, estimated 0:01:10 (+8 %)`: the error is (estimate - actual) / actual; the
    wall time alone without an estimate."""
    line = f"wall time {format_duration(wall_s)}"
    if not estimate or not estimate.get("wall_s"):
        return line
    error = (estimate["wall_s"] - wall_s) / wall_s
    return f"{line}, estimated {format_duration(estimate['wall_s'])} ({100 * error:+.0f} %)"
