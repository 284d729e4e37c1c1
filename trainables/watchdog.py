"""Ending a command's process group, and the detached watchdog that does it when a Ray worker dies.

`start_watchdog` (called by `trainables/command.py`) runs this file as a script (`python -S watchdog.py FD PGID
GRACE_S`, standard library only, so it starts in tens of milliseconds). The watchdog forks once
more and lets its launcher exit, so it is no process's direct child: Ray SIGKILLs a dying worker's
direct children (`RAY_kill_child_processes_on_worker_exit`), which would take a plain child
watchdog along. It then blocks on a pipe whose only write end the worker holds; end of file means
the worker closed it (the trial is over) or died. Either way it ends what is left of the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a member (a zombie leader not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: it exists
        return True


def end_group(pgid: int, grace_period_s: float, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM group `pgid`; SIGKILL it if a member is left after `grace_period_s` seconds.

    Args:
        reap: called while waiting (e.g. `Popen.poll` of the leader, when this process is its
            parent), so an exited leader does not keep the group alive as a zombie.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_period_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def start_watchdog(pgid: int, grace_period_s: float) -> int:
    """Start a detached process that ends group `pgid` (SIGTERM, then SIGKILL after the grace
    period) as soon as this process dies or closes the returned file descriptor.

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
            ],
            pass_fds=(read_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        launcher.wait()  # it forks the watchdog and exits at once
    finally:
        os.close(read_end)
    return write_end


def terminate_group(proc: subprocess.Popen, grace_period_s: float) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL what is left after `grace_period_s` seconds;
    reap `proc`. Safe to call twice."""
    end_group(proc.pid, grace_period_s, reap=proc.poll)
    proc.wait()


def main(argv: list[str]) -> None:
    """Watch: `argv` = [read end of the worker's pipe, process group id, grace period in seconds]."""
    fd, pgid, grace_period_s = int(argv[0]), int(argv[1]), float(argv[2])
    if os.fork():
        os._exit(0)  # the launcher exits; the watchdog is re-parented away from the worker
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    end_group(pgid, grace_period_s)


if __name__ == "__main__":
    main(sys.argv[1:])
