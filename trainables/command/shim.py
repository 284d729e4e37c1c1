"""The parent of a trial's command, so that a dying Ray worker does not SIGKILL the command mid-write.

A Ray worker that exits SIGKILLs its direct children before anything else runs
(`RAY_kill_child_processes_on_worker_exit`, default on; measured: before the worker's `atexit`
hooks), and Tune ends a stopped trial's actor right after `stop` returns. Run as
`python -S command_shim.py ARGV...` (standard library only: it starts in tens of milliseconds),
this process is that direct child: it starts ARGV in its own process group (the one
`start_command` made), waits for it, and exits as it did (its exit code, or the same signal), so
`Popen.wait` reads the command's own status. It ignores SIGTERM, SIGINT and SIGHUP (they reach the
command through its group); when Ray kills it, the command keeps running until the watchdog
(`trainables/command/watchdog.py`) has let its writes finish and ends the group.
"""

from __future__ import annotations

import os
import signal
import sys

NOT_STARTED = 127  # the shell's code for a command that could not be run


def _ignore(signum, frame) -> None:
    """A handler, not SIG_IGN: a handler is reset by exec, so the command gets the default action."""


def main(argv: list[str]) -> int:
    """Run `argv` as a child, wait for it; return its exit code (or die of its signal)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"raysweep: cannot run {argv[0]!r}: {e.strerror}\n".encode())
        os._exit(NOT_STARTED)
    _, status = os.waitpid(pid, 0)  # retried after a signal's handler runs (PEP 475)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum  # a signal whose default action is not to end the process
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
