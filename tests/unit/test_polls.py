"""`tests/helpers/processes.py:wait_for`, the one poll of the suite: a folder that appears and vanishes, a
record caught half-written, is "not yet"; an AssertionError raised on purpose ends the wait at once."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from tests.helpers.processes import TimedOut, wait_for, wait_until


def test_a_folder_that_appears_and_vanishes_is_polled_again_until_its_record_is_whole(tmp_path):
    """As the storage probe does: the folder is made and removed (a listing then raises FileNotFoundError),
    then made again with a record written in two halves (JSONDecodeError), then whole."""
    folder = tmp_path / "runs" / "two_nodes"
    errors = []

    def condition():
        try:
            names = sorted(p.name for p in folder.iterdir())
            return [json.loads((folder / n).read_text()) for n in names]
        except Exception as e:  # what the poll met, then raised on to wait_for
            errors.append(type(e))
            raise

    def writer():
        time.sleep(0.05)
        folder.mkdir(parents=True)
        time.sleep(0.1)
        shutil.rmtree(folder)
        time.sleep(0.1)
        folder.mkdir()
        (folder / "result.json").write_text('{"epoch": ')
        time.sleep(0.1)
        (folder / "result.json").write_text('{"epoch": 1}')

    thread = threading.Thread(target=writer)
    thread.start()
    assert wait_for(condition, 30, "the record", every_s=0.01) == [{"epoch": 1}]
    thread.join()
    assert FileNotFoundError in errors and json.JSONDecodeError in errors


def test_an_assertion_raised_by_the_condition_ends_the_wait_at_once():
    calls = []

    def condition():
        calls.append(1)
        raise AssertionError("a trial failed on the second node")

    start = time.monotonic()
    with pytest.raises(AssertionError, match="a trial failed on the second node") as raised:
        wait_for(condition, 30, "a trial")
    assert not isinstance(raised.value, TimedOut) and len(calls) == 1 and time.monotonic() - start < 5
    with pytest.raises(AssertionError, match="second node"):
        wait_until(condition, 30)


def test_the_timeout_names_what_was_awaited_and_the_last_error_met(tmp_path):
    missing = tmp_path / "runs" / "gone"
    with pytest.raises(TimedOut) as raised:
        wait_for(lambda: list(missing.iterdir()), 0.2, "a trial folder", every_s=0.05)
    message = str(raised.value)
    assert message.startswith("timed out after 0.2 s waiting for a trial folder (last error: FileNotFoundError:")
    assert str(missing) in message
    with pytest.raises(TimedOut, match=r"waiting for nothing$"):
        wait_for(lambda: None, 0.1, "nothing", every_s=0.05)
    assert wait_until(lambda: list(missing.iterdir()), 0.1) is False
    assert wait_until(lambda: 1, 0) is True  # checked once even with no time left


def test_another_error_is_not_swallowed(tmp_path):
    with pytest.raises(KeyError):
        wait_for(lambda: {}["epoch"], 30, "an epoch")
