"""The command line of the sweep scripts: user mistakes, and parsers of flag values.

Nothing here imports Ray, torch, pandas or matplotlib: `--help` and usage errors must come back
in well under a second, before any of them is loaded.
"""

from __future__ import annotations

import ipaddress
import math
import os
import sys
from pathlib import Path


class UsageError(ValueError):
    """A user mistake in flags or config: printed as one line, exit code 2, no traceback."""


def run_main(main) -> None:
    """Run a sweep's `main(argv) -> int` and exit with its code; user mistakes print one line."""
    try:
        code = main(sys.argv[1:])
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted: resume with the same command and --resume", file=sys.stderr)
        code = 130
    sys.exit(code)


def parse_gpus_per_trial(text: str | None) -> float | None:
    """Parse --gpus-per-trial: None (choose later), a fraction in (0, 1], or a whole number >= 1.

    Returns:
        GPUs per trial as a float (0.0 for CPU trials), or None when not given.
    Raises:
        UsageError: negative, not a number, or a non-whole number above 1 (e.g. 1.5).
    """
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--gpus-per-trial={text!r} is not a number; use 0 (CPU), a fraction in (0, 1] or a whole number") from None
    if not math.isfinite(value) or value < 0 or (value > 1 and not value.is_integer()):
        raise UsageError(f"--gpus-per-trial={text} is not allowed; use 0 (CPU), a fraction in (0, 1] or a whole number >= 1")
    return value


def parse_float_list(flag: str, text: str, low: float, high: float) -> list[float]:
    """Parse a comma-separated list of floats, each in [low, high); UsageError names the bad item."""
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"{flag}: {item!r} is not a number (expected comma-separated values in [{low}, {high}))") from None
        if not (low <= value < high):
            raise UsageError(f"{flag}: {value} is outside the allowed range [{low}, {high})")
        values.append(value)
    if len(set(values)) != len(values):
        raise UsageError(f"{flag}: {text!r} repeats a value")
    return values


def parse_range(flag: str, text: str, low: float, high: float) -> tuple[float, float]:
    """Parse 'LOW,HIGH' of a log-scale search range: low < LOW < HIGH <= high.

    Returns:
        (LOW, HIGH) as floats.
    Raises:
        UsageError: not two numbers, LOW >= HIGH, or outside (low, high] -- naming the value.
    """
    parts = text.split(",")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise UsageError(f"{flag}={text!r} is not LOW,HIGH (two numbers, e.g. 1e-4,1)") from None
    for value in (lo, hi):
        if not math.isfinite(value) or not (low < value <= high):
            raise UsageError(f"{flag}: {value:g} is outside the allowed range ({low:g}, {high:g}]")
    if lo >= hi:
        raise UsageError(f"{flag}={text!r}: LOW must be below HIGH")
    return lo, hi


def check_positive_int(flag: str, value: int | None, low: int = 1) -> None:
    if value is not None and value < low:
        raise UsageError(f"{flag}={value} must be a whole number >= {low}")


def check_storage_path(path: str) -> Path:
    """Resolve --storage-path and check it can be written, without writing anything.

    Local paths need their nearest existing ancestor to be a writable folder; URIs such as
    s3://bucket/prefix are passed to Ray as they are.
    Returns:
        The absolute path (or the URI unchanged, as a Path-like str).
    Raises:
        UsageError: the path is a file, or lies under a file or an unwritable folder.
    """
    if "://" in path:
        return path
    resolved = Path(path).expanduser().resolve()
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if resolved.exists() and not resolved.is_dir():
        raise UsageError(f"--storage-path={path!r} is a file; give a folder (it is created if missing)")
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--storage-path={path!r} is not writable ({existing} is not a writable folder)")
    return resolved


def check_dashboard_host(host: str) -> bool:
    """Check --dashboard-host; return True when it is loopback (only this machine can connect).

    Raises:
        UsageError: not an IP address (or `localhost`).
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise UsageError(f"--dashboard-host={host!r} is not an IP address; use 127.0.0.1 (this machine only, "
                         f"the default) or the address of one interface, 0.0.0.0 for all") from None

