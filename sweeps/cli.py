"""The command line of the sweep scripts: flags, axes, and user mistakes.

Trial options are generated from `trainables.config.TrainConfig`, the only place a training
default lives: every field is a `--kebab-case` flag whose help is the field's comment and whose
default is the field's default. In a grid, a comma-separated value makes the field an axis
(`--loss ce,gce,sce --lr 0.01,0.1`). Run options (resources, storage, failures, monitoring)
are written by hand below.

Nothing here imports Ray, torch, pandas or matplotlib: `--help` and usage errors come back in
well under a second, before any of them is loaded.
"""

from __future__ import annotations

import argparse
import hashlib
import dataclasses
import inspect
import ipaddress
import itertools
import json
import math
import os
import re
import sys
from pathlib import Path

from trainables.config import METRIC, MODE, TrainConfig, check_field

SMOKE_TEST_EPOCHS = 2  # --smoke-test: every sweep's trials train this many epochs
MAX_FAILURES = 2  # retries of a failed trial (Tune's FailureConfig), unless --max-failures says otherwise
MAX_TRIALS = 10_000  # a larger grid is refused unless --max-trials raises the limit
MLFLOW_DEFAULT_URI = "sqlite:///mlflow.db"  # MLflow 3 refuses the file store (file:./mlruns) unless MLFLOW_ALLOW_FILE_STORE=true


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
    if "sweeps.driver_lock" in sys.modules:  # the sweep held its experiment folder: record how it ended
        sys.modules["sweeps.driver_lock"].release_all(code)
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


def parse_gpu_flags(gpus: str | None, gpus_per_trial: str | None, address: str | None) -> tuple[list[int] | str | None, float | str | None]:
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
        raise UsageError("--gpus applies to a local Ray only; on a cluster, set CUDA_VISIBLE_DEVICES before `ray start` on each node")
    if isinstance(share, float) and isinstance(selection, list) and share > len(selection):
        raise UsageError(f"--gpus-per-trial={share:g} is more than the {len(selection)} GPU(s) selected by --gpus={gpus}")
    return selection, share


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



# --- parsers that raise UsageError ---------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake raises `UsageError` (one line, exit 2 through `run_main`)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


class _Once(argparse.Action):
    """Store a flag's value, refusing the same flag twice (argparse would keep the last silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in getattr(namespace, "_given", set()) or self.dest in getattr(namespace, "_given_dests", set()):
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
    pattern = re.compile(r"^\s+(\w+): [^=]+=.*?#\s*(.+)$")
    return {m.group(1): m.group(2) for line in inspect.getsource(TrainConfig).splitlines() if (m := pattern.match(line))}


def add_config_flags(parser: argparse.ArgumentParser, *, axes: bool, exclude: dict | None = None, defaults: dict | None = None,
                     aliases: dict | None = None) -> None:
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
    group = parser.add_argument_group("trial options (TrainConfig)" + (": a,b,c makes a field an axis of the grid" if axes else ""))
    for field in dataclasses.fields(TrainConfig):
        if field.name in exclude:
            group.add_argument(f"--{field.name.replace('_', '-')}", action=_Refused, hint=exclude[field.name], help=argparse.SUPPRESS)
            continue
        default = defaults.get(field.name, field.default)
        flags = [f"--{field.name.replace('_', '-')}"] + aliases.get(field.name, [])
        group.add_argument(*flags, dest=field.name, default=None, action=_Once, metavar=field.type.split(" ")[0].upper(),
                           help=f"{helps.get(field.name, '')} (default: {default})".replace("%", "%%"))


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
        raise UsageError(f"{flag}={text!r} is not {'a whole number' if kind.startswith('int') else 'a number'}") from None
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
            raise UsageError(f"--{field.name.replace('_', '-')}={text!r}: this sweep takes one value (a grid takes lists)")
        values = [parse_value(field.name, item) for item in items]
        if len(set(values)) != len(values):
            raise UsageError(f"--{field.name.replace('_', '-')}={text!r} repeats a value")
        out[field.name] = values
    return out


def epochs_of(config: dict) -> int:
    """Epochs a trial of `config` trains: its `epochs`, else `TrainConfig`'s default."""
    return config.get("epochs", TrainConfig.epochs)


def grid_cells(axes: dict[str, list], max_trials: int) -> list[dict]:
    """The cross product of the axes: one config dict per cell, in the axes' order.

    Raises:
        UsageError: more than `max_trials` cells (counted before any is built).
    """
    count = math.prod(len(v) for v in axes.values())
    if count > max_trials:
        raise UsageError(f"the grid has {count:,} trials, more than --max-trials={max_trials:,}; "
                         "check the axes (a typo in --seeds?) or raise --max-trials")
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def trial_namer(axes: dict[str, list]):
    """A `trial_name_creator`: every varying axis, then noise type, noise rate and seed when the
    trial has them, e.g. `gce_lr0.1_asym_0.4_seed2` (strings as they are, numbers after their name).
    A string a folder name cannot hold (`configs/fast.yaml`, spaces) appears in `short_forms`."""
    last = ("noise_type", "noise_rate", "seed")
    varying = [k for k, v in axes.items() if len(v) > 1 and k not in last]
    shorts = {k: short_forms(v) for k, v in axes.items()}

    def text(key: str, value, named: bool) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = f"{value:g}"
            return f"{key.replace('_', '')}{value}" if named else value
        return shorts.get(key, {}).get(value) or short_forms([value])[value]

    def name(trial) -> str:
        c = trial.config
        parts = [text(k, c[k], named=True) for k in varying]
        parts += [text(k, c[k], named=False) for k in last[:2] if k in c]
        parts += [f"seed{c['seed']}"] if "seed" in c else []
        return "_".join(parts) or "trial"
    return name


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # what a trial folder name may hold


def short_forms(values: list) -> dict:
    """{value: a folder-safe, unique short form} for the strings in `values` (others left out).

    A string of `[A-Za-z0-9._+-]` only is itself; else its last path part (`configs/fast.yaml` ->
    `fast.yaml`) with other characters as `-`, at most 40 characters; when two values would share
    a form, the whole value is used, and an 8-digit hash of it is added where that is still not
    unique or too long.
    """
    strings = [v for v in values if isinstance(v, str)]

    def tidy(text: str) -> str:
        return _UNSAFE.sub("-", text).strip("-.") or "x"

    forms = {v: v if not _UNSAFE.search(v) and v not in (".", "..") else tidy(v.rstrip("/").rsplit("/", 1)[-1])[:40] for v in strings}
    first = list(forms.values())
    for v in strings:
        if first.count(forms[v]) > 1 and forms[v] != v:
            forms[v] = tidy(v)
    for v in strings:
        if list(forms.values()).count(forms[v]) > 1 or len(forms[v]) > 60:
            forms[v] = f"{forms[v][:40]}-{hashlib.sha1(v.encode()).hexdigest()[:8]}"
    return forms


# --- run options, written by hand ----------------------------------------------------------


def add_run_args(parser: argparse.ArgumentParser, *, name: str, grid: bool) -> None:
    """Flags of how a sweep runs: resources, storage, cluster, failures, monitoring.

    Args:
        name: the default experiment name.
        grid: add the flags only a grid has (`--seeds`, `--skip-existing`, `--retry-errored`,
            `--max-trials`).
    """
    res = parser.add_argument_group("resources and cluster")
    res.add_argument("--gpus-per-trial", default=None,
                     help="GPUs each trial gets: a fraction such as 0.25 (4 trials share a GPU), a whole number (2+: "
                     "data-parallel), 0 for CPU trials, or auto (probe the memory, pack densely) (default: 0.25 when "
                     "the cluster has GPUs, else 0)")
    res.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPU cores each trial gets (default: 1)")
    res.add_argument("--max-concurrent", type=int, default=None, help="at most this many trials at once (default: as many as resources allow)")
    res.add_argument("--gpus", default=None, help="GPUs a local sweep may use: indices such as 0,2 (busy ones are still "
                     "left out), or 'all' (every GPU, busy or not) (default: every GPU that is not busy)")
    res.add_argument("--address", default=None, help="an existing Ray cluster, e.g. 'auto' or 'HEAD_IP:6379'; 'local' always starts a private Ray "
                     "(default: join the cluster `ray start` runs on this machine, else start a local Ray)")
    res.add_argument("--dashboard-host", default="127.0.0.1", help="interface the Ray dashboard listens on (default: 127.0.0.1)")
    res.add_argument("--storage-path", default="./runs", help="where experiments are written (default: ./runs)")
    res.add_argument("--storage-is-shared", action="store_true",
                     help="trust that --storage-path is reachable from every node of a multi-node cluster")
    res.add_argument("--name", default=name, help=f"experiment name, a folder under --storage-path (default: {name})")
    res.add_argument("--smoke-test", action="store_true", help=f"{SMOKE_TEST_EPOCHS} epochs per trial: the whole sweep in a minute")
    if grid:
        res.add_argument("--seeds", type=int, default=None, help="seeds per configuration: an axis 0..N-1 (default: 1, or --seed)")
        res.add_argument("--max-trials", type=int, default=MAX_TRIALS, help=f"refuse a grid of more trials (default: {MAX_TRIALS:,})")
    faults = parser.add_argument_group("failures, resuming and extending")
    faults.add_argument("--max-failures", type=int, default=None, help=f"retries of a failed trial, each from its latest checkpoint (default: {MAX_FAILURES})")
    faults.add_argument("--fail-fast", action="store_true", help="stop the whole sweep at the first trial error")
    faults.add_argument("--resume", action="store_true", help="continue the sweep --name where it stopped (Tuner.restore)")
    if grid:
        faults.add_argument("--retry-errored", action="store_true", help="with --resume: continue errored trials from their checkpoints")
        faults.add_argument("--skip-existing", action=argparse.BooleanOptionalAction, default=True,
                            help="reuse trials of this --name that already finished with the same config (default: on)")
    watch = parser.add_argument_group("monitoring")
    watch.add_argument("--quiet", action="store_true", default=os.environ.get("RAYSWEEP_QUIET", "") not in ("", "0"),
                       help="no progress blocks, only errors and the final lines (also: RAYSWEEP_QUIET=1)")
    watch.add_argument("--progress-every", type=float, default=15.0, help="seconds between progress blocks (default: 15)")
    watch.add_argument("--mlflow-uri", nargs="?", const=MLFLOW_DEFAULT_URI, default=None,
                       help=f"also log every trial to MLflow at this tracking URI: a database ({MLFLOW_DEFAULT_URI}, "
                       f"the value when the flag is given alone) or a server (http://host:5000); needs the trackers extra")
    watch.add_argument("--wandb-project", default=None,
                       help="also log every trial to this Weights & Biases project (needs the trackers extra and "
                       "`wandb login`, or WANDB_MODE=offline to write runs locally and `wandb sync` them later)")


def check_run_args(args: argparse.Namespace) -> None:
    """Check the flags of `add_run_args` (in place: parsed --gpus-per-trial, resolved storage,
    --max-failures with its default).

    Raises:
        UsageError: naming the first bad flag, its value and what is allowed.
    """
    args.gpus, args.gpus_per_trial = parse_gpu_flags(args.gpus, args.gpus_per_trial, args.address)
    if not args.cpus_per_trial > 0:
        raise UsageError(f"--cpus-per-trial={args.cpus_per_trial} must be > 0")
    for flag in ("--max-concurrent", "--seeds", "--max-trials"):
        check_positive_int(flag, getattr(args, flag[2:].replace("-", "_"), None))
    if not args.progress_every > 0:
        raise UsageError(f"--progress-every={args.progress_every} must be > 0 seconds")
    if not args.name or args.name in (".", "..") or "/" in args.name or "\\" in args.name:
        raise UsageError(f"--name={args.name!r} must be a plain folder name (no '/', not '.' or '..')")
    check_dashboard_host(args.dashboard_host)
    args.storage_path = check_storage_path(args.storage_path)
    if args.max_failures is not None and args.max_failures < 0:
        raise UsageError(f"--max-failures={args.max_failures} must be a whole number >= 0")
    if args.fail_fast and args.max_failures:
        raise UsageError(f"--fail-fast stops at the first error, so --max-failures={args.max_failures} cannot apply; give one of them")
    args.max_failures = 0 if args.fail_fast else (MAX_FAILURES if args.max_failures is None else args.max_failures)
    if getattr(args, "retry_errored", False) and not args.resume:
        raise UsageError("--retry-errored needs --resume (it continues the errored trials of a killed or finished sweep)")
    if args.resume and not getattr(args, "skip_existing", True):
        raise UsageError("--resume continues trials from their checkpoints; --no-skip-existing (rerun everything) contradicts it")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a sweep runs: the flags of `add_run_args` (and a search's --time-budget-s), checked and
    parsed by `check_run_args`. `run_options` builds it; `sweeps.launch.launch` takes it.

    Fields, with their units:
        name: the experiment, a folder under `storage_path`.
        storage_path: a local folder (made absolute) or a URI (s3://...).
        gpus_per_trial: GPUs per trial: a fraction of a GPU in (0, 1], whole GPUs (2+: data-parallel),
            0.0 (CPU trials), "auto" (probe the memory, pack densely) or None (0.25 with GPUs, else 0).
        cpus_per_trial: CPU cores per trial (> 0).
        gpus: the GPUs a local Ray may use: None (every idle one), "all", or indices.
        max_concurrent: at most this many trials at once (None: as resources allow).
        address: an existing Ray cluster; "local": always a private Ray (None: the cluster `ray start`
            runs on this machine, else a local one).
        dashboard_host: the interface Ray's dashboard listens on.
        storage_is_shared: trust that `storage_path` is reachable from every node.
        max_failures: retries of a failed trial (0 with `fail_fast`).
        fail_fast: the first trial error stops the sweep.
        resume: continue the sweep `name` (`Tuner.restore`); retry_errored: errored trials too.
        time_budget_s: stop the whole sweep after this many seconds (None: no limit).
        quiet, progress_every: no progress blocks; seconds between them.
        mlflow_uri, wandb_project: trackers to log every trial to (None: none).
    """

    name: str
    storage_path: str
    gpus_per_trial: float | str | None = None
    cpus_per_trial: float = 1.0
    gpus: list[int] | str | None = None
    max_concurrent: int | None = None
    address: str | None = None
    dashboard_host: str = "127.0.0.1"
    storage_is_shared: bool = False
    max_failures: int = MAX_FAILURES
    fail_fast: bool = False
    resume: bool = False
    retry_errored: bool = False
    time_budget_s: float | None = None
    quiet: bool = False
    progress_every: float = 15.0
    mlflow_uri: str | None = None
    wandb_project: str | None = None

    @property
    def experiment_dir(self) -> str:
        """`storage_path/name`: where Tune writes the experiment (a path or a URI)."""
        return f"{self.storage_path}/{self.name}"


def run_options(args: argparse.Namespace) -> RunOptions:
    """The `RunOptions` of flags parsed and checked by `check_run_args` (flags a script does not
    have, such as --retry-errored or --time-budget-s, keep the field's default)."""
    return RunOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions) if hasattr(args, f.name)})


def probe_storage(experiment_dir: str) -> None:
    """Create the experiment folder and write and remove a probe file in it, before Ray starts.

    `os.access` is not enough: read-only mounts, full disks, quotas and ACLs pass it. The folders
    this call creates are removed again, failure or not (Tune creates them when the sweep starts),
    so a sweep refused later leaves nothing behind. On object storage (s3://...) the probe is an
    object written and deleted through pyarrow (`analysis.storage`), as Ray will write.
    Raises:
        UsageError: naming the path and the OS error.
    """
    if "://" in experiment_dir:
        from analysis import storage

        probe = storage.join(experiment_dir, ".raysweep_write_probe")
        try:
            storage.write_bytes(probe, b"probe")
            storage.delete(probe)
        except (OSError, ValueError) as e:
            raise UsageError(f"--storage-path: cannot write to {experiment_dir}: {str(e).splitlines()[0]}") from None
        return
    folder = Path(experiment_dir)
    created = [p for p in [folder, *folder.parents] if not p.exists()]  # innermost first
    probe = folder / ".raysweep_write_probe"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--storage-path: cannot write to {folder}: {e.strerror or e}") from None
    finally:
        for path in created:
            try:
                path.rmdir()
            except OSError:
                pass


# --- searches (sweeps/lr_search.py, sweeps/pbt.py) ----------------------------------------


def add_search_args(parser: argparse.ArgumentParser, *, num_samples: int, num_samples_help: str) -> None:
    """Flags both searches have: LR / weight-decay bounds, seeds per trial, number of trials, budget."""
    parser.add_argument("--lr-range", default="1e-4,1", help="LOW,HIGH of the learning rate, log scale, 0 < LOW < HIGH <= 10 (default: 1e-4,1)")
    parser.add_argument("--weight-decay-range", default="1e-6,1e-2", help="LOW,HIGH of the weight decay, log scale, 0 < LOW < HIGH <= 1 (default: 1e-6,1e-2)")
    parser.add_argument("--repeat", type=int, default=1, help="seeds per configuration, trained together in one trial; the searcher sees their mean (default: 1)")
    parser.add_argument("--num-samples", type=int, default=num_samples, help=f"{num_samples_help} (default: {num_samples})")
    parser.add_argument("--time-budget-s", type=float, default=None, help="stop the whole search after this many seconds, counted over resumes (default: none)")


def check_search_args(args: argparse.Namespace) -> None:
    """Check the flags of `add_search_args` and parse the LR / weight-decay ranges in place.

    Raises:
        UsageError: naming the first bad value and its allowed range.
    """
    args.lr_range = parse_range("--lr-range", args.lr_range, 0.0, 10.0)
    args.weight_decay_range = parse_range("--weight-decay-range", args.weight_decay_range, 0.0, 1.0)
    for flag in ("--repeat", "--num-samples"):
        check_positive_int(flag, getattr(args, flag[2:].replace("-", "_")))
    if args.time_budget_s is not None and not (args.time_budget_s > 0):
        raise UsageError(f"--time-budget-s={args.time_budget_s:g} must be > 0")


def prepare_search(args: argparse.Namespace, settings: dict) -> tuple[TrainConfig, dict]:
    """What a search (`lr_search.py`, `pbt.py`) does before Ray: check --resume against its
    `settings` (`check_resume`, no earlier search in a new one's folder), check the fixed options
    (with the top of --lr-range and --weight-decay-range), load the data once, probe the storage.

    Returns:
        (the `TrainConfig` of the fixed options, the data as `trainables.data.load_data` gives it).
    Raises:
        UsageError: a --resume mismatch, a bad option, data that cannot load, storage that cannot be written.
    """
    check_resume(args, settings, new_ok=False)
    from trainables.config import parse_config
    from trainables.data import load_data

    try:
        cfg = parse_config({**args.fixed, "lr": args.lr_range[1], "weight_decay": args.weight_decay_range[1]})
        data = load_data(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    probe_storage(f"{args.storage_path}/{args.name}")
    return cfg, data


def check_resume(args: argparse.Namespace, settings: dict | None = None, new_ok: bool = True) -> None:
    """Before anything heavy loads: --resume needs a sweep in `--storage-path/--name`; a new search
    (`new_ok=False`) needs none there. A resumed sweep must keep the `settings` it started with,
    as recorded in `<experiment>/raysweep.json`.

    Raises:
        UsageError: naming the folder, or the first setting that differs and its recorded value.
    """
    from analysis import storage  # local paths without pyarrow; URIs (s3://...) through it

    experiment_dir = f"{args.storage_path}/{args.name}"
    try:
        has_sweep = storage.exists(storage.join(experiment_dir, "tuner.pkl"))
    except (OSError, ValueError) as e:
        raise UsageError(f"--storage-path: cannot read {experiment_dir}: {str(e).splitlines()[0]}") from None
    if not args.resume:
        if not new_ok and has_sweep:
            raise UsageError(f"{experiment_dir} already holds a search: add --resume to continue it, or pick another --name")
        return
    if not has_sweep:
        raise UsageError(f"--resume: no sweep to resume in {experiment_dir} (no tuner.pkl); check --name and "
                         "--storage-path, or drop --resume to start it")
    info_file = storage.join(experiment_dir, "raysweep.json")
    if settings is None or not storage.exists(info_file):
        return
    recorded = json.loads(storage.read_bytes(info_file)).get("settings", {})
    for key, value in json.loads(json.dumps(settings)).items():  # tuples as lists, as recorded
        if key in recorded and recorded[key] != value:
            raise UsageError(f"--resume: {key}={value!r} differs from the sweep being resumed ({recorded[key]!r}); "
                             "resume with the original flags")
