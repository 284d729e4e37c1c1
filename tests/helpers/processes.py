"""Waiting on processes and files from a test: a condition polled with a deadline, a process's title."""

from __future__ import annotations

import time

import psutil


def wait_for(condition, timeout_s: float, what: str, every_s: float = 0.25):
    """Poll `condition()` until it returns something truthy; that value, or AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def wait_until(condition, deadline_s: float = 20.0) -> bool:
    """Whether `condition()` became true within `deadline_s` (polled every 0.1 s; once more at the end)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def title_of(pid: int) -> str:
    """The process's title as `ps` shows it (its command line), or "" once it is gone."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.NoSuchProcess:
        return ""
