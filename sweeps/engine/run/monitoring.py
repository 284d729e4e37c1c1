"""Watching a running sweep: console progress with an ETA, and optional MLflow / W&B tracking.

The live view is the Ray dashboard (its URL is printed when Ray starts). The console gets one
short block every `--progress-every` seconds from `SweepProgress`, a `tune.Callback`:

    [0:01:30] 12 trials: 4 running, 6 pending, 2 finished, 0 errored, 0 diverged | best val/acc 0.9120 (sym_0.125_seed0)
      | epochs 20/360 | ETA 0:12:30   (one line on the console)
      sym_0.25_seed0   epoch 5/30  val/acc 0.8800  train/loss 0.4120  GPU 0
      ...

Use it with Tune's own output switched off, so the two do not interleave:

    RunConfig(callbacks=monitoring_callbacks(name, progress_every=15, ...), verbose=0, ...)

`--quiet` (or the environment variable RAYSWEEP_QUIET=1) keeps errors and the final line only:
for CI and scripts.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from typing import TextIO

from ray import tune

from analysis.progress import format_duration, format_progress, sweep_status
from sweeps.engine.flags import UsageError
from sweeps.engine.run.sweep_end import current_fit
from sweeps.engine.run_flags import MLFLOW_DEFAULT_URI, RunOptions
from sweeps.engine.sweep_records.provenance_capture import process_start_time
from trainables import ray_private
from trainables.experiment import records
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import TIME_BUDGET

HEARTBEAT_S = 120.0  # an unchanged status is printed again only after this many seconds


TRACKERS_INSTALL = "pip install 'raysweep[trackers]' (mlflow-skinny, wandb)"
_WORKING: set[tuple[str, str]] = set()  # the trackers `check_trackers` found working in this process


def check_trackers(mlflow_uri: str | None, wandb_project: str | None) -> None:
    """`check_mlflow` and `check_wandb` for the trackers asked for (None: not used), each once per process:
    the sweep scripts call this before anything is written (`preflight.check_before_writing`), and
    `monitoring_callbacks` again.

    Raises:
        UsageError: from those checks.
    """
    for kind, value, check in (("mlflow", mlflow_uri, check_mlflow), ("wandb", wandb_project, check_wandb)):
        if value and (kind, value) not in _WORKING:
            check(value)
            _WORKING.add((kind, value))


def monitoring_callbacks(
    name: str,
    *,
    progress_every: float = RunOptions.progress_every,
    quiet: bool = False,
    mlflow_uri: str | None = None,
    wandb_project: str | None = None,
    objective: Objective = Objective(),
) -> list[tune.Callback]:
    """The console progress callback (best by `objective`), plus Ray's own MLflow / W&B logger
    callbacks when asked for (flags of `sweeps/engine/run_flags.py:add_run_args`).

    Call before Ray starts: each tracker is set up here once (`check_mlflow`, `check_wandb`), so a
    tracker that cannot work is one line and exit 2, not a traceback per trial.
    Args:
        name: the experiment: MLflow's experiment name, W&B's group.
        progress_every: seconds between progress blocks; quiet: none at all.
        mlflow_uri, wandb_project: the trackers (None: not used).
    Raises:
        UsageError: `progress_every` not > 0, or a tracker that cannot be set up (package missing,
            URI refused or unreachable, no W&B login).
    """
    if not progress_every > 0:
        raise UsageError(f"--progress-every={progress_every} must be > 0 seconds")
    check_trackers(mlflow_uri, wandb_project)
    callbacks: list[tune.Callback] = [SweepProgress(interval_s=progress_every, quiet=quiet, objective=objective)]
    if mlflow_uri:
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        callbacks.append(MLflowLoggerCallback(tracking_uri=mlflow_uri, experiment_name=name))
    if wandb_project:
        from ray.air.integrations.wandb import WandbLoggerCallback

        # The logging actors run in Ray workers, whose environment is the cluster's, not this shell's:
        # pass this shell's WANDB_MODE (offline, ...) to their `wandb.init` explicitly.
        wandb_mode = {"mode": os.environ["WANDB_MODE"]} if os.environ.get("WANDB_MODE") else {}
        callbacks.append(WandbLoggerCallback(project=wandb_project, group=name, **wandb_mode))
    return callbacks


def check_mlflow(uri: str, timeout_s: float = 10.0) -> None:
    """Open the MLflow tracking store at `uri` once (a sqlite database is created if missing).

    One request (`MlflowClient.search_experiments`), no retries, `timeout_s` seconds for a server
    (MLflow's own defaults retry for minutes). MLflow 3 refuses `file:` stores unless
    MLFLOW_ALLOW_FILE_STORE=true: that refusal, like any other, comes back as one line.
    Raises:
        UsageError: mlflow missing, or the store refused or unreachable, naming the URI.
    """
    if importlib.util.find_spec("mlflow") is None:
        raise UsageError(f"--mlflow-uri={uri!r} needs the mlflow package: {TRACKERS_INSTALL}")
    from mlflow.tracking import MlflowClient

    limits = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": f"{timeout_s:g}"}
    saved = {k: os.environ.get(k) for k in limits}
    os.environ.update(limits)
    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as e:  # MlflowException and whatever the store's driver raises
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:240]
        raise UsageError(
            f"--mlflow-uri={uri!r}: MLflow cannot use this tracking store ({reason}); "
            f"give a database such as {MLFLOW_DEFAULT_URI} or a running server http://host:5000"
        ) from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_wandb(project: str) -> None:
    """W&B needs the package, and online a login; offline (WANDB_MODE=offline) it writes local run folders.

    Raises:
        UsageError: wandb missing, or online mode without credentials (`wandb.login(prompt=False)`
            reads the API key from WANDB_API_KEY or ~/.netrc without asking).
    """
    if importlib.util.find_spec("wandb") is None:
        raise UsageError(f"--wandb-project={project!r} needs the wandb package: {TRACKERS_INSTALL}")
    if os.environ.get("WANDB_MODE", "online").lower() in ("offline", "disabled", "dryrun"):
        return
    import wandb

    if not wandb.login(prompt=False):
        raise UsageError(
            f"--wandb-project={project!r}: no W&B login here; run `wandb login`, set WANDB_API_KEY, "
            "or set WANDB_MODE=offline (runs are written locally; `wandb sync` uploads them later)"
        )


class SweepProgress(tune.Callback):
    """Prints the sweep's status every `interval_s` seconds, each error at once, and a final line.

    A block whose counts, epochs and best value are those of the previous block is skipped
    (repeated only every HEARTBEAT_S), so a long wait for resources prints little.

    Args:
        interval_s: seconds between blocks (the first block is printed at the first step).
        quiet: print only trial errors and the final line.
        objective: what "best" means (its metric and mode).
        stream: where to print (default: sys.stdout at print time).
    """

    def __init__(
        self,
        interval_s: float = RunOptions.progress_every,
        quiet: bool = False,
        objective: Objective = Objective(),
        stream: TextIO | None = None,
    ):
        self.interval_s, self.quiet, self.objective, self.stream = interval_s, quiet, objective, stream
        self.total_trials: int | None = None
        self.started = time.time()  # the clock of every block: since this driver started, as --status counts it
        self.last_print = -math.inf
        self.last_key = None
        self.ending = None  # the `sweep_end.Ending` of the fit under way
        self.slots = 0  # the most trials seen running at once: the slots of the ETA's model
        self.placed: dict[str, str] = {}  # running trial id -> the GPU ids of its `placement.json`
        self.reached: dict[str, int] = {}  # trial id -> the highest `training_iteration` it reported
        self.rerun = 0  # epochs run again after a retry restored an earlier checkpoint (counted once in `epochs`)

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.total_trials = total_num_samples
        self.started = process_start_time()
        self.ending = current_fit()  # `SweepEnding`'s, set up just before: which trials the sweep stopped

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        self.slots = max(self.slots, sum(t.status == "RUNNING" for t in trials))
        if self.quiet or now - self.last_print < self.interval_s:
            return
        stops = self.ending.scheduler_stops if self.ending is not None else None
        status = sweep_status(trials, self.total_trials, self.objective, scheduler_stops=stops) | {"slots": self.slots}
        key = tuple(status[k] for k in ("running", "pending", "finished", "pruned", "errored", "diverged"))
        key += (status["epochs_done"], status["best"])
        if key == self.last_key and now - self.last_print < HEARTBEAT_S:
            return  # nothing moved: stay quiet, but say so at least every HEARTBEAT_S
        self.last_print, self.last_key = now, key
        status["running_trials"] = self._with_placement(trials, status["running_trials"])
        self._print(format_progress(status, time.time() - self.started, self.objective.metric))

    def _with_placement(self, trials, running: list) -> list:
        """`sweep_status`'s running trials, those on a GPU whose results hold no `gpu_ids` yet (before their first
        report) given the GPU ids of their `placement.json` (written at their start; local storage only: on object
        storage it arrives with the first report; `?` until then); kept once read, until the trial stops running."""
        on_gpu = {
            str(t): t
            for t in trials
            if t.status == "RUNNING" and t.placement_group_factory.required_resources.get("GPU", 0) > 0
        }
        self.placed = {t.trial_id: self.placed[t.trial_id] for t in on_gpu.values() if t.trial_id in self.placed}
        shown = []
        for name, result, planned in running:
            trial = on_gpu.get(name)
            if trial is not None and not result.get("gpu_ids"):
                folder = ray_private.local_trial_folder(trial) if trial.trial_id not in self.placed else None
                if folder and (gpu_ids := (records.read_placement(folder) or {}).get("gpu_ids")):
                    self.placed[trial.trial_id] = gpu_ids
                result = {**result, "gpu_ids": self.placed.get(trial.trial_id, "?")}  # on a GPU, not yet known
            shown.append((name, result, planned))
        return shown

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # A retry restores the trial's latest checkpoint and Tune's `training_iteration` with it (1, 2, 2, 3, ...
        # after a loss at epoch 2): `epochs` counts each epoch once, the final line says how many ran again.
        step = result.get("training_iteration")
        if isinstance(step, int) and "epoch" in result and not result.get(records.JOINS_STEP_METRIC):
            if step <= self.reached.get(trial.trial_id, 0):
                self.rerun += 1
            self.reached[trial.trial_id] = max(step, self.reached.get(trial.trial_id, 0))

    def on_trial_error(self, iteration, trials, trial, **info):
        where = trial.error_file or trial.path
        self._print([f"[{format_duration(time.time() - self.started)}] trial {trial} {_failed(trial)}: see {where}"])

    def on_experiment_end(self, trials, **info):
        # `SweepEnding`, first of the callbacks, has counted the trials already: this block says its outcomes.
        # Every trial ended: the planned ones never created were not needed (a searcher such as --seeds
        # auto's said FINISHED), so the line counts only the trials that ran and says how many were saved;
        # a sweep cut short (Ctrl-C, a time budget) counts them as not run.
        ending = self.ending
        cut = ending is not None and ending.cut()
        complete = all(t.status in ("TERMINATED", "ERROR") for t in trials) and not cut
        stopped = ending.stopped if ending is not None else set()
        stops = ending.scheduler_stops if ending is not None else None
        total = None if complete else self.total_trials
        status = sweep_status(trials, total, self.objective, over=True, stopped=stopped, scheduler_stops=stops)
        ended_at = ending.ended_at if ending is not None and ending.ended_at else time.time()
        lines = format_progress(status, ended_at - self.started, self.objective.metric)
        saved = (self.total_trials or 0) - len(trials) if complete else 0
        said = (
            "finished" if not cut else "stopped by its time budget" if ending.ended_by == TIME_BUDGET else "interrupted"
        )
        line = lines[0].replace("] ", f"] sweep {said}: ", 1)
        if self.rerun:
            line = line.replace(" | ETA", f" (and {self.rerun} run again after retries) | ETA", 1)
        self._print([line + (f" | {saved} planned trial(s) not needed: the searcher finished" if saved > 0 else "")])

    def _print(self, lines: list[str]) -> None:
        stream = self.stream or sys.stdout
        stream.write("\n".join(lines) + "\n")
        stream.flush()


def _failed(trial) -> str:
    """What a trial's error was, in the words of its error line: `errored`, or, where its folder (local storage)
    holds the out-of-memory marker, `ran out of GPU memory at 0.25 GPU (re-run with more later)`: the sweep
    re-queues it (`launch.rerun_oom_trials`)."""
    folder = ray_private.local_trial_folder(trial)
    share = (records.read_oom_marker(folder) or {}).get("gpus_per_trial") if folder else None
    if not isinstance(share, (int, float)):
        return "errored"
    return f"ran out of GPU memory at {share:g} GPU" + (" (re-run with more later)" if 0 < share < 1 else "")
