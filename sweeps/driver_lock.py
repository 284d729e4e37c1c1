"""The record a sweep's driver keeps at `<storage-path>/<name>/driver.json`: who runs the sweep, and
whether it still does (the reader; shared contract of issues 20 and 21).

    {"host": "gpu-box", "pid": 4242, "since": "2026-11-22 18:50:18", "heartbeat": 1795373431.2,
     "ended": null, "exit_code": null}

The driver writes it when the sweep starts, refreshes "heartbeat" (time.time()) at least every
10 s while it runs, and at a normal exit (any exit code, Ctrl-C included) sets "ended" and
"exit_code"; the file is not deleted. A killed driver (SIGKILL, OOM killer, a reboot) leaves
"ended" null and its heartbeat ages.

No Ray, pandas or torch here: `python -m analysis EXP --status` reads it. Local folders and
URIs (s3://...) are read through pyarrow's filesystems (`analysis/tune_state.py:resolve_source`).

The writer (`hold`, `DriverHold`, `release_all`) keeps one driver per experiment: a sweep refuses
to start while another driver is alive there (`holder_alive`), writes the record, refreshes its
heartbeat from a background thread every `HEARTBEAT_S`, and records its end at exit. A holder
that is gone is taken over, with one line saying so. On a local folder a `filelock.FileLock` on
`.driver.lock` settles the race of two drivers started at once on this machine (the OS drops the
lock when its process dies); on object storage (s3://, no locks) the record is written and read
back after `SETTLE_S`: the driver whose record was overwritten gives way (the last writer keeps it).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time

from analysis import storage

DRIVER_FILE = "driver.json"
HEARTBEAT_TIMEOUT_S = 60.0  # a driver on another host whose heartbeat is older than this is gone
LOCK = ".driver.lock"  # the local file lock next to the record
HEARTBEAT_S = 5.0  # the running driver refreshes its heartbeat this often (seconds)
SETTLE_S = 2.0  # object storage: read the record back after this long; the overwritten one gives way


class ExperimentHeld(RuntimeError):
    """Another driver is alive on the experiment folder; the message names it in one line."""


def read_holder(experiment_dir: str) -> dict | None:
    """The driver record of the experiment at `experiment_dir` (local path or URI).

    Returns:
        The record (see the module docstring), or None when there is none or it cannot be read
        (an experiment from before driver records, or a file being written).
    """
    path = f"{str(experiment_dir).rstrip('/')}/{DRIVER_FILE}"
    try:
        if "://" in path:  # pyarrow's filesystems, else fsspec's (as the analysis reads experiments)
            from analysis.tune_state import resolve_source

            fs, inner, _ = resolve_source(path, None)
            with fs.open_input_stream(inner) as f:
                data = f.readall()
        else:
            with open(path, "rb") as f:
                data = f.read()
        record = json.loads(data)
    except (OSError, ValueError):  # missing, unreachable, half written
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
    return f"host {record.get('host')}, pid {record.get('pid')}, since {record.get('since')} (heartbeat {age:.0f} s ago)"


class DriverHold:
    """This process's hold on an experiment folder (see `hold`); `release(code)` ends it."""

    def __init__(self, experiment_dir: str, file_lock=None, previous: dict | None = None, created: list[str] = ()):
        self.experiment_dir = experiment_dir
        self.previous, self.created = previous, list(created)  # undone when the sweep never started (exit 2)
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "heartbeat": time.time(), "ended": None, "exit_code": None}
        self._file_lock = file_lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="raysweep-driver-heartbeat", daemon=True)

    def _write(self) -> None:
        storage.write_bytes(_join(self.experiment_dir, DRIVER_FILE), json.dumps(self.record).encode())

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.record["heartbeat"] = time.time()
            try:
                self._write()
            except OSError:  # storage briefly unreachable: the next beat tries again
                pass

    def release(self, exit_code: int) -> None:
        """Stop the heartbeat and record `ended` and `exit_code`; a second call does nothing.

        Exit code 2 (a usage error: no trial started) leaves the folder as it was found: the
        previous record back, or no record, and the folders `hold` created removed when empty."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.record.update(heartbeat=time.time(), ended=time.time(), exit_code=int(exit_code))
        try:
            if exit_code != 2:
                self._write()
            elif self.previous is not None:
                storage.write_bytes(_join(self.experiment_dir, DRIVER_FILE), json.dumps(self.previous).encode())
            else:
                storage.delete(_join(self.experiment_dir, DRIVER_FILE))
                if self.created:
                    storage.delete(_join(self.experiment_dir, LOCK))
        except OSError:
            pass
        if self._file_lock is not None:
            self._file_lock.release()
        for folder in self.created if exit_code == 2 else ():  # innermost first
            try:
                os.rmdir(folder)
            except OSError:
                pass
        _HELD.pop(self.experiment_dir, None)


_HELD: dict[str, DriverHold] = {}


def hold(experiment_dir: str, *, settle_s: float = SETTLE_S) -> DriverHold:
    """Take the experiment folder for this driver, or refuse.

    Args:
        experiment_dir: `<storage-path>/<name>`, a local path or a URI pyarrow understands.
        settle_s: object storage only: seconds between writing the record and reading it back.
    Returns:
        The hold; its heartbeat thread runs until `release(exit_code)` (called at exit by
        `release_all`, or by `atexit` with exit code 1 if nothing else did).
    Raises:
        ExperimentHeld: another driver is alive there (names its host, pid and start).
    Prints one line when it takes over from a driver that is gone.
    """
    if experiment_dir in _HELD:  # this process holds it already (a second sweep in one process)
        return _HELD[experiment_dir]
    file_lock, created = None, []
    if "://" not in experiment_dir:
        from filelock import FileLock, Timeout

        folder = os.path.abspath(experiment_dir)
        while not os.path.exists(folder):
            created.append(folder)
            folder = os.path.dirname(folder)
        os.makedirs(experiment_dir, exist_ok=True)
        file_lock = FileLock(os.path.join(experiment_dir, LOCK))
        try:
            file_lock.acquire(timeout=0)
        except Timeout:
            record = read_holder(experiment_dir)
            raise ExperimentHeld(f"{experiment_dir} is in use by another driver: "
                                 + (describe_holder(record) if record else "on this machine (it has not written driver.json yet)")
                                 + "; wait for it to end, or use another --name") from None
    record = read_holder(experiment_dir)
    here = socket.gethostname()
    # With the file lock, a same-host record is not alive whatever its pid says (a reused pid).
    if record is not None and holder_alive(record) and not (file_lock is not None and record.get("host") == here):
        if file_lock is not None:
            file_lock.release()
        raise ExperimentHeld(f"{experiment_dir} is in use by another driver: {describe_holder(record)}; "
                             "wait for it to end, or use another --name")
    mine = DriverHold(experiment_dir, file_lock, record, created)
    mine._write()
    if file_lock is None:  # object storage: two drivers may have written at once; the later one wins
        time.sleep(settle_s)
        now = read_holder(experiment_dir)
        if now and (now.get("host"), now.get("pid"), now.get("since")) != (here, mine.record["pid"], mine.record["since"]):
            raise ExperimentHeld(f"{experiment_dir} was taken at the same time by another driver: {describe_holder(now)}")
    if record and record.get("ended") is None:
        gone = "its pid is gone" if record.get("host") == here else f"no heartbeat for over {HEARTBEAT_TIMEOUT_S:.0f} s"
        print(f"taking over {experiment_dir}: its last driver ({describe_holder(record)}) is gone ({gone})", flush=True)
    _HELD[experiment_dir] = mine
    mine._thread.start()
    return mine


def release_all(exit_code: int) -> None:
    """Release every hold of this process with `exit_code` (the sweep's exit, Ctrl-C included)."""
    for held in list(_HELD.values()):
        held.release(exit_code)


atexit.register(release_all, 1)  # an uncaught exception ends the process with 1; normal exits release first


def _pid_alive(pid: int) -> bool:
    import psutil  # a core dependency; imported here to keep the module's import light

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # it exists, under another user
        return True


def _join(experiment_dir: str, name: str) -> str:
    return experiment_dir.rstrip("/") + "/" + name
