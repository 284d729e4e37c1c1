"""Ending a command's process group, and the detached watchdog that does it when a Ray worker dies.

`start_watchdog` (called by `trainables/command/runner.py`) runs this file as a script (`python -S watchdog.py
FD PGID GRACE_S WRITE_WAIT_S FOLDER...`, standard library and psutil only: it starts in tens of milliseconds).
The watchdog forks once more and lets its launcher exit, so it is no process's direct child: Ray SIGKILLs a
dying worker's direct children (`RAY_kill_child_processes_on_worker_exit`), which would take a plain child
watchdog along. It then blocks on a pipe whose only write end the worker holds; end of file means
the worker closed it (the trial is over) or died. Either way it ends what is left of the group.

Before any SIGTERM, `end_group` lets the writes in progress finish (`wait_for_writes`): a script stopped
in the middle of `torch.save` would leave a torn file (docs/fault-tolerance.md, "A stop never tears a file").
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

GRACE_PERIOD_S = 10.0  # seconds between SIGTERM and SIGKILL when a trial's command is stopped (--grace-period-s)
WRITE_WAIT_S = 30.0  # before that SIGTERM, the longest wait for the command's writes to finish (--write-wait-s)
WRITE_QUIET_S = 1.0  # a stop waits until no file under the trial's folders was opened or written for this long
WRITE_POLL_S = 0.1  # how often `wait_for_writes` looks at the group's open files


@dataclasses.dataclass(frozen=True)
class Writes:
    """The writes a stop waits for before its SIGTERM (`wait_for_writes`); none by default."""

    folders: Sequence[str] = ()  # files being written under these folders are waited for
    wait_s: float = 0.0  # at most this many seconds


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a member (a zombie leader not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: it exists
        return True


def files_being_written(pgid: int, folders: Sequence[str | Path]) -> dict[tuple[int, int, str], tuple[int, int]]:
    """The regular files under `folders` that a member of process group `pgid` holds open for writing,
    other than its stdout and stderr (a command trial's output files, under the trial folder).

    Read with psutil's `Process.open_files()` (on Linux its `mode` and `position` come from
    /proc/PID/fdinfo); members that end or hide their files while being read are skipped.
    Returns:
        {(pid, fd, path): (position, size) in bytes}, the size from `os.stat` (it grows during one
        large `write`, which moves the position only when it returns); {} where psutil is missing
        or cannot list open files.
    """
    try:
        import psutil
    except ImportError:
        return {}
    roots = [os.path.join(os.path.realpath(f), "") for f in folders]
    found = {}
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) != pgid:
                continue
            for file in process.open_files():
                if file.fd in (1, 2) or file.mode == "r":  # its stdout / stderr files (trainables/command/runner.py)
                    continue
                if any(os.path.realpath(file.path).startswith(r) for r in roots):
                    found[(process.pid, file.fd, file.path)] = (file.position, _size(file.path))
        except (psutil.Error, OSError):
            continue
    return found


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def wait_for_writes(
    pgid: int, folders: Sequence[str | Path], timeout_s: float, quiet_s: float = WRITE_QUIET_S, reap=None
) -> float:
    """Wait until group `pgid` has opened, closed and written no file under `folders` for `quiet_s`
    seconds (a file held open but idle, such as a log, does not hold the wait), the group is gone,
    or `timeout_s` seconds have passed (`files_being_written`, polled every `WRITE_POLL_S`).

    Returns:
        Seconds waited.
    """
    start = time.monotonic()
    quiet_since, last = start, None
    while (now := time.monotonic()) - start < timeout_s:
        if reap is not None:
            reap()
        if not group_alive(pgid):
            break
        writes = files_being_written(pgid, folders)
        if writes != last:
            quiet_since, last = now, writes
        elif now - quiet_since >= quiet_s:
            break
        time.sleep(WRITE_POLL_S)
    return time.monotonic() - start


def end_group(
    pgid: int, grace_period_s: float, reap: Callable[[], object] | None = None, writes: Writes = Writes()
) -> None:
    """Let group `pgid` finish its writes, SIGTERM it, and SIGKILL it if a member is left after
    `grace_period_s` seconds.

    Args:
        reap: called while waiting (e.g. `Popen.poll` of the leader, when this process is its
            parent), so an exited leader does not keep the group alive as a zombie.
        writes: first `wait_for_writes` under its folders, at most its `wait_s`.
    """
    if writes.folders and writes.wait_s > 0:
        wait_for_writes(pgid, writes.folders, writes.wait_s, reap=reap)
    escaped = escaped_descendants(pgid)  # read before the SIGTERM: orphans lose their parent link
    _signal_each(escaped, signal.SIGTERM)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_period_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(pgid) and not any(p.is_running() for p in escaped):
            return
        time.sleep(0.05)
    _signal_each(escaped, signal.SIGKILL)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def escaped_descendants(pgid: int) -> list:
    """psutil Processes descended from a member of group `pgid` that have left it (`setsid`,
    `setpgid`: a launcher's ranks, a daemon), which a signal to the group would miss; [] without psutil.
    `Process.is_running` compares the start time too, so a pid reused later is never signalled."""
    try:
        import psutil
    except ImportError:
        return []
    escaped = {}
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) != pgid:
                continue
            for child in process.children(recursive=True):
                if os.getpgid(child.pid) != pgid:
                    escaped[child.pid] = child
        except (psutil.Error, OSError):
            continue
    return list(escaped.values())


def _signal_each(processes: Sequence, signum: int) -> None:
    """Send `signum` to each psutil Process still running (the same process, not a reused pid)."""
    for process in processes:
        try:
            if process.is_running():
                process.send_signal(signum)
        except Exception:  # psutil.Error: gone or not ours
            pass


def start_watchdog(pgid: int, grace_period_s: float, writes: Writes = Writes()) -> int:
    """Start a detached process that ends group `pgid` (`end_group`: the writes in progress under
    `writes`' folders, then SIGTERM, then SIGKILL after the grace period) as soon as this process
    dies or closes the returned file descriptor.

    Returns:
        The pipe's write end; `os.close` it when the trial is over (the watchdog then exits, after
        ending whatever is still left in the group).
    """
    read_end, write_end = os.pipe()  # not inheritable (PEP 446): only this process holds the write end
    try:
        launcher = subprocess.Popen(
            [
                sys.executable,
                "-S",
                str(Path(__file__).with_name("watchdog.py")),
                str(read_end),
                str(pgid),
                str(grace_period_s),
                str(writes.wait_s),
                *map(str, writes.folders),
            ],
            pass_fds=(read_end,),
            env={**os.environ, "PYTHONPATH": _psutil_path()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        launcher.wait()  # it forks the watchdog and exits at once
    finally:
        os.close(read_end)
    return write_end


def terminate_group(proc: subprocess.Popen, grace_period_s: float, writes: Writes = Writes()) -> None:
    """`end_group` of the process group led by `proc` (writes in progress first, see `end_group`'s
    `writes`), then reap `proc`. Safe to call twice."""
    end_group(proc.pid, grace_period_s, reap=proc.poll, writes=writes)
    proc.wait()


def _psutil_path() -> str:
    """PYTHONPATH for the watchdog (`python -S` skips site-packages): the folder psutil is in, if any."""
    try:
        import psutil
    except ImportError:
        return os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(filter(None, [str(Path(psutil.__file__).parents[1]), os.environ.get("PYTHONPATH")]))


def main(argv: list[str]) -> None:
    """Watch: `argv` = [read end of the worker's pipe, process group id, grace period in seconds,
    longest wait for writes in seconds, folders whose writes are waited for...]."""
    fd, pgid, grace_period_s = int(argv[0]), int(argv[1]), float(argv[2])
    writes = Writes(argv[4:], float(argv[3])) if len(argv) > 3 else Writes()
    if os.fork():
        os._exit(0)  # the launcher exits; the watchdog is re-parented away from the worker
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    end_group(pgid, grace_period_s, writes=writes)


if __name__ == "__main__":
    main(sys.argv[1:])
