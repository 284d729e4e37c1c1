"""The record a sweep's driver keeps at `<storage-path>/<name>/driver.json`: who runs the sweep, and
whether it still does. This is the reader; `sweeps/engine/sweep_records/driver_lock.py` writes it.

    {"host": "gpu-box", "pid": 4242, "since": "2026-11-22 18:50:18", "heartbeat": 1795373431.2,
     "ended": null, "exit_code": null}

The driver writes it when the sweep starts, refreshes "heartbeat" (time.time()) every few seconds
while it runs, and at a normal exit (any exit code, Ctrl-C included) sets "ended" and "exit_code";
the file is not deleted. A killed driver (SIGKILL, OOM killer, a reboot) leaves "ended" null and
its heartbeat ages.

No Ray, pandas or torch here: `python -m analysis EXP --status` reads it. Local folders and URIs
(s3://...) are read through pyarrow's filesystems (`analysis/reading/tune_state.py:resolve_source`).
"""

from __future__ import annotations

import shlex
import socket
import time
from pathlib import Path

from trainables.experiment import records

HEARTBEAT_TIMEOUT_S = 60.0  # a driver on another host whose heartbeat is older than this is gone


def read_holder(experiment_dir: str) -> dict | None:
    """The driver record of the experiment at `experiment_dir` (local path or URI).

    Returns:
        The record (see the module docstring), or None when there is none or it cannot be read
        (an experiment from before driver records, or a file being written).
    """
    try:
        record = records.read_driver(experiment_dir)  # a torn record: warned about, None
    except ValueError:  # a URI no file system opens
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def holder_alive(record: dict, now: float | None = None) -> bool:
    """Whether the driver of `record` still runs: it has not ended, and either it is on this host and
    its pid is alive (not a zombie), or it is on another host and its heartbeat is less than
    HEARTBEAT_TIMEOUT_S seconds old (`now`: time.time() by default)."""
    if record.get("ended") is not None:
        return False
    if record.get("host") == socket.gethostname():
        return _pid_alive(record["pid"])
    heartbeat = record.get("heartbeat")
    now = time.time() if now is None else now
    return isinstance(heartbeat, (int, float)) and now - heartbeat < HEARTBEAT_TIMEOUT_S


def describe_holder(record: dict, now: float | None = None) -> str:
    """`host H, pid P, since S (heartbeat N s ago)` for messages."""
    age = (now or time.time()) - float(record.get("heartbeat") or 0)
    return (
        f"host {record.get('host')}, pid {record.get('pid')}, since {record.get('since')} (heartbeat {age:.0f} s ago)"
    )


def _pid_alive(pid: int) -> bool:
    import psutil  # a core dependency; imported here to keep the module's import light

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # it exists, under another user
        return True


def resume_command(argv: list | None, resume: bool = True) -> str:
    """The sweep's own command line (from `raysweep.json`) with `--resume` (or, `resume=False`,
    without it) as plain shell text, e.g. ``python sweeps/noise_grid.py --resume``, or for a sweep the
    `raysweep` command launched (its `sys.argv[0]` is that program) ``raysweep grid --resume``; a
    generic hint when the command line is unknown. `--resume` goes before a `--` (what follows is a
    command sweep's own command)."""
    if not argv:
        return "its command line and --resume" if resume else "its command line"
    own, command = (argv[: argv.index("--")], argv[argv.index("--") :]) if "--" in argv else (argv, [])
    args = [a for a in own if a != "--resume"] + (["--resume"] if resume else []) + command
    if Path(str(args[0])).name == "raysweep":
        return " ".join(shlex.quote(str(a)) for a in ["raysweep", *args[1:]])
    return "python " + " ".join(shlex.quote(str(a)) for a in args)


def exit_code(state: dict) -> int:
    """0 while the sweep runs or when it finished; 1 when its driver is gone with trials left."""
    return 1 if state["driver_alive"] is False and state["left"] else 0
