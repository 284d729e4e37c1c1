"""raysweep's own version and commit: recorded with every sweep (`raysweep.json`, provenance), shown by `status`,
the report and `--json`, so that a result says which release made it.

A wheel carries `_release.json` (`{"version", "commit"}`), written when the wheel is built (setup.py's
`build_py`); a checkout reads the version from pyproject.toml and the commit from `git describe`. Read only
when a sweep records or shows it, never on `--help` or import (a git call costs ~10 ms, importlib.metadata 0.1 s+).
The version rule (docs/research-record.md): 0.MINOR.PATCH, MINOR raised by each round of issues that lands on
main, PATCH by a fix between rounds.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

BAKED = Path(__file__).with_name("_release.json")  # in a wheel only
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder of pyproject.toml in a checkout


@functools.cache
def release() -> dict:
    """`{"version": "0.8.0", "commit": "v0.8.0-3-g1a2b3c4-dirty" or a sha}` of this raysweep; "unknown" for
    what cannot be read (a wheel built outside git, a checkout without git)."""
    if BAKED.is_file():
        try:
            baked = json.loads(BAKED.read_text())
            return {"version": str(baked.get("version") or "unknown"), "commit": str(baked.get("commit") or "unknown")}
        except (OSError, ValueError):
            pass
    return {"version": checkout_version(CHECKOUT), "commit": git_describe(CHECKOUT)}


def checkout_version(root: Path) -> str:
    """The `version = "..."` of `root/pyproject.toml`, or "unknown"."""
    try:
        found = re.search(r'^version\s*=\s*"([^"]+)"', (root / "pyproject.toml").read_text(), re.MULTILINE)
    except OSError:
        return "unknown"
    return found.group(1) if found else "unknown"


def git_describe(root: Path) -> str:
    """`git describe --tags --always --dirty` of the repository at `root` (a sha when it has no tags), or "unknown"."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def label(record: dict | None) -> str:
    """`raysweep 0.8.0 (abc1234)` of a recorded `release()`; `raysweep before 0.8.0 (not recorded)` for None."""
    if not record:
        return "raysweep before 0.8.0 (not recorded)"
    return f"raysweep {record.get('version', 'unknown')} ({record.get('commit', 'unknown')})"


def resume_change(info: dict | None, python: str) -> str | None:
    """One line when a resume runs another raysweep release or another `python` than the sweep's launch
    (`info`: its `raysweep.json`), else None."""
    if not info:
        return None
    now, then = release(), info.get("raysweep")
    changes = []
    if then is None or (then.get("version"), then.get("commit")) != (now["version"], now["commit"]):
        changes.append(f"{label(then)} launched it, {label(now)} resumes it")
    if info.get("python") and info["python"] != python:
        changes.append(f"python was {info['python']}, is {python}")
    return (
        "--resume: " + "; ".join(changes) + " (finished trials are kept; new epochs run with this one)"
        if changes
        else None
    )
