"""Waiting on processes and files from a test: a condition polled with a deadline, a process's title.

A poll reads storage that a running sweep is writing, so it meets files and folders between two states: a
folder the storage probe makes and removes again before the sweep starts, a trial folder Tune renames, a
result line caught half-written. `wait_for` reads those as "not yet" (`NOT_YET`) and polls again; what a
condition raises on purpose (an AssertionError naming what went wrong) ends the wait at once.
"""

from __future__ import annotations

import json
import time

import psutil

NOT_YET = (
    FileNotFoundError,  # a file or folder that vanished between listing and reading it (pyarrow's S3 listing
    # raises it too: a prefix whose last key was deleted, `Path does not exist`)
    NotADirectoryError,  # a listed name that is, for the moment, a file (a record being replaced)
    json.JSONDecodeError,  # a JSON record or result line caught mid-write
    UnicodeDecodeError,  # ... cut inside a multi-byte character
)
"""What a condition may raise while the files it reads appear, vanish or are half-written: polled again."""


class TimedOut(AssertionError):
    """`wait_for`'s deadline passed without the condition becoming true."""


def wait_for(condition, timeout_s: float, what: str, every_s: float = 0.25):
    """Poll `condition()` every `every_s` until it returns something truthy, and return that value.

    A `NOT_YET` error counts as a falsy value. Raises:
        TimedOut (an AssertionError) after `timeout_s`, naming `what` and the last `NOT_YET` error met;
        any other exception of `condition()` (an AssertionError it raises on purpose) at once.
    """
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        try:
            if value := condition():
                return value
        except NOT_YET as e:
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(every_s)
    met = f" (last error: {type(last).__name__}: {last})" if last else ""
    raise TimedOut(f"timed out after {timeout_s:g} s waiting for {what}{met}")


def wait_until(condition, deadline_s: float = 20.0, every_s: float = 0.1) -> bool:
    """Whether `condition()` became true within `deadline_s`: `wait_for` for a test that asserts with its own
    message (its last check runs at the deadline)."""
    try:
        wait_for(condition, max(deadline_s, 0.0), "a condition", every_s)
        return True
    except TimedOut:
        return False


def title_of(pid: int) -> str:
    """The process's title as `ps` shows it (its command line), or "" once it is gone."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.NoSuchProcess:
        return ""
