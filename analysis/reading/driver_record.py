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
import socket
import time
from pathlib import Path

from trainables.experiment import records
from trainables.experiment.outcome import DISK_FULL, FAILURE_GATE, TIME_BUDGET
from trainables.experiment.redaction import REDACTED_FLAGS

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


def resume_command(launch: dict | None, resume: bool = True, retry_errored: bool = False) -> str:
    """The command that continues a sweep (`resume`), or starts it again, as shell text to run as printed,
    from the launch folder, in any shell (one without the launch's venv on its PATH included).

    Built from what the launch recorded in `raysweep.json` (`sweeps/engine/sweep_records/sweep_info.py`):
    `python`, the interpreter that ran the sweep (`sys.executable`), then `argv`, the script's path as
    launched and its flags, with `--resume` (and `--retry-errored`) added before a command's `--` (a
    script's own `--resume` after it is left alone). Each word is quoted for the shell once; a placeholder
    such as `{lr}` or `--out={trial_dir}/x` is left unquoted (braces without `,` or `..` are no brace
    expansion). e.g. ``/venv/bin/python sweeps/run_command.py --axis lr=0.1,0.01 --resume -- python train.py
    --lr {lr}``; a sweep the `raysweep` command launched (its `argv[0]` is that program) names it by its
    absolute path, ``/venv/bin/raysweep grid --resume``: a bare `raysweep` is not found where the venv is
    not active. The command's own programs are the ones resolved at launch (`sweeps/engine/command_sweep/
    programs.py`), whatever the new shell's PATH. The launch's `--notify` flags are left out: the record keeps
    their URLs redacted (`trainables/experiment/redaction.py`), and a redacted URL would send nowhere.

    Args:
        launch: the `raysweep.json` record (or any dict with `argv` and `python`); None or no `argv`:
            a generic hint. A record without `python` (an older sweep) starts with `python`.
        resume: add `--resume` (else the command line as launched, without it).
        retry_errored: add `--retry-errored` too (with `resume`): errored trials run again.
    """
    argv = (launch or {}).get("argv")
    if not argv:
        return "its command line and --resume" if resume else "its command line"
    argv = [str(a) for a in argv]
    end = argv.index("--") if "--" in argv else len(argv)
    added = (["--resume"] if resume else []) + (["--retry-errored"] if resume and retry_errored else [])
    flags = [a for a in _without_redacted(argv[:end]) if a not in ("--resume", "--retry-errored")] + added
    if Path(argv[0]).name == "raysweep":  # the console command, by its path
        words = [os.path.abspath(argv[0]), *flags[1:], *argv[end:]]
    else:
        words = [launch.get("python") or "python", *flags, *argv[end:]]
    return " ".join(_shell_word(word) for word in words)


def _without_redacted(flags: list[str]) -> list[str]:
    """`flags` without each `REDACTED_FLAGS` flag and its value (`--notify URL`, `--notify=URL`)."""
    out, skip = [], False
    for word in flags:
        if skip:
            skip = False
        elif word in REDACTED_FLAGS:
            skip = True
        elif word.partition("=")[0] not in REDACTED_FLAGS:
            out.append(word)
    return out


def continue_command(launch: dict | None, counts: dict, ended_by: str | None, resumed: bool = True) -> str | None:
    """The command that continues an ended sweep (`resume_command`), or None when nothing does.

    Args:
        launch: as for `resume_command`.
        counts: its trials by outcome (`trainables.experiment.outcome.count_outcomes`).
        ended_by: why it ended (`outcome.SWEEP_ENDS`; None: unknown, a driver that is gone).
        resumed: its last run was a `--resume` (`driver.json`'s `resumed`).
    Returns:
        None after the time budget (Tune ended every trial and finished the searcher: a resume runs none),
        with nothing left to run, or after the failure gate stopped a new launch (its cause is most often the
        script, and `--resume` keeps the launch's copy of the code: the same command again, without
        `--resume`, runs a fixed one, as its hint says); `--resume --retry-errored` after the failure gate
        stopped a resume (the trials it never started are held as errored, which a plain --resume leaves:
        an interpreter or a path that changed since the launch), after a full disk (its writes failed the trials)
        or when only errored trials are left; else
        `--resume`.
    """
    left = sum(counts.get(key, 0) for key in ("running", "pending", "interrupted", "not_run"))
    errored = counts.get("errored", 0)
    if ended_by == TIME_BUDGET or not (left or errored) or (ended_by == FAILURE_GATE and not resumed):
        return None
    return resume_command(launch, retry_errored=ended_by in (FAILURE_GATE, DISK_FULL) or not left)


def continue_advice(launch: dict | None, counts: dict, ended_by: str | None, resumed: bool = True) -> str:
    """`continue_command` in words, as the driver's last line and `--status` say it; "" when nothing continues
    the sweep: `continue with: CMD` (and what `--retry-errored` adds when trials errored), after the failure
    gate `once the cause is fixed, continue with: CMD`, with only errored trials left `N trial(s) errored; to
    run them again: CMD`."""
    command = continue_command(launch, counts, ended_by, resumed)
    errored = counts.get("errored", 0)
    if command is None:
        return ""
    argv = [str(a) for a in (launch or {}).get("argv") or []]
    own = argv[: argv.index("--")] if "--" in argv else argv
    notify = " (add your --notify URLs again, which are not recorded)" if len(_without_redacted(own)) < len(own) else ""
    if ended_by == FAILURE_GATE:
        return f"once the cause is fixed, continue with: {command}{notify}"
    if ended_by == DISK_FULL:  # its errored trials failed for want of space: they run again
        return f"continue with: {command}{notify}"
    if "--retry-errored" in command.split():
        return f"{errored} trial(s) errored; to run them again: {command}{notify}"
    more = f" (add --retry-errored to run its {errored} errored trial(s) again too)" if errored else ""
    return f"continue with: {command}{more}{notify}"


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
