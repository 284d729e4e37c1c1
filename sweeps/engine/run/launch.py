"""The engine's shared pieces around each sweep script's own `Tuner`: every sweep (grid, search, PBT,
data-parallel and command trials) runs through them.

A sweep script parses its flags (`sweeps/engine/run_flags.py`), builds its search space, and runs
its sweep in Ray Tune's words, as Ray's examples do:

    sweep = start_sweep(options, trial_function)   # driver lock, Ray start-up, checks
    code, rounds = sweep.fit(
        TuneConfig(..., metric=options.objective.metric, mode=options.objective.mode),
        param_space,
        lambda tune_config: Tuner(
            sweep.trainable, param_space=param_space, tune_config=tune_config, run_config=sweep.run_config
        ),
    )  # + the pieces every sweep shares -> Tuner (or Tuner.restore) -> fit -> OOM re-queue -> outcome, table, report

So every sweep gets the same per-trial log files, progress block, MLflow / W&B callbacks,
retries, checkpoints kept, resume, memory caps and OOM re-queue.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

import ray
from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, TuneConfig, Tuner
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import BasicVariantGenerator

from sweeps.engine import estimate
from sweeps.engine.cluster.gpus import (
    check_shared_storage,
    choose_local_gpus,
    next_fraction_after_oom,
    oom_trials,
)
from sweeps.engine.cluster.ray_start import check_resources, init_ray
from sweeps.engine.cluster.trial_resources import TrialFunction, gpus_per_trial, max_concurrent_trials, with_resources
from sweeps.engine.flags import UsageError
from sweeps.engine.run import notify, resume, state_copy, sweep_end
from sweeps.engine.run.checkpoint_repair import RestoreFromSurvivingCheckpoint
from sweeps.engine.run.monitoring import monitoring_callbacks
from sweeps.engine.run.no_retry import NoRetryOnMarkedError
from sweeps.engine.run.trial_folders import fresh_dirname, note_resume
from sweeps.engine.run.tune_start import trim_tune_start
from sweeps.engine.run_flags import MAX_FAILURES, RunOptions
from sweeps.engine.sweep_records import driver_lock, provenance_capture
from sweeps.engine.sweep_records.sweep_info import sweep_info
from trainables import ray_private
from trainables.command.initial_failures import InitialFailures
from trainables.experiment import records, storage
from trainables.experiment.objective import Objective

# A running trial's files (logs, noise.json) are copied to storage at its first report this long after the last copy.
ARTIFACT_SYNC_PERIOD_S = 5


@dataclasses.dataclass
class Sweep:
    """A started sweep (`start_sweep`): this driver holds the experiment folder and Ray is up.

    The script runs it with `fit`, giving its own `TuneConfig`, its search space and its own `Tuner(...)`
    built from `trainable` (the trial function in `tune.with_resources`), the completed config and
    `run_config` (`sweep_run_config` for the flags). `gpus` is the GPU share per trial. What the sweep ranks
    by is `options.objective`.
    """

    options: RunOptions
    trial_function: TrialFunction
    gpus: float
    run_config: RunConfig
    held: driver_lock.DriverHold
    starts_ray: bool
    settings: dict | None = None

    @property
    def trainable(self):
        """The trial function with this sweep's resources per trial (`tune.with_resources`)."""
        return self.trainable_for(self.gpus)

    def trainable_for(self, share: float):
        """The trial function with `share` GPUs per trial (the OOM re-queue rounds double it)."""
        return with_resources(self.trial_function, share, self.options.cpus_per_trial, self.options.experiment_dir)

    def fit(
        self,
        tune_config: TuneConfig,
        param_space: dict,
        new_tuner: Callable[[TuneConfig], Tuner],
        reused: dict | None = None,
    ) -> tuple[int, list]:
        """Run the sweep: the one path of every script from its `TuneConfig` to its exit code.

        `tune_config` gets the pieces every sweep shares (`sweep_tune_config`: actors reused, trials at
        once for the GPUs, --time-budget-s, trial folder names); the sweep's first line is printed and
        Tune's switches set (`set_tune_environment`). Then the script's `new_tuner(tune_config)` (its
        `Tuner(...)`) runs, a new sweep's `raysweep.json` written first; a resumed sweep (--resume) runs
        `Tuner.restore` of the sweep as it was killed instead (unfinished trials go on; errored ones with
        --retry-errored; restore cannot change a search space, ray-project/ray#42221). GPU out-of-memory
        trials are re-queued (`rerun_oom_trials`), the outcome said, the summary table printed, the
        folder released, and a Ray this sweep started stopped.

        Args:
            tune_config: the script's own (search_alg, scheduler, num_samples, metric and mode of
                `options.objective`, trial_name_creator, which also names the trial folders).
            param_space: the `Tuner`'s, as it is (counted in `raysweep.json`'s `total_trials`).
            new_tuner: the completed `TuneConfig` -> the script's `Tuner(self.trainable, param_space=...,
                tune_config=..., run_config=self.run_config)`.
            reused: finished trials of earlier runs (`resume.plan_cells`), counted in the outcome.
        Returns:
            (exit code: 0 all done, 1 a trial errored or diverged or no trial reported the objective's
            metric, 130 Ctrl-C, 143 SIGTERM; the `ResultGrid`s: the sweep's, then one per OOM re-queue round;
            a sweep stopped early re-queues nothing and says so last: `sweep_end.say_interrupted`).
        Raises:
            ValueError: no trial_name_creator.
        """
        if tune_config.trial_name_creator is None:
            raise ValueError("the sweep's TuneConfig needs a trial_name_creator (it also names the trial folders)")
        options, objective, reused = self.options, self.options.objective, reused or {}
        at_once = max_concurrent_trials(options, self.gpus, self.trial_function, tune_config)
        tune_config = sweep_tune_config(tune_config, at_once, options)
        announce(options, self.gpus, tune_config)
        set_tune_environment(options.experiment_dir)
        if options.resume:
            state_copy.restore_whole_state(options.experiment_dir)  # a torn state: its last whole copy
            note_resume(options.experiment_dir)  # a trial no state lists goes on in its folder
            tuner = Tuner.restore(
                options.experiment_dir, self.trainable, resume_unfinished=True, resume_errored=options.retry_errored
            )
        else:
            tuner = new_tuner(tune_config)
            info = sweep_info(objective, tune_config, param_space, self.settings)
            kept = estimate.take_pending_estimate(options.storage_path, options.name)
            records.write_settings(options.experiment_dir, info | ({"estimate": kept} if kept else {}))
        first, ending = sweep_end.fit(tuner, self.held, options.resume)
        oom = (self.trainable_for, self.gpus, self.run_config, tune_config)
        rounds = [first] if ending.unfinished() else rerun_oom_trials(first, *oom)
        requeued = sweep_end.count_requeued(ending, rounds)  # trials re-run count by their re-run's end
        reused = resume.reused_outside(rounds, reused)  # a resumed sweep holds some of them
        code = resume.say_outcome(rounds, reused, objective.metric, requeued, ending)
        code = sweep_end.EXIT_CODES.get(ending.signal, code)
        notify.sweep_ended(code, ending, rounds, objective, len(reused))
        self.held.record_end(code, ending, options.resume)  # the summary and report read the sweep as over
        sweep_end.print_summary(options.experiment_dir, objective, self.starts_ray, options.report)
        checked = estimate.record_actual(options.experiment_dir, options.resume)
        folders = [str(options.experiment_dir), *(str(r.experiment_path) for r in rounds[1:])]
        print(f"results: {', '.join(folders)} | {checked}")
        sweep_end.say_interrupted(ending, len(reused))
        self.held.release(code)
        return code, rounds


def start_sweep(
    options: RunOptions,
    trial_function: TrialFunction,
    *,
    checkpoint_config: CheckpointConfig | None = None,
    settings: dict | None = None,
) -> Sweep:
    """Start a sweep: its `RunConfig`, this driver's hold on the experiment folder, Ray (local or a
    cluster) with the GPU choice, the checks that fail fast, and its provenance record.

    Args:
        options: how the sweep runs and what it ranks by (`options.objective`; `run_flags.run_options`
            of the flags `check_run_args` checked).
        trial_function: see `TrialFunction`.
        checkpoint_config: default: the best two by the objective's metric (and the latest).
        settings: the sweep's settings, recorded in `raysweep.json` (a resumed search must match).
    --max-initial-failures applies where the trial function uses the sweep's failure gate (command trials).
    Returns:
        the `Sweep`, for the script's `Tuner`.
    Raises:
        UsageError: a request no node can hold, a bad tracker, a cluster without shared storage,
            another driver alive on `options.experiment_dir` (`sweeps.engine.sweep_records.driver_lock`).
    """
    gated = getattr(trial_function.function, "uses_failure_gate", False)  # command trials
    callbacks = monitoring_callbacks(  # before Ray: a bad tracker is a usage error
        options.name,
        progress_every=options.progress_every,
        quiet=options.quiet,
        mlflow_uri=options.mlflow_uri,
        wandb_project=options.wandb_project,
        objective=options.objective,
    )
    run_config = sweep_run_config(
        options.name,
        options.storage_path,
        max_failures=options.max_failures,
        fail_fast=options.fail_fast,
        callbacks=callbacks,
        objective=options.objective,
        checkpoint_config=checkpoint_config,
        max_initial_failures=options.max_initial_failures if gated else None,
        survival_window_s=options.survival_window_s,
    )
    no_cluster = options.address == "local" or not (options.address or os.environ.get("RAY_ADDRESS"))
    starts_ray = not ray.is_initialized() and no_cluster
    held, gpus = hold_and_start_ray(options, trial_function)
    notify.watch(options.notify, options.name)
    # every run (first, --resume, extension) records what ran
    provenance_capture.record_run(options.experiment_dir, trial_function.params)
    return Sweep(options, trial_function, gpus, run_config, held, starts_ray, settings)


def announce(options: RunOptions, gpus: float, tune_config: TuneConfig) -> None:
    """The sweep's first line after Ray is up: starting or resuming, resources per trial, trials at once."""
    at_once = tune_config.max_concurrent_trials
    print(
        f"{'resuming' if options.resume else 'starting'} {options.name}: {gpus:g} GPU and "
        f"{options.cpus_per_trial:g} CPU per trial" + (f", {at_once} at once" if at_once else ""),
        flush=True,
    )


def sweep_tune_config(
    tune_config: TuneConfig, max_concurrent: int | None = None, options: RunOptions | None = None
) -> TuneConfig:
    """`tune_config` with the pieces every sweep shares: trial actors reused where no scheduler stops trials early
    (no Python/torch start-up per trial; benchmarks/sweep_efficiency.py) and `max_concurrent` trials at once (None:
    Tune's default); with `options`, its --time-budget-s (seconds) and trial folders named by its trial_name_creator
    (`trial_folders.fresh_dirname`)."""
    shared = {"reuse_actors": _reuse_actors(tune_config), "max_concurrent_trials": max_concurrent}
    if options is not None:
        shared |= {
            "time_budget_s": options.time_budget_s,
            "trial_dirname_creator": fresh_dirname(options.experiment_dir, tune_config.trial_name_creator),
        }
    return dataclasses.replace(tune_config, **shared)


def _reuse_actors(tune_config: TuneConfig) -> bool:
    """Whether trial actors may be reused: only without a scheduler that stops trials (ASHA, PBT...).
    A function trainable's `reset_config` gives up when a stopped trial's thread outlives 2 s
    (TUNE_FUNCTION_THREAD_TIMEOUT_S), as a command ending its group does; the idle actor then kept
    the trial's CPUs with nothing running (issue 55: 8 minutes on a 2-CPU Ray)."""
    return tune_config.scheduler is None or type(tune_config.scheduler) is FIFOScheduler


def hold_and_start_ray(options: RunOptions, trial_function: TrialFunction):
    """Take the experiment folder for this driver, start or join Ray, and check what needs Ray up:
    shared storage on a cluster, the resources per trial.

    Returns:
        (the `driver_lock` hold, released by the caller with the sweep's exit code; GPUs per trial).
    Raises:
        UsageError: another driver alive on the folder (`sweeps.engine.sweep_records.driver_lock`), or a check fails;
            after the hold, the folder is then left as it was found (released with code 2).
    """
    try:  # one driver per experiment folder, refused before Ray starts (released at exit)
        held = driver_lock.hold(options.experiment_dir)
    except driver_lock.ExperimentHeld as e:
        raise UsageError(str(e)) from None
    try:
        init_ray(
            options.address,
            options.dashboard_host,
            num_gpus=choose_local_gpus(options.gpus, options.address),
            runtime_env=trial_function.runtime_env,
            carry_env=options.carry_env,
        )
        nodes_alive = sum(node["Alive"] for node in ray.nodes())
        check_shared_storage(options.storage_path, nodes_alive, options.storage_is_shared)
        gpus = gpus_per_trial(options.gpus_per_trial, options.cpus_per_trial, trial_function)
        check_resources(gpus, options.cpus_per_trial)
    except UsageError:
        held.release(2)  # no trial started: the folder is left as it was found
        raise
    return held, gpus


def set_tune_environment(experiment_dir: str) -> None:
    """Tune's switches every sweep sets (environment variables, read when Tune runs; one failure per
    dead worker), and one line saying where the results and TensorBoard files are."""
    # Our progress callbacks report (verbose=0); Tune's own output engine would still print its
    # "Configuration for experiment" box and a TensorBoard hint into Ray's temp folder: it is off
    # (Ray's switch), and one line says where the results and TensorBoard files are.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    print(f"results and TensorBoard files: {experiment_dir} (tensorboard --logdir {experiment_dir})", flush=True)
    # Tune logs every trial error with its traceback; each is in the trial's error.txt, the progress
    # block names that file, and the outcome prints each error once (trainables/command/initial_failures.py).
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    sweep_end.quiet_tune_end()  # Tune's own lines at an early stop: the sweep's outcome says it instead
    # A diverged trial's last report has no `metric`, so that schedulers skip it: allow that.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Short epochs checkpoint often; Tune then snapshots its state often, cheaply (ms), and warns each time.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # A worker killed while Tune hands it the next trial (actor reuse) costs one retry (Tune counted two).
    ray_private.count_each_actor_death_once()
    ray_private.upload_files_whole(storage.copy_whole)  # a full disk leaves no history file cut short in place


def sweep_run_config(
    name: str,
    storage_path,
    max_failures: int = MAX_FAILURES,
    fail_fast: bool = False,
    callbacks: list | None = None,
    objective: Objective = Objective(),
    checkpoint_config: CheckpointConfig | None = None,
    max_initial_failures: int | None = None,
    survival_window_s: float = RunOptions.survival_window_s,
    **overrides,
) -> RunConfig:
    """The `RunConfig` every sweep starts from.

    Storage under `storage_path/name`; the best two checkpoints by the objective's metric (Ray also keeps the
    latest, for resuming) unless `checkpoint_config` says otherwise; a failed trial retried
    `max_failures` times from its latest checkpoint (`fail_fast`: the first error stops the
    sweep), never when its last report marks the error as not worth a retry (`NoRetryOnMarkedError`),
    and restored from the newest checkpoint left when the recorded one is gone
    (`RestoreFromSurvivingCheckpoint`; in the Tuner's `RunConfig`, so it acts on `--resume`): every
    failure callback is added here, after `callbacks`. Files trials write (noise.json, logs) are
    synced to storage; each trial's stdout/stderr goes to files in its folder; our progress
    `callbacks` replace Tune's tables (verbose=0). With `max_initial_failures` (command trials), the
    sweep's failure gate (`InitialFailures`, also the stopper): a failure before any metric that
    repeats is not retried, and that many of them (crashes, or exits without the metric for one reason)
    before any trial reported the objective's metric stop the sweep; until one command has run
    `survival_window_s` seconds or reported the metric, only that many start.

    Trial files are synced in the background every `ARTIFACT_SYNC_PERIOD_S` and once, waited for,
    when the trial ends, not on every checkpoint: Tune's default (`sync_artifacts_on_checkpoint`)
    makes each checkpointing `tune.report` wait for a copy of the trial folder, on the trial's
    critical path every epoch (benchmarks/trainable_overhead.py).
    """
    trim_tune_start()  # W&B and MLflow (for Tune's usage record of callbacks), torch (for tensorboardX) left out
    initial = (
        [InitialFailures(max_initial_failures, survival_window_s, objective.metric)]
        if max_initial_failures is not None
        else []
    )
    ending = sweep_end.SweepEnding(initial[0] if initial else None, fail_fast)  # first: the outcome, the last line
    settings = {
        "name": name,
        "storage_path": str(storage_path),
        "checkpoint_config": checkpoint_config
        or CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute=objective.metric, checkpoint_score_order=objective.mode
        ),
        "failure_config": FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        "sync_config": SyncConfig(
            sync_artifacts=True, sync_artifacts_on_checkpoint=False, sync_period=ARTIFACT_SYNC_PERIOD_S
        ),
        "log_to_file": True,
        "callbacks": [ending, *(callbacks or []), NoRetryOnMarkedError(), RestoreFromSurvivingCheckpoint(), *initial]
        + [state_copy.KeepWholeState(records.experiment_dir(storage_path, name))]  # for a --resume of a torn state
        + ray_private.history_keeping_loggers(records.JOINS_STEP_METRIC),  # Tune's own drop rows at a restore
        "stop": initial[0] if initial else None,
        "verbose": 0,
    }
    return RunConfig(**(settings | overrides))


def rerun_oom_trials(
    results, trainable_for, gpus_per_trial: float, run_config: RunConfig, tune_config: TuneConfig
) -> list:
    """Re-queue trials that ran out of GPU memory with a doubled share, until none do or a whole GPU fails.

    Each round is a new `Tuner` over exactly the failed configs (`BasicVariantGenerator`'s
    `points_to_evaluate`), written next to the first experiment as `<name>_oom_gpu<share>`; the
    trials start afresh, Ray places them as usual.
    Args:
        results: the first `ResultGrid`.
        trainable_for: share -> the trainable wrapped in `tune.with_resources` for that share.
        gpus_per_trial: the share the first round ran with.
        run_config: the first round's `RunConfig`; each round copies it under a new name.
        tune_config: the first round's `TuneConfig`: each round keeps its metric, mode and trial names,
            without its searcher, scheduler, concurrency limit or time budget.
    Returns:
        [results, round 1, round 2, ...]: every `ResultGrid`, first included.
    """
    rounds = [results]
    share = gpus_per_trial
    while (configs := oom_trials(rounds[-1])) and (share := next_fraction_after_oom(share)) is not None:
        print(f"{len(configs)} trial(s) ran out of GPU memory: re-queued with {share:g} GPU each", flush=True)
        rounds.append(
            Tuner(
                trainable_for(share),
                param_space=dict(configs[0]),  # every point names the same keys; each point replaces one sample
                tune_config=sweep_tune_config(
                    TuneConfig(
                        metric=tune_config.metric,
                        mode=tune_config.mode,
                        num_samples=len(configs),
                        search_alg=BasicVariantGenerator(points_to_evaluate=configs),
                        trial_name_creator=tune_config.trial_name_creator,
                        trial_dirname_creator=tune_config.trial_name_creator,
                    )
                ),
                run_config=dataclasses.replace(run_config, name=records.oom_round_name(run_config.name, share)),
            ).fit()
        )
    if configs := oom_trials(rounds[-1]):
        print(
            f"{len(configs)} trial(s) ran out of memory on a whole GPU: lower the batch size or use "
            "--gpus-per-trial 2 (data-parallel)",
            file=sys.stderr,
        )
    return rounds
