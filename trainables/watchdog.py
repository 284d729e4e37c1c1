"""Ending a command's process group, and the detached watchdog that does it when a Ray worker dies.

`trainables/command.py:start_watchdog` runs this file as a script (`python -S watchdog.py FD PGID
GRACE_S`, standard library only, so it starts in tens of milliseconds). The watchdog forks once
more and lets its launcher exit, so it is no process's direct child: Ray SIGKILLs a dying worker's
direct children (`RAY_kill_child_processes_on_worker_exit`), which would take a plain child
watchdog along. It then blocks on a pipe whose only write end the worker holds; end of file means
the worker closed it (the trial is over) or died. Either way it ends what is left of the group.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable


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
