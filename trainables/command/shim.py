"""The parent of a trial's command, so that a dying Ray worker does not SIGKILL the command mid-write.

A Ray worker that exits SIGKILLs its direct children before anything else runs
(`RAY_kill_child_processes_on_worker_exit`, default on; measured: before the worker's `atexit`
hooks), and Tune ends a stopped trial's actor right after `stop` returns. Run as
`python -S shim.py PID_FD ARGV...` (standard library only: it starts in tens of milliseconds),
this process is that direct child: it starts ARGV in its own process group (the one
`start_command` made), writes ARGV's pid to the pipe PID_FD and closes it (the log prefix names that pid,
read even when ARGV ends at once), waits for ARGV, and exits as it did (its exit code, or the same signal),
so `Popen.wait` reads the command's own status. It ignores SIGTERM, SIGINT and SIGHUP (they reach the
command through its group); when Ray kills it, the command keeps running until the watchdog
(`trainables/command/watchdog.py`) has let its writes finish and ends the group.
"""

from __future__ import annotations

import os
import signal
import sys

NOT_STARTED = 127  # the shell's code for a command that could not be run
# What Python ignores at its start and an exec keeps ignored: the command gets the defaults, as from a shell
# (`yes | head -1` then ends quietly), as `subprocess.Popen(restore_signals=True)` does
RESTORED = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name))


def _ignore(signum, frame) -> None:
    """A handler, not SIG_IGN: a handler is reset by exec, so the command gets the default action."""


def main(pid_fd: int, argv: list[str]) -> int:
    """Run `argv` as a child, write its pid to the pipe `pid_fd`, wait for it; return its exit code (or die of
    its signal)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    os.set_inheritable(pid_fd, False)  # not the command's: its exec closes it
    pid = os.fork()
    if pid == 0:
        for signum in RESTORED:
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"raysweep: cannot run {argv[0]!r}: {e.strerror}\n".encode())
        os._exit(NOT_STARTED)
    try:
        os.write(pid_fd, b"%d\n" % pid)
    except OSError:  # the reader gave up waiting (a broken pipe): it names the shim's pid
        pass
    os.close(pid_fd)
    _, status = os.waitpid(pid, 0)  # retried after a signal's handler runs (PEP 475)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum  # a signal whose default action is not to end the process
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    os._exit(main(int(sys.argv[1]), sys.argv[2:]))
