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

import os
import re
import shlex
import shutil
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


def resume_command(launch: dict | None, resume: bool = True) -> str:
    """The command that continues a sweep (`resume`), or starts it again, as shell text to run as printed.

    Built from what the launch recorded in `raysweep.json` (`sweeps/engine/run/launch.py:sweep_info`):
    `python`, the interpreter that ran the sweep (`sys.executable`), then `argv`, the script's path as
    launched and its flags, with `--resume` added before a command's `--` (a script's own `--resume`
    after it is left alone). Each word is quoted for the shell once; a placeholder such as `{lr}` or
    `--out={trial_dir}/x` is left unquoted (braces without `,` or `..` are no brace expansion).
    e.g. ``/venv/bin/python sweeps/run_command.py --axis lr=0.1,0.01 --resume -- python train.py --lr {lr}``;
    a sweep the `raysweep` command launched (its `argv[0]` is that program) resumes as ``raysweep grid --resume``
    where this process's PATH finds that same program, else by its path (``/venv/bin/raysweep grid --resume``).

    Args:
        launch: the `raysweep.json` record (or any dict with `argv` and `python`); None or no `argv`:
            a generic hint. A record without `python` (an older sweep) starts with `python`.
        resume: add `--resume` (else the command line as launched, without it).
    """
    argv = (launch or {}).get("argv")
    if not argv:
        return "its command line and --resume" if resume else "its command line"
    argv = [str(a) for a in argv]
    end = argv.index("--") if "--" in argv else len(argv)
    flags = [a for a in argv[:end] if a != "--resume"] + (["--resume"] if resume else [])
    if Path(argv[0]).name == "raysweep":  # the console command: by name where this PATH finds that one
        found = shutil.which("raysweep")
        same = found is not None and os.path.realpath(found) == os.path.realpath(argv[0])
        words = ["raysweep" if same else argv[0], *flags[1:], *argv[end:]]
    else:
        words = [launch.get("python") or "python", *flags, *argv[end:]]
    return " ".join(_shell_word(word) for word in words)


_PLAIN_WORD = re.compile(r"[\w@%+=:,./{}-]+")  # shlex's safe characters and braces
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


def _shell_word(word: str) -> str:
    """`word` quoted for a POSIX shell (`shlex.quote`), except a word of safe characters whose braces
    the shell leaves as they are (a placeholder: `{lr}`, `{trial_dir}/ckpt`)."""
    if "{" in word and _PLAIN_WORD.fullmatch(word) and not _BRACE_EXPANSION.search(word):
        return word
    return shlex.quote(word)


def exit_code(state: dict) -> int:
    """0 while the sweep runs or when it finished; 1 when its driver is gone with trials left."""
    return 1 if state["driver_alive"] is False and state["left"] else 0
