"""A stop never tears a file: `trainables/command/watchdog.py:wait_for_writes` with real processes holding files open,
the command shim, and a stand-in worker SIGKILLed mid-save as Ray kills a dying worker's children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.helpers.processes import wait_until
from trainables.command.watchdog import files_being_written, group_alive, wait_for_writes

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
# Opens argv[1] for writing, says so, writes argv[2] chunks of 1 MiB argv[3] s apart (forever if < 0),
# closes it, says so, then sleeps; a SIGTERM (default action) ends it wherever it is.
WRITER = """
import sys, time
path, chunks, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "wb") as f:
    print("open", flush=True)
    n = 0
    while chunks < 0 or n < chunks:
        f.write(b"x" * (1 << 20)); f.flush(); n += 1
        time.sleep(delay)
print("closed", flush=True)
time.sleep(600)
"""


def start_writer(path: Path, chunks: int, delay_s: float) -> subprocess.Popen:
    """The writer in a session (process group) of its own, once its file is open."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(chunks), str(delay_s)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "open"
    return proc


def stop(proc: subprocess.Popen) -> None:
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_file_being_written_holds_the_stop_until_it_is_closed(tmp_path):
    proc = start_writer(tmp_path / "model.pt", chunks=30, delay_s=0.05)
    try:
        assert [path for (_, _, path) in files_being_written(proc.pid, [tmp_path])] == [str(tmp_path / "model.pt")]
        assert files_being_written(proc.pid, [tmp_path / "elsewhere"]) == {}  # only files under the folders
        wait_for_writes(proc.pid, [tmp_path], timeout_s=60)
        assert (tmp_path / "model.pt").stat().st_size == 30 * MIB  # whole when the wait ends
        assert proc.poll() is None and files_being_written(proc.pid, [tmp_path]) == {}
    finally:
        stop(proc)


def test_an_idle_open_file_does_not_hold_the_stop_and_a_busy_one_holds_it_at_most_the_timeout(tmp_path):
    idle = start_writer(tmp_path / "log.txt", chunks=-1, delay_s=3600)  # one write, then open and idle: a log file
    busy = start_writer(tmp_path / "stream.bin", chunks=-1, delay_s=0.05)
    try:
        assert wait_for_writes(idle.pid, [tmp_path], timeout_s=60) < 30
        assert idle.poll() is None and files_being_written(idle.pid, [tmp_path])  # still open: not waited for
        assert wait_for_writes(busy.pid, [tmp_path], timeout_s=2) >= 2
    finally:
        stop(idle)
        stop(busy)


def test_killed_worker_mid_save_the_shim_keeps_the_command_and_the_watchdog_lets_the_save_finish(tmp_path):
    """A stand-in worker starts a command that saves 40 MiB in chunks, under the shim, with the watchdog; the
    worker and its direct children (the shim) are SIGKILLed mid-save, as Ray does when a worker exits."""
    target = tmp_path / "trial" / "checkpoint.pth"
    target.parent.mkdir()
    worker_code = (
        "import sys, time\n"
        "from trainables.command.process import start_command\n"
        "from trainables.command.watchdog import Writes, start_watchdog\n"
        "import os\n"
        f"proc = start_command([sys.executable, '-c', {WRITER!r}, {str(target)!r}, '40', '0.05'], dict(os.environ))\n"
        f"start_watchdog(proc.pid, 5.0, Writes([{str(target.parent)!r}], 60.0))\n"
        "print(proc.pid, flush=True)\n"
        "print(proc.stdout.readline().decode().strip(), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-c", worker_code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    leader = int(worker.stdout.readline())
    assert worker.stdout.readline().strip() == "open"
    try:
        direct = psutil.Process(worker.pid).children()
        assert [p.pid for p in direct] == [leader]  # the shim: the command is its child, not the worker's
        for process in [*direct, psutil.Process(worker.pid)]:
            process.send_signal(signal.SIGKILL)
        worker.wait()
        wait_until(lambda: not group_alive(leader), 120)
        assert not group_alive(leader)  # the watchdog ended the command once its file was closed
        assert target.stat().st_size == 40 * MIB
    finally:
        if group_alive(leader):
            os.killpg(leader, signal.SIGKILL)


def test_the_shim_exits_as_its_command_did(tmp_path):
    from trainables.command.process import start_command

    for argv, code in (
        (["sh", "-c", "exit 3"], 3),
        (["sh", "-c", "kill -TERM $$"], -signal.SIGTERM),
        ([str(tmp_path / "missing")], 127),
    ):
        proc = start_command(argv, dict(os.environ))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, (argv, err)
    assert b"cannot run" in err and b"missing" in err


def test_the_command_gets_the_signal_defaults_a_shell_gives(tmp_path):
    """Python ignores SIGPIPE and SIGXFSZ and an exec keeps them ignored: the shim restores the defaults, so a
    pipeline in the user's command ends as in their shell (`yes | head -1`: no `Broken pipe` error)."""
    from trainables.command.process import start_command

    proc = start_command(["sh", "-c", "grep SigIgn /proc/$$/status; yes | head -1"], dict(os.environ))
    out, err = proc.communicate(timeout=60)
    ignored = int(out.split()[1], 16)  # a bit mask: bit n-1 for signal n
    assert proc.returncode == 0 and out.split()[2] == b"y" and err == b""
    assert not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)), hex(ignored)
