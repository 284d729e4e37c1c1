"""Small helpers shared by the sweep scripts: flags, input checks, Ray start-up, resources.

Each is a plain function; the sweep scripts call `Tuner`, `TuneConfig` and `RunConfig` themselves.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import sys
import time
from pathlib import Path

import ray
from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig

from trainables.config import DATASETS, LOSSES, METRIC, MODE, MODELS


class UsageError(ValueError):
    """A user mistake in flags or config: printed as one line, exit code 2, no traceback."""


def add_common_args(parser: argparse.ArgumentParser, *, name: str) -> None:
    """Flags every sweep has: data, model, resources, storage, cluster."""
    parser.add_argument("--dataset", default="digits", help=f"one of {', '.join(DATASETS)} (default: digits, bundled)")
    parser.add_argument("--data-root", default=None, help="cifar10: folder with the python batches; npz: the .npz file")
    parser.add_argument("--model", default="mlp", help=f"one of {', '.join(MODELS)} (default: mlp)")
    parser.add_argument("--loss", default="ce", help=f"one of {', '.join(LOSSES)} (default: ce)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per trial (default: 30; 2 with --smoke-test)")
    parser.add_argument(
        "--gpus-per-trial", default=None,
        help="GPUs each trial gets: a fraction such as 0.25 (4 trials share a GPU), a whole number, "
        "or 0 for CPU trials, or auto (probe the memory, pack densely; sweeps/gpus.py) (default: 0.25 when the cluster has GPUs, else 0)",
    )
    parser.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPU cores each trial gets (default: 1)")
    parser.add_argument("--max-concurrent", type=int, default=None, help="at most this many trials at once (default: as many as resources allow)")
    parser.add_argument("--storage-path", default="./runs", help="where experiments are written (default: ./runs)")
    parser.add_argument("--name", default=name, help=f"experiment name, a folder under --storage-path (default: {name})")
    parser.add_argument("--address", default=None, help="an existing Ray cluster, e.g. 'auto' or 'HEAD_IP:6379' (default: start a local one)")
    parser.add_argument("--dashboard-host", default="127.0.0.1", help="interface the Ray dashboard listens on (default: 127.0.0.1)")
    parser.add_argument("--smoke-test", action="store_true", help="2 epochs: the whole sweep in about a minute on 2 cores")


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


def check_positive_int(flag: str, value: int | None, low: int = 1) -> None:
    if value is not None and value < low:
        raise UsageError(f"{flag}={value} must be a whole number >= {low}")


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


def secure_dashboard(host: str) -> None:
    """Before a local Ray starts: on a non-loopback dashboard, warn and require Ray's token authentication.

    Anyone who can reach the dashboard port can submit a job through the Jobs API, that is run
    any code on the cluster (CVE-2023-48022, "ShadowRay"). Recent Ray can require a token from every
    client (`RAY_AUTH_MODE=token`, docs.ray.io/en/latest/ray-security/token-auth.html); where the
    installed Ray has it and the user has not chosen a mode, it is turned on here. (Ray 2.60 turns it
    on by default for a new local cluster; setting it explicitly keeps it on whatever the default.)
    """
    if check_dashboard_host(host):
        return
    print(f"warning: the Ray dashboard will listen on {host}: anyone who can reach its port can run code on "
          f"this cluster through the Jobs API (CVE-2023-48022). Prefer 127.0.0.1 and an SSH tunnel.", file=sys.stderr)
    try:
        from ray._private.authentication.authentication_token_setup import AUTH_MODE_ENV_VAR
    except ImportError:
        print("warning: this Ray has no token authentication; firewall the dashboard port", file=sys.stderr)
        return
    mode = os.environ.setdefault(AUTH_MODE_ENV_VAR, "token")
    if mode.lower() == "token":
        print(f"token authentication is on ({AUTH_MODE_ENV_VAR}=token): clients need the token in ~/.ray/auth_token "
              f"(`ray get-auth-token`)", file=sys.stderr)
    else:
        print(f"warning: {AUTH_MODE_ENV_VAR}={mode} was set: the dashboard is open to anyone who can reach it", file=sys.stderr)


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


def init_ray(address: str | None, dashboard_host: str, num_gpus: int | None = None, log_to_driver: bool = False) -> None:
    """Start a local Ray (dashboard on `dashboard_host`) or connect to `address`; print the dashboard URL.

    Trials' output is not copied to this console unless `log_to_driver`: it goes to each trial's
    `stdout` / `stderr` files (`RunConfig(log_to_file=True)`) and the dashboard's logs.
    """
    started = time.perf_counter()
    if ray.is_initialized():  # a notebook or test that started Ray itself
        print(f"using the running Ray; dashboard: {ray.worker.get_dashboard_url() or 'not running'}", flush=True)
        return
    if address:
        context = ray.init(address=address, log_to_driver=log_to_driver)
    else:
        secure_dashboard(dashboard_host)
        context = ray.init(dashboard_host=dashboard_host, include_dashboard=True, num_gpus=num_gpus,
                           log_to_driver=log_to_driver)
    url = context.dashboard_url
    print(f"Ray started in {time.perf_counter() - started:.1f} s; dashboard: " + (f"http://{url}" if url else "not running"), flush=True)


def default_gpus_per_trial() -> float:
    """0.25 GPU per trial (four small trials share a GPU) when the cluster has GPUs, else 0 (CPU)."""
    return 0.25 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def check_resources(gpus_per_trial: float, cpus_per_trial: float) -> None:
    """Fail fast when no node of the cluster can ever hold one trial (Ray would wait forever).

    Raises:
        UsageError: naming the request and the largest node's CPUs and GPUs.
    """
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if any(n.get("GPU", 0) >= gpus_per_trial and n.get("CPU", 0) >= cpus_per_trial for n in nodes):
        return
    best_gpus = max((n.get("GPU", 0) for n in nodes), default=0)
    best_cpus = max((n.get("CPU", 0) for n in nodes), default=0)
    raise UsageError(
        f"each trial asks for {gpus_per_trial:g} GPU(s) and {cpus_per_trial:g} CPU(s), but the largest node "
        f"has {best_gpus:g} GPU(s) and {best_cpus:g} CPU(s); lower --gpus-per-trial / --cpus-per-trial"
    )


def write_sweep_info(experiment_dir: Path | str, info: dict) -> None:
    """Record the sweep's metric, mode and command line in `<experiment>/raysweep.json`."""
    if "://" in str(experiment_dir):
        return  # remote storage: Ray writes its own files there; nothing of ours to add
    folder = Path(experiment_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "raysweep.json").write_text(json.dumps(info, indent=1))


def sweep_tune_config(max_concurrent: int | None, **overrides) -> TuneConfig:
    """The `TuneConfig` every sweep starts from: rank by `val/acc`, reuse trial actors.

    Actor reuse keeps a trial's worker process for the next trial (no Python/torch start-up per
    trial); measured in benchmarks/sweep_efficiency.py.
    """
    settings = {"metric": METRIC, "mode": MODE, "max_concurrent_trials": max_concurrent, "reuse_actors": True}
    return TuneConfig(**(settings | overrides))


def sweep_run_config(name: str, storage_path, max_failures: int = 2, fail_fast: bool = False,
                     callbacks: list | None = None, **overrides) -> RunConfig:
    """The `RunConfig` every sweep starts from.

    Storage under `storage_path/name`; the best two checkpoints by `val/acc` (Ray also keeps the
    latest, for resuming); a failed trial retried `max_failures` times from its latest checkpoint
    (`fail_fast`: the first error stops the sweep); files trials write (noise.json, logs) synced
    to storage; each trial's stdout/stderr in files in its folder; our progress `callbacks`
    instead of Tune's tables (verbose=0).
    """
    settings = {
        "name": name,
        "storage_path": str(storage_path),
        "checkpoint_config": CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=METRIC, checkpoint_score_order=MODE),
        "failure_config": FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        "sync_config": SyncConfig(sync_artifacts=True),
        "log_to_file": True,
        "callbacks": callbacks,
        "verbose": 0,
    }
    return RunConfig(**(settings | overrides))


# --- searches (sweeps/lr_search.py, sweeps/pbt.py) --------------------------------------------


def add_search_args(parser: argparse.ArgumentParser, *, num_samples: int, num_samples_help: str) -> None:
    """Flags both searches have: the fixed noise setting, LR / weight-decay bounds, seeds, budget, resume."""
    parser.add_argument("--noise-type", default="sym", help="sym or asym (default: sym)")
    parser.add_argument("--noise-rate", type=float, default=0.5, help="label-noise rate in [0, 1) (default: 0.5)")
    parser.add_argument("--lr-range", default="1e-4,1", help="LOW,HIGH of the learning rate, log scale, 0 < LOW < HIGH <= 10 (default: 1e-4,1)")
    parser.add_argument("--weight-decay-range", default="1e-6,1e-2", help="LOW,HIGH of the weight decay, log scale, 0 < LOW < HIGH <= 1 (default: 1e-6,1e-2)")
    parser.add_argument("--repeat", type=int, default=1, help="seeds per configuration, trained together in one trial; the searcher sees their mean (default: 1)")
    parser.add_argument("--num-samples", type=int, default=num_samples, help=f"{num_samples_help} (default: {num_samples})")
    parser.add_argument("--time-budget-s", type=float, default=None, help="stop the whole search after this many seconds, counted over resumes (default: none)")
    parser.add_argument("--resume", action="store_true", help="continue the search in --storage-path/--name where it stopped")


def check_search_args(args: argparse.Namespace) -> None:
    """Check the flags of `add_search_args` (and the resource flags) and parse the LR / weight-decay
    ranges in place, before Ray starts.

    Raises:
        UsageError: naming the first bad value and its allowed range.
    """
    from trainables.config import NOISE_TYPES

    if args.noise_type not in NOISE_TYPES:
        raise UsageError(f"--noise-type={args.noise_type!r} is not one of {', '.join(NOISE_TYPES)}")
    if not (0.0 <= args.noise_rate < 1.0):
        raise UsageError(f"--noise-rate={args.noise_rate:g} is outside the allowed range [0, 1)")
    args.lr_range = parse_range("--lr-range", args.lr_range, 0.0, 10.0)
    args.weight_decay_range = parse_range("--weight-decay-range", args.weight_decay_range, 0.0, 1.0)
    for flag in ("--repeat", "--num-samples", "--epochs", "--max-concurrent"):
        check_positive_int(flag, getattr(args, flag[2:].replace("-", "_")))
    if args.time_budget_s is not None and not (args.time_budget_s > 0):
        raise UsageError(f"--time-budget-s={args.time_budget_s:g} must be > 0")
    if args.cpus_per_trial <= 0:
        raise UsageError(f"--cpus-per-trial={args.cpus_per_trial} must be > 0")


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


def check_experiment(experiment_dir: str, resume: bool, settings: dict) -> None:
    """Before Ray starts: --resume needs an experiment there; a new search needs none.

    A resumed search must keep the settings it started with (noise, bounds, epochs, seeds, ...):
    they are compared with the `settings` recorded in `<experiment>/raysweep.json`.
    Raises:
        UsageError: naming the folder, or the first setting that differs and its recorded value.
    """
    from ray.tune import Tuner

    if not resume:
        if "://" not in experiment_dir and (Path(experiment_dir) / "tuner.pkl").exists():
            raise UsageError(f"{experiment_dir} already holds a search: add --resume to continue it, or pick another --name")
        return
    if not Tuner.can_restore(experiment_dir):
        raise UsageError(f"--resume: no search to resume in {experiment_dir} (no tuner.pkl); drop --resume to start one")
    info_file = Path(experiment_dir) / "raysweep.json"
    if "://" in experiment_dir or not info_file.exists():
        return
    recorded = json.loads(info_file.read_text()).get("settings", {})
    for key, value in json.loads(json.dumps(settings)).items():  # tuples as lists, as recorded
        if key in recorded and recorded[key] != value:
            raise UsageError(f"--resume: {key}={value!r} differs from the search being resumed ({recorded[key]!r}); "
                             "resume with the original flags")
