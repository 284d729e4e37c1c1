"""Trial flags and user mistakes: value parsers that raise `UsageError`, argparse actions, and
the trial options generated from `trainables.config.TrainConfig`.

`TrainConfig` is the only place a training default lives: every field is a `--kebab-case` flag whose
help is the field's comment and whose default is the field's default. In a grid, a comma-separated
value makes the field an axis (`--loss ce,gce,sce --lr 0.01,0.1`).

Nothing here imports Ray, torch, pandas or matplotlib: `--help` and usage errors come back in well
under a second, before any of them is loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import math
import os
from pathlib import Path

from trainables.config import TrainConfig, check_field
from trainables.experiment.objective import field_comments


class UsageError(ValueError):
    """A user mistake in flags or config: printed as one line, exit code 2, no traceback."""


class DiskFull(OSError):
    """The sweep's storage folder is full (`sweeps/engine/run/disk_full.py`): printed as one line, exit code 1."""


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
        raise UsageError(
            f"--gpus-per-trial={text!r} is not a number; use 0 (CPU), a fraction in (0, 1] or a whole number"
        ) from None
    if not math.isfinite(value) or value < 0 or (value > 1 and not value.is_integer()):
        raise UsageError(
            f"--gpus-per-trial={text} is not allowed; use 0 (CPU), a fraction in (0, 1] or a whole number >= 1"
        )
    return value


def parse_gpu_flags(
    gpus: str | None, gpus_per_trial: str | None, address: str | None
) -> tuple[list[int] | str | None, float | str | None]:
    """Parse --gpus and --gpus-per-trial (which may be `auto`).

    Returns:
        (selection, gpus_per_trial): selection is None (default), "all" or a list of indices;
        gpus_per_trial is None, "auto" or a float (see `parse_gpus_per_trial`).
    Raises:
        UsageError: a bad index list, or --gpus with --address (a cluster's GPUs are fixed at `ray start`).
    """
    share = "auto" if gpus_per_trial == "auto" else parse_gpus_per_trial(gpus_per_trial)
    if gpus is None or gpus == "all":
        selection = gpus
    else:
        try:
            selection = [int(item) for item in gpus.split(",")]
        except ValueError:
            raise UsageError(f"--gpus={gpus!r} is not a list of GPU indices such as 0,2 (or 'all')") from None
        if any(i < 0 for i in selection) or len(set(selection)) != len(selection):
            raise UsageError(f"--gpus={gpus!r}: indices must be distinct whole numbers >= 0")
    if selection is not None and address and address != "local":
        raise UsageError(
            "--gpus applies to a local Ray only; on a cluster, set CUDA_VISIBLE_DEVICES before `ray start` on each node"
        )
    if isinstance(share, float) and isinstance(selection, list) and share > len(selection):
        raise UsageError(
            f"--gpus-per-trial={share:g} is more than the {len(selection)} GPU(s) selected by --gpus={gpus}"
        )
    return selection, share


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


def seeds_value(text: str) -> int | str:
    """`--seeds`: a whole number of seeds, or `auto` (seeds by significance, `analysis/statistics/seeds.py`)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number >= 1 or auto") from None


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


def check_notify_urls(urls: list[str]) -> tuple[str, ...]:
    """The --notify URLs, each one apprise can parse (`Apprise.instantiate`: Slack, mailto, ntfy,
    Matrix, json://host:port/ ... https://github.com/caronc/apprise/wiki); nothing is sent.

    Raises:
        UsageError: naming the first URL apprise cannot parse (or apprise not installed).
    """
    if not urls:
        return ()
    try:
        import apprise
    except ImportError:
        raise UsageError("--notify needs the apprise package: pip install apprise") from None
    for url in urls:
        if apprise.Apprise.instantiate(url) is None:
            raise UsageError(
                f"--notify {url!r} is not a URL apprise knows (e.g. json://host:port/, ntfy://topic, "
                "slack://..., mailto://...; see https://github.com/caronc/apprise/wiki)"
            )
    return tuple(urls)


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
        raise UsageError(
            f"--dashboard-host={host!r} is not an IP address; use 127.0.0.1 (this machine only, "
            f"the default) or the address of one interface, 0.0.0.0 for all"
        ) from None


# --- parsers that raise UsageError ---------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake raises `UsageError` (one line, exit 2 through `run_main`).

    Its `prog` is `COMMAND` when the `raysweep` command set it (`raysweep grid`: the script's own
    parser, named as the user called it), else the script's."""

    COMMAND: str | None = None  # set by sweeps/cli.py before it calls a script's `main`

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prog = ArgumentParser.COMMAND or self.prog

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


class _Once(argparse.Action):
    """Store a flag's value, refusing the same flag twice (argparse would keep the last silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in getattr(namespace, "_given", set()) or self.dest in getattr(
            namespace, "_given_dests", set()
        ):
            raise UsageError(f"{option_string} is given twice; give one value, or a comma-separated list for an axis")
        namespace._given = getattr(namespace, "_given", set()) | {option_string}
        namespace._given_dests = getattr(namespace, "_given_dests", set()) | {self.dest}
        setattr(namespace, self.dest, values)


class _Refused(argparse.Action):
    """A trial option this sweep sets itself: refused, with a hint naming the flag to use."""

    def __init__(self, *args, hint: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.hint = hint

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string}={values}: {parser.prog} searches {self.dest}; {self.hint}")


# --- trial options, generated from TrainConfig ---------------------------------------------


def field_help() -> dict[str, str]:
    """Field name -> its comment in `TrainConfig`'s source (the one-line help of its flag)."""
    return field_comments(TrainConfig)


def add_config_flags(
    parser: argparse.ArgumentParser,
    *,
    axes: bool,
    exclude: dict | None = None,
    defaults: dict | None = None,
    aliases: dict | None = None,
) -> None:
    """Add one `--kebab-case` flag per `TrainConfig` field.

    Args:
        axes: True when a comma-separated value makes the field a grid axis (said in the help).
        exclude: field -> hint, for the fields the script sets itself (a search's searched
            parameters): their flag is refused with the hint, e.g. "use --lr-range".
        defaults: field -> text that replaces the field's default in this script (a grid's
            noise rates, say); other fields show TrainConfig's default.
        aliases: field -> further flag names (`--noise-rates` for `--noise-rate`).
    """
    helps, defaults, aliases, exclude = field_help(), defaults or {}, aliases or {}, exclude or {}
    group = parser.add_argument_group(
        "trial options (TrainConfig)" + (": a,b,c makes a field an axis of the grid" if axes else "")
    )
    for field in dataclasses.fields(TrainConfig):
        if field.name in exclude:
            group.add_argument(
                f"--{field.name.replace('_', '-')}", action=_Refused, hint=exclude[field.name], help=argparse.SUPPRESS
            )
            continue
        default = defaults.get(field.name, field.default)
        flags = [f"--{field.name.replace('_', '-')}"] + aliases.get(field.name, [])
        group.add_argument(
            *flags,
            dest=field.name,
            default=None,
            action=_Once,
            metavar=field.type.split(" ")[0].upper(),
            help=f"{helps.get(field.name, '')} (default: {default})".replace("%", "%%"),
        )


def parse_value(name: str, text: str):
    """Convert one flag value to the type of `TrainConfig` field `name` and check it.

    Returns:
        int, float, str or None (for optional fields given as `none`).
    Raises:
        UsageError: not of the field's type, or outside what `check_field` allows; names the flag.
    """
    kind = {f.name: f.type for f in dataclasses.fields(TrainConfig)}[name]
    flag = f"--{name.replace('_', '-')}"
    text = text.strip()
    try:
        if "None" in kind and text.lower() == "none":
            value = None
        elif kind.startswith("int"):
            value = int(text)
        elif kind.startswith("float"):
            value = float(text)
        else:
            value = text
    except ValueError:
        raise UsageError(
            f"{flag}={text!r} is not {'a whole number' if kind.startswith('int') else 'a number'}"
        ) from None
    try:
        check_field(name, value)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
    return value


def config_axes(args: argparse.Namespace, *, axes: bool, defaults: dict | None = None) -> dict[str, list]:
    """The trial options given on the command line (or by the script's `defaults`), parsed.

    Returns:
        field -> list of values (one value: a fixed option; several: a grid axis), in the order
        of `TrainConfig`'s fields; fields neither given nor defaulted are left out (TrainConfig's
        default applies in the trial).
    Raises:
        UsageError: a value of the wrong type or out of range, a repeated value in an axis, or a
            comma list where `axes` is False.
    """
    out = {}
    for field in dataclasses.fields(TrainConfig):
        text = getattr(args, field.name, None)
        text = (defaults or {}).get(field.name) if text is None else text
        if text is None:
            continue
        items = str(text).split(",") if field.name != "data_root" else [str(text)]
        if len(items) > 1 and not axes:
            raise UsageError(
                f"--{field.name.replace('_', '-')}={text!r}: this sweep takes one value (a grid takes lists)"
            )
        values = [parse_value(field.name, item) for item in items]
        if len(set(values)) != len(values):
            raise UsageError(f"--{field.name.replace('_', '-')}={text!r} repeats a value")
        out[field.name] = values
    return out


def epochs_of(config: dict) -> int:
    """Epochs a trial of `config` trains: its `epochs`, else `TrainConfig`'s default."""
    return config.get("epochs", TrainConfig.epochs)
