"""A full disk (issue 55 item 3): an injected `OSError(ENOSPC)` at each write path (raysweep's records, Tune's
copies of histories and checkpoints, the driver record) leaves every file written before whole, and a `fit()`
that a full disk ended is one line naming the storage folder, with the driver record closed. No Ray is started."""

from __future__ import annotations

import builtins
import errno
import json
import os
from types import SimpleNamespace

import pytest
import torch

from sweeps.engine.flags import DiskFull
from sweeps.engine.run import disk_full, sweep_end
from sweeps.engine.sweep_records import driver_lock
from trainables.checkpoints import load_latest_state
from trainables.experiment import records, storage


def full_disk(monkeypatch, after: int = 0, when=lambda path: True):
    """Make `open(path, "wb")` of the files `when` picks raise ENOSPC on write, once `after` such writes passed."""
    real_open, passed = builtins.open, [0]

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[: len(data) // 2])  # a part reaches the disk, then it is full
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "w" in mode and when(str(path)):
            passed[0] += 1
            if passed[0] > after:
                return Full(f)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)


def test_a_record_written_on_a_full_disk_keeps_the_whole_one_before(tmp_path, monkeypatch):
    path = str(tmp_path / "raysweep.json")
    records.write_record(path, {"total_trials": 8})
    full_disk(monkeypatch)
    with pytest.raises(OSError) as error:
        records.write_record(path, {"total_trials": 9})
    assert error.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert json.loads((tmp_path / "raysweep.json").read_text()) == {"total_trials": 8}
    assert sorted(os.listdir(tmp_path)) == ["raysweep.json"]  # no half-written .tmp left


def test_a_history_copied_to_storage_on_a_full_disk_is_never_cut_in_place(tmp_path, monkeypatch):
    """Tune copies each trial's result.json and progress.csv to storage every few seconds; `pyarrow.fs.copy_files`
    rewrote them in place, and a full disk left a finished trial's result.json at 0 bytes."""
    staging, stored = tmp_path / "staging" / "trial", tmp_path / "storage" / "trial"
    staging.mkdir(parents=True)
    stored.mkdir(parents=True)
    rows = "".join(json.dumps({"epoch": e}) + "\n" for e in (1, 2, 3))
    (staging / "result.json").write_text(rows + json.dumps({"epoch": 4}) + "\n")
    (stored / "result.json").write_text(rows)
    copied = []
    full_disk(monkeypatch, when=lambda path: path.startswith(str(stored)))
    with pytest.raises(OSError):
        storage.copy_whole(lambda *a, **k: copied.append(a), str(staging.parent), str(stored.parent))
    monkeypatch.undo()
    assert (stored / "result.json").read_text() == rows  # the rows it held, whole
    assert os.listdir(stored) == ["result.json"] and not copied  # no .tmp left; copied here, not by pyarrow
    storage.copy_whole(None, str(staging.parent), str(stored.parent))  # space freed: the next copy goes through
    assert (stored / "result.json").read_text().count("\n") == 4


def test_a_checkpoint_cut_by_a_full_disk_falls_back_to_the_one_before(tmp_path, monkeypatch):
    """A checkpoint's copy to storage that fills the disk leaves no checkpoint.pt (the copy is whole or absent);
    the trial's retry resumes from the one before."""
    trial = tmp_path / "trial"
    (trial / "checkpoint_000000").mkdir(parents=True)
    torch.save({"epoch": 1, "model": {}}, trial / "checkpoint_000000" / "checkpoint.pt")
    new = tmp_path / "new"
    new.mkdir()
    torch.save({"epoch": 2, "model": {"w": torch.ones(1000)}}, new / "checkpoint.pt")
    full_disk(monkeypatch, when=lambda path: "checkpoint_000001" in path)
    with pytest.raises(OSError):
        storage.copy_whole(None, str(new), str(trial / "checkpoint_000001"))
    monkeypatch.undo()
    assert os.listdir(trial / "checkpoint_000001") == []
    assert load_latest_state(trial / "checkpoint_000000", trial)["epoch"] == 1  # Tune registered no new one


def test_the_driver_records_its_end_on_a_full_disk_in_the_space_it_kept(tmp_path, monkeypatch):
    experiment = str(tmp_path / "sweep")
    held = driver_lock.hold(experiment)
    assert os.path.getsize(records.driver_reserve_path(experiment)) == driver_lock.RESERVE_BYTES
    real_write = records.write_driver

    def write_on_full_disk(folder, record):  # ENOSPC until the reserve is freed
        if os.path.exists(records.driver_reserve_path(experiment)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(folder, record)

    monkeypatch.setattr(records, "write_driver", write_on_full_disk)
    held.release(1)
    assert records.read_driver(experiment)["exit_code"] == 1
    assert not os.path.exists(records.driver_reserve_path(experiment))


def test_a_fit_ended_by_a_full_disk_is_one_line_and_the_record_is_closed(tmp_path, monkeypatch, capsys):
    """Ray's `EOFError` from `get_pickled_error` (Tune could not write a trial's error.pkl) on a full storage
    folder: one line naming the folder, what it could not write and the continue command."""
    experiment = tmp_path / "full"
    (experiment / "sym_0.1_seed0").mkdir(parents=True)
    (experiment / "sym_0.1_seed0" / "error.pkl").write_bytes(b"")
    monkeypatch.setattr(disk_full, "free_bytes", lambda folder: 0)
    monkeypatch.setattr("sys.argv", ["sweeps/noise_grid.py", "--name", "full", "--storage-path", str(tmp_path)])
    held = driver_lock.hold(str(experiment))

    def fit():
        raise EOFError("Ran out of input")

    with pytest.raises(DiskFull) as stop:
        sweep_end.fit(SimpleNamespace(fit=fit), held)
    line = str(stop.value)
    assert "\n" not in line and f"the disk of the storage folder {tmp_path} is full (0.0 MiB free)" in line
    assert "could not write Tune's error records (sym_0.1_seed0/error.pkl)" in line
    assert line.endswith("--resume --retry-errored") and "free space there, then continue with:" in line
    record = records.read_driver(str(experiment))
    assert (record["exit_code"], record["ended_by"]) == (1, "disk full")
    held.release(1)


def test_an_error_with_space_left_is_not_called_a_full_disk(tmp_path):
    assert disk_full.stop_line([EOFError("x")], str(tmp_path), str(tmp_path / "x"), {}, False) is None
    full = OSError(errno.ENOSPC, "No space left on device")
    line = disk_full.stop_line([RuntimeError("trial failed")], str(tmp_path), str(tmp_path), {"errored": 2}, False)
    assert line is None
    wrapped = RuntimeError("trial failed")
    wrapped.__cause__ = full
    line = disk_full.stop_line([wrapped], str(tmp_path), str(tmp_path), {"errored": 2}, False, ["/s/sym_0.2_seed0"])
    assert "could not write the files of trial(s) sym_0.2_seed0" in line
