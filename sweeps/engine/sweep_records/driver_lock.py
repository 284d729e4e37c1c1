"""One driver per experiment: the writer of `<storage-path>/<name>/driver.json`, the record of who
runs the sweep (its format and its reader, `read_holder` / `holder_alive`, are in
`analysis/reading/driver_record.py`, so that `python -m analysis --status` needs nothing from sweeps/).

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
import errno
import os
import socket
import threading
import time

from analysis.reading.driver_record import HEARTBEAT_TIMEOUT_S, describe_holder, holder_alive, read_holder
from sweeps.engine.sweep_records.provenance_capture import process_start_time
from trainables.experiment import records, storage

HEARTBEAT_S = 5.0  # the running driver refreshes its heartbeat this often (seconds)
SETTLE_S = 2.0  # object storage: read the record back after this long; the overwritten one gives way
RESERVE_BYTES = 64 * 1024  # kept aside to record the end on a full disk (a record is under 4 kB)


class ExperimentHeld(RuntimeError):
    """Another driver is alive on the experiment folder; the message names it in one line."""


class DriverHold:
    """This process's hold on an experiment folder (see `hold`); `release(code)` ends it."""

    def __init__(self, experiment_dir: str, file_lock=None, previous: dict | None = None, created: list[str] = ()):
        self.experiment_dir = experiment_dir
        self.previous, self.created = previous, list(created)  # undone when the sweep never started (exit 2)
        self.record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "started": process_start_time(),  # Unix seconds: the elapsed time of the console and --status
            "heartbeat": time.time(),
            "ended": None,
            "exit_code": None,
            # trial id -> iteration at which its scheduler stopped it (this run's added as they come)
            "scheduler_stops": dict((previous or {}).get("scheduler_stops") or {}),
        }
        self._file_lock = file_lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="raysweep-driver-heartbeat", daemon=True)

    def _write(self, last: bool = False) -> None:
        """Write the record; the `last` (the sweep's end) on a full disk (ENOSPC): into the space kept aside
        (`keep_reserve`, freed for it)."""
        try:
            records.write_driver(self.experiment_dir, self.record)
        except OSError as e:
            reserve = records.driver_reserve_path(self.experiment_dir)
            if not last or e.errno != errno.ENOSPC or not storage.exists(reserve):
                raise
            storage.delete(reserve)
            records.write_driver(self.experiment_dir, self.record)

    def keep_reserve(self) -> None:
        """Keep `RESERVE_BYTES` aside in a local experiment folder (`.driver.reserve`), so that the record of
        the sweep's end (its exit code) can be written on a disk that the sweep filled; removed at `release`."""
        try:
            storage.write_bytes(records.driver_reserve_path(self.experiment_dir), bytes(RESERVE_BYTES))
        except OSError:
            pass

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.record["heartbeat"] = time.time()
            try:
                self._write()
            except OSError:  # storage briefly unreachable: the next beat tries again
                pass

    def record_end(self, exit_code: int, ending, resumed: bool = False) -> None:
        """Stop the heartbeat and record `ended`, `exit_code`, and of the fit's `ending`
        (`sweeps.engine.run.sweep_end.Ending`): `stopped`, the ids of the trials this run stopped before they
        ended, and those an earlier run stopped that did not end in this one; `scheduler_stops`; `ended_by`
        and `why`, why the sweep ended (`trainables.experiment.outcome.SWEEP_ENDS`); `not_created`, the planned
        trials its searcher never made (not run: the last line counts them, the analysis reads them); the elapsed
        time its console said; and `resumed`: this run was a `--resume` (what continues it depends on it:
        `driver_record.continue_command`). Still holding the folder: the summary and report written next
        read the sweep as over. `release` then lets it go."""
        earlier = set((self.previous or {}).get("stopped") or ()) - set(ending.ended)
        self._stop.set()
        self.record.update(
            heartbeat=time.time(),
            ended=time.time(),
            exit_code=int(exit_code),
            stopped=sorted({*ending.stopped, *earlier}),
            scheduler_stops={**self.record["scheduler_stops"], **ending.scheduler_stops},
            ended_by=ending.ended_by,
            why=ending.why,
            not_created=ending.not_created(),
            resumed=bool(resumed),
            # the elapsed time the console's final block said (`--status` says the same)
            elapsed_s=ending.ended_at - self.record["started"] if ending.ended_at else None,
        )
        try:
            self._write(last=True)
        except OSError:
            pass

    def release(self, exit_code: int) -> None:
        """Stop the heartbeat and record `ended` and `exit_code` (unless `record_end` did); a second call
        does nothing.

        Exit code 2 (a usage error: no trial started) leaves the folder as it was found: the
        previous record back, or no record, and the folders `hold` created removed when empty."""
        if _HELD.get(self.experiment_dir) is not self:  # released already
            return
        ended = self.record["ended"] is not None and self.record["exit_code"] == int(exit_code)
        self._stop.set()
        if not ended:
            self.record.update(heartbeat=time.time(), ended=time.time(), exit_code=int(exit_code))
        try:
            if exit_code != 2:
                self._write(last=True)
            elif self.previous is not None:
                records.write_driver(self.experiment_dir, self.previous)
            else:
                records.delete_driver(self.experiment_dir)
                if self.created:
                    storage.delete(records.driver_lock_path(self.experiment_dir))
        except OSError:
            pass
        if self._file_lock is not None:  # a local folder: its reserve goes too
            storage.delete(records.driver_reserve_path(self.experiment_dir))
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
    file_lock, created = _lock_local_folder(experiment_dir) if "://" not in experiment_dir else (None, [])
    record = read_holder(experiment_dir)
    here = socket.gethostname()
    # With the file lock, a same-host record is not alive whatever its pid says (a reused pid).
    if record is not None and holder_alive(record) and not (file_lock is not None and record.get("host") == here):
        if file_lock is not None:
            file_lock.release()
        raise ExperimentHeld(
            f"{experiment_dir} is in use by another driver: {describe_holder(record)}; "
            "wait for it to end, or use another --name"
        )
    mine = DriverHold(experiment_dir, file_lock, record, created)
    mine._write()
    if file_lock is not None:  # a local folder (object storage does not fill up)
        mine.keep_reserve()
    if file_lock is None:  # object storage: two drivers may have written at once; the later one wins
        time.sleep(settle_s)
        now = read_holder(experiment_dir)
        if now and (now.get("host"), now.get("pid"), now.get("since")) != (
            here,
            mine.record["pid"],
            mine.record["since"],
        ):
            raise ExperimentHeld(
                f"{experiment_dir} was taken at the same time by another driver: {describe_holder(now)}"
            )
    if record and record.get("ended") is None:
        gone = "its pid is gone" if record.get("host") == here else f"no heartbeat for over {HEARTBEAT_TIMEOUT_S:.0f} s"
        print(f"taking over {experiment_dir}: its last driver ({describe_holder(record)}) is gone ({gone})", flush=True)
    _HELD[experiment_dir] = mine
    mine._thread.start()
    return mine


def _lock_local_folder(experiment_dir: str):
    """(the held `FileLock` of a local experiment folder, the folders created for it, innermost first).

    Raises:
        ExperimentHeld: another process on this machine holds the lock.
    """
    from filelock import FileLock, Timeout

    created = []
    folder = os.path.abspath(experiment_dir)
    while not os.path.exists(folder):
        created.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(experiment_dir, exist_ok=True)
    file_lock = FileLock(records.driver_lock_path(experiment_dir))
    try:
        file_lock.acquire(timeout=0)
    except Timeout:
        record = read_holder(experiment_dir)
        raise ExperimentHeld(
            f"{experiment_dir} is in use by another driver: "
            + (describe_holder(record) if record else f"on this machine (it has not written {records.DRIVER_FILE} yet)")
            + "; wait for it to end, or use another --name"
        ) from None
    return file_lock, created


def release_all(exit_code: int) -> None:
    """Release every hold of this process with `exit_code` (the sweep's exit, Ctrl-C included)."""
    for held in list(_HELD.values()):
        held.release(exit_code)


atexit.register(release_all, 1)  # an uncaught exception ends the process with 1; normal exits release first
