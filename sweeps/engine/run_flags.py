"""Run flags (resources, storage, failures, monitoring, searches) and the `RunOptions` built from them.

Nothing here imports Ray, torch, pandas or matplotlib (`--help` and usage errors stay fast).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from sweeps.engine.estimate.estimate_flags import add_estimate_args, check_estimate_args
from sweeps.engine.flags import (
    UsageError,
    check_dashboard_host,
    check_notify_urls,
    check_positive_int,
    check_storage_path,
    parse_gpu_flags,
    parse_range,
    seeds_value,
)
from trainables.command.failure_gate import MAX_INITIAL_FAILURES, SURVIVAL_WINDOW_S
from trainables.experiment import records
from trainables.experiment.objective import Objective, objective_of

SMOKE_TEST_EPOCHS = 2  # --smoke-test: every sweep's trials train this many epochs
MAX_FAILURES = 2  # retries of a failed trial (Tune's FailureConfig), unless --max-failures says otherwise
MAX_TRIALS = 10_000  # a larger grid is refused unless --max-trials raises the limit
GPU_SHARE = 0.25  # GPUs per trial when --gpus-per-trial is not given and the cluster has GPUs: four share one
NO_ENV_HELP = (
    "leave this shell's environment variables out of the trials, which then have those of the node's `ray start`, "
    "for a cluster whose nodes differ (default: every trial gets this shell's variables and PATH; "
    "docs/gpus-and-clusters.md)"
)
MLFLOW_DEFAULT_URI = (
    "sqlite:///mlflow.db"  # MLflow 3 refuses the file store (file:./mlruns) unless MLFLOW_ALLOW_FILE_STORE=true
)


# --- run options, written by hand ----------------------------------------------------------


def add_run_args(parser: argparse.ArgumentParser, *, name: str, grid: bool) -> None:
    """Flags of how a sweep runs: resources, storage, cluster, failures, monitoring.

    Args:
        name: the default experiment name.
        grid: add the flags only a grid has (`--seeds`, `--skip-existing`, `--retry-errored`,
            `--max-trials`).
    """
    add_resource_args(parser, name=name, grid=grid)
    add_failure_args(parser, grid=grid)
    add_monitoring_args(parser)
    add_estimate_args(parser)


def add_resource_args(parser: argparse.ArgumentParser, *, name: str, grid: bool) -> None:
    """The "resources and cluster" flags of `add_run_args`: GPUs/CPUs per trial, the cluster, storage."""
    res = parser.add_argument_group("resources and cluster")
    res.add_argument(
        "--gpus-per-trial",
        default=None,
        help="GPUs each trial gets: a fraction such as 0.25 (4 trials share a GPU), a whole number (2+: "
        "data-parallel), 0 for CPU trials, or auto (probe the memory, pack densely) (default: "
        f"{GPU_SHARE:g} when the cluster has GPUs, else 0)",
    )
    res.add_argument(
        "--cpus-per-trial",
        type=float,
        default=RunOptions.cpus_per_trial,
        help=f"CPU cores each trial gets (default: {RunOptions.cpus_per_trial:g})",
    )
    res.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="at most this many trials at once (default: as many as resources allow)",
    )
    res.add_argument(
        "--gpus",
        default=None,
        help="GPUs a local sweep may use: indices such as 0,2 (busy ones are still "
        "left out), or 'all' (every GPU, busy or not) (default: every GPU that is not busy)",
    )
    res.add_argument(
        "--address",
        default=None,
        help="an existing Ray cluster, e.g. 'auto' or 'HEAD_IP:6379'; 'local' always starts a private Ray "
        "(default: join the cluster `ray start` runs on this machine, else start a local Ray)",
    )
    res.add_argument(
        "--dashboard-host",
        default=RunOptions.dashboard_host,
        help=f"interface the Ray dashboard listens on (default: {RunOptions.dashboard_host})",
    )
    res.add_argument("--no-env", dest="carry_env", action="store_false", help=NO_ENV_HELP)
    res.add_argument("--storage-path", default="./runs", help="where experiments are written (default: ./runs)")
    res.add_argument(
        "--storage-is-shared",
        action="store_true",
        help="trust that --storage-path is reachable from every node of a multi-node cluster",
    )
    res.add_argument("--name", default=name, help=f"experiment name, a folder under --storage-path (default: {name})")
    res.add_argument(
        "--smoke-test", action="store_true", help=f"{SMOKE_TEST_EPOCHS} epochs per trial: the whole sweep in a minute"
    )
    if grid:
        res.add_argument(
            "--seeds",
            type=seeds_value,
            default=None,
            help="seeds per configuration: an axis 0..N-1 (default: 1, or --seed); auto: seeds by significance",
        )
        res.add_argument(
            "--estimate-from",
            default=None,
            metavar="EXP",
            help="with --dry-run: estimate the wall time from this finished experiment (default: --name's)",
        )
        res.add_argument(
            "--max-trials", type=int, default=MAX_TRIALS, help=f"refuse a grid of more trials (default: {MAX_TRIALS:,})"
        )


def add_failure_args(parser: argparse.ArgumentParser, *, grid: bool) -> None:
    """The "failures, resuming and extending" flags of `add_run_args`."""
    faults = parser.add_argument_group("failures, resuming and extending")
    faults.add_argument(
        "--max-failures",
        type=int,
        default=None,
        help=f"retries of a failed trial, each from its latest checkpoint (default: {MAX_FAILURES})",
    )
    faults.add_argument("--fail-fast", action="store_true", help="stop the whole sweep at the first trial error")
    faults.add_argument(
        "--max-initial-failures",
        type=int,
        default=RunOptions.max_initial_failures,
        help="command sweeps: stop when this many trial attempts failed before any trial reported --metric "
        "(crashes, or exits without it for one reason: 'no metric'); until one has (or survived "
        "--survival-window-s), no more start at once; 0: never (default: "
        f"{RunOptions.max_initial_failures}, as W&B's WANDB_AGENT_MAX_INITIAL_FAILURES)",
    )
    faults.add_argument(
        "--survival-window-s",
        type=float,
        default=RunOptions.survival_window_s,
        help="command sweeps: once one of the first commands has run this many seconds without failing (or "
        f"reported --metric), every trial starts (default: {RunOptions.survival_window_s:g})",
    )
    faults.add_argument(
        "--resume", action="store_true", help="continue the sweep --name where it stopped (Tuner.restore)"
    )
    if grid:
        faults.add_argument(
            "--retry-errored", action="store_true", help="with --resume: continue errored trials from their checkpoints"
        )
        faults.add_argument(
            "--skip-existing",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="reuse trials of this --name that already finished with the same config (default: on)",
        )


def add_monitoring_args(parser: argparse.ArgumentParser) -> None:
    """The "monitoring" flags of `add_run_args`: progress blocks and experiment trackers."""
    watch = parser.add_argument_group("monitoring")
    watch.add_argument(
        "--quiet",
        action="store_true",
        default=os.environ.get("RAYSWEEP_QUIET", "") not in ("", "0"),
        help="no progress blocks, only errors and the final lines (also: RAYSWEEP_QUIET=1)",
    )
    watch.add_argument(
        "--report",
        action=argparse.BooleanOptionalAction,
        default=RunOptions.report,
        help="write the report folder when the sweep ends: plots, paper table, report.md (default: on; "
        "`python -m analysis EXPERIMENT` writes it any time later; the table is printed either way)",
    )
    watch.add_argument(
        "--progress-every",
        type=float,
        default=RunOptions.progress_every,
        help=f"seconds between progress blocks (default: {RunOptions.progress_every:g})",
    )
    watch.add_argument(
        "--mlflow-uri",
        nargs="?",
        const=MLFLOW_DEFAULT_URI,
        default=None,
        help=f"also log every trial to MLflow at this tracking URI: a database ({MLFLOW_DEFAULT_URI}, "
        f"the value when the flag is given alone) or a server (http://host:5000); needs the trackers extra",
    )
    watch.add_argument(
        "--wandb-project",
        default=None,
        help="also log every trial to this Weights & Biases project (needs the trackers extra and "
        "`wandb login`, or WANDB_MODE=offline to write runs locally and `wandb sync` them later)",
    )
    watch.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="send a message when the sweep ends or stops on an error, to an apprise URL such as "
        "ntfy://topic, slack://..., mailto://..., json://host:port/ (repeatable; docs/research-record.md)",
    )


MAX_NAME_BYTES = 200  # a folder name holds 255 bytes (NAME_MAX); an out-of-memory round adds `_oom_gpu0.125`


def check_name(name: str) -> None:
    """Check --name: a plain folder name of at most MAX_NAME_BYTES bytes (UTF-8), before anything is written.

    Raises:
        UsageError: naming the value (cut short when long) and what is allowed.
    """
    shown = repr(name) if len(name) <= 80 else f"{name[:40]!r}... ({len(name)} characters)"
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise UsageError(f"--name={shown} must be a plain folder name (no '/', not '.' or '..')")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise UsageError(f"--name={shown} is too long: at most {MAX_NAME_BYTES} bytes (a folder of that name is made)")


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
        if getattr(args, flag[2:].replace("-", "_"), None) != "auto":
            check_positive_int(flag, getattr(args, flag[2:].replace("-", "_"), None))
    if not args.progress_every > 0:
        raise UsageError(f"--progress-every={args.progress_every} must be > 0 seconds")
    check_name(args.name)
    check_dashboard_host(args.dashboard_host)
    args.notify = check_notify_urls(args.notify)
    args.storage_path = check_storage_path(args.storage_path)
    if args.max_failures is not None and args.max_failures < 0:
        raise UsageError(f"--max-failures={args.max_failures} must be a whole number >= 0")
    if args.max_initial_failures < 0:
        raise UsageError(f"--max-initial-failures={args.max_initial_failures} must be a whole number >= 0 (0: off)")
    if not args.survival_window_s > 0:
        raise UsageError(f"--survival-window-s={args.survival_window_s:g} must be > 0 seconds")
    check_estimate_args(args)
    if args.fail_fast and args.max_failures:
        raise UsageError(
            f"--fail-fast stops at the first error, so --max-failures={args.max_failures} cannot apply; "
            "give one of them"
        )
    args.max_failures = 0 if args.fail_fast else (MAX_FAILURES if args.max_failures is None else args.max_failures)
    if getattr(args, "estimate_from", None) and not getattr(args, "dry_run", False):
        raise UsageError("--estimate-from says what --dry-run estimates from; give --dry-run too")
    if getattr(args, "retry_errored", False) and not args.resume:
        raise UsageError(
            "--retry-errored needs --resume (it continues the errored trials of a killed or finished sweep)"
        )
    if args.resume and not getattr(args, "skip_existing", True):
        raise UsageError(
            "--resume continues trials from their checkpoints; --no-skip-existing (rerun everything) contradicts it"
        )


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a sweep runs: the flags of `add_run_args` (and a search's --time-budget-s), checked and
    parsed by `check_run_args`. `run_options` builds it; `sweeps.engine.run.launch.start_sweep` takes it.

    Fields, with their units:
        name: the experiment, a folder under `storage_path`.
        storage_path: a local folder (made absolute) or a URI (s3://...).
        gpus_per_trial: GPUs per trial: a fraction of a GPU in (0, 1], whole GPUs (2+: data-parallel),
            0.0 (CPU trials), "auto" (probe the memory, pack densely) or None (`GPU_SHARE` with GPUs, else 0).
        cpus_per_trial: CPU cores per trial (> 0).
        gpus: the GPUs a local Ray may use: None (every idle one), "all", or indices.
        max_concurrent: at most this many trials at once (None: as resources allow).
        address: an existing Ray cluster; "local": always a private Ray (None: the cluster `ray start`
            runs on this machine, else a local one).
        dashboard_host: the interface Ray's dashboard listens on.
        carry_env: every trial gets this shell's environment variables (`sweeps.engine.cluster.job_env`);
            False: --no-env.
        storage_is_shared: trust that `storage_path` is reachable from every node.
        max_failures: retries of a failed trial (0 with `fail_fast`).
        max_initial_failures: command trials: attempts failing before any metric that stop the sweep
            (0: never; `trainables/command/failure_gate.py`).
        survival_window_s: command trials: seconds one of the first commands runs without failing
            that let every trial start (`failure_gate.SURVIVAL_WINDOW_S`).
        fail_fast: the first trial error stops the sweep.
        resume: continue the sweep `name` (`Tuner.restore`); retry_errored: errored trials too.
        time_budget_s: stop the whole sweep after this many seconds (None: no limit).
        quiet, progress_every: no progress blocks; seconds between them.
        report: write the report folder at the end (`analysis.write_up`); False: --no-report.
        mlflow_uri, wandb_project: trackers to log every trial to (None: none).
        notify: apprise URLs told when the sweep ends or stops (`sweeps.engine.run.notify`).
        objective: what the sweep ranks its trials by (Tune's metric and mode) and what its final
            table shows (the test metric, at the epoch the metric selects).
    """

    name: str
    storage_path: str
    gpus_per_trial: float | str | None = None
    cpus_per_trial: float = 1.0
    gpus: list[int] | str | None = None
    max_concurrent: int | None = None
    address: str | None = None
    dashboard_host: str = "127.0.0.1"
    carry_env: bool = True
    storage_is_shared: bool = False
    max_failures: int = MAX_FAILURES
    max_initial_failures: int = MAX_INITIAL_FAILURES
    survival_window_s: float = SURVIVAL_WINDOW_S
    fail_fast: bool = False
    resume: bool = False
    retry_errored: bool = False
    time_budget_s: float | None = None
    quiet: bool = False
    progress_every: float = 15.0
    report: bool = True
    mlflow_uri: str | None = None
    wandb_project: str | None = None
    notify: tuple[str, ...] = ()
    objective: Objective = Objective()

    @property
    def experiment_dir(self) -> str:
        """`storage_path/name`: where Tune writes the experiment (a path or a URI)."""
        return records.experiment_dir(self.storage_path, self.name)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The `RunOptions` of flags parsed and checked by `check_run_args` (flags a script does not
    have, such as --retry-errored or --time-budget-s, keep the field's default), with the sweep's
    `Objective` made once from its flags (`--metric`, `--mode`, `--test-metric`; a script without
    them: the defaults), unless the script made it already (`args.objective`)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions) if hasattr(args, f.name)}
    return RunOptions(**({"objective": objective_of(args)} | given))  # `args.objective`: made by the script


# --- searches (sweeps/lr_search.py, sweeps/pbt.py) ----------------------------------------


def add_search_args(parser: argparse.ArgumentParser, *, num_samples: int, num_samples_help: str) -> None:
    """Flags both searches have: LR / weight-decay bounds, seeds per trial, number of trials, budget."""
    parser.add_argument(
        "--lr-range",
        default="1e-4,1",
        help="LOW,HIGH of the learning rate, log scale, 0 < LOW < HIGH <= 10 (default: 1e-4,1)",
    )
    parser.add_argument(
        "--weight-decay-range",
        default="1e-6,1e-2",
        help="LOW,HIGH of the weight decay, log scale, 0 < LOW < HIGH <= 1 (default: 1e-6,1e-2)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="seeds per configuration, trained together in one trial; the searcher sees their mean (default: 1)",
    )
    parser.add_argument(
        "--num-samples", type=int, default=num_samples, help=f"{num_samples_help} (default: {num_samples})"
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=None,
        help="stop the whole search after this many seconds, counted over resumes (default: none)",
    )


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
