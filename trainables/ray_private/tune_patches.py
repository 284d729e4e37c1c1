"""Ray Tune's behaviour, patched where it loses a trial's rows or failures, or slows every start (Ray 2.54-2.60;
part of `trainables.ray_private`, which re-exports each function here: every use of Ray's private API stays in
that package)."""

from __future__ import annotations

import collections
import functools


def count_each_actor_death_once() -> bool:
    """Make Tune charge a trial one failure per death of its actor, whenever the actor dies; idempotent.

    Tune 2.54-2.60 counts a death twice when the actor dies while it is being reset for its next
    trial (`reuse_actors=True`: the trial is PENDING, its `reset` task in flight). The actor
    manager passes the one `RayActorError` to the actor's `on_error` (`TuneController._actor_failed`,
    which sets the PENDING trial RUNNING and fails it: re-queued, 1 failure) and then to the reset
    task's `on_error` (`_trial_task_failure` -> `_process_trial_failure`, which finds the trial
    PENDING and ends it as ERROR without asking `Trial.should_recover`: 2 failures). The trial also
    stays in `_resetting_trials`, so a re-queued one would wait for that reset forever
    (`_maybe_reuse_cached_actor` returns at once for it). A trial whose actor dies while starting,
    restoring, running or saving gets one event, and keeps it.

    The patch wraps those two methods: `_actor_failed` forgets the reset of the dead actor's trial
    and, once it has failed the trial, remembers the exception; `_trial_task_failure` then ignores
    that same exception object (the same death) once. Any other failure goes through Tune's code as it is.
    Upstream: no Ray issue found for this (searched 2026-11-24: reuse_actors, reset, RayActorError,
    max_failures, pending); the nearest are ray-project/ray#36951 and #42951 (other bugs of actor reuse,
    the second turning `reuse_actors` off by default).
    Returns:
        True when Tune is patched (now or before); False when this Ray lacks the module or methods (nothing done).
    """
    try:
        from ray.tune.execution.tune_controller import TuneController
    except ImportError:  # a Ray that moved it: Tune's own handling
        return False
    if getattr(TuneController, "_raysweep_one_failure_per_death", False):
        return True
    if not all(hasattr(TuneController, name) for name in ("_actor_failed", "_trial_task_failure")):
        return False
    actor_failed, trial_task_failure = TuneController._actor_failed, TuneController._trial_task_failure

    def _actor_failed(self, tracked_actor, exception):
        trial = self._actor_to_trial.get(tracked_actor)
        handled = False
        if trial is not None and self._trial_to_actor.get(trial) is tracked_actor:
            getattr(self, "_resetting_trials", set()).discard(trial)  # its reset never answers
            handled = trial.status in (trial.PENDING, trial.PAUSED)  # Tune fails the trial here, not in the task
        actor_failed(self, tracked_actor, exception)  # calls _trial_task_failure itself when `handled`
        if handled:
            self._raysweep_death_handled = exception

    def _trial_task_failure(self, trial, exception):
        if exception is getattr(self, "_raysweep_death_handled", None):
            self._raysweep_death_handled = None
            return  # the same death, already counted by _actor_failed
        trial_task_failure(self, trial, exception)

    TuneController._actor_failed, TuneController._trial_task_failure = _actor_failed, _trial_task_failure
    TuneController._raysweep_one_failure_per_death = True
    return True


def history_keeping_loggers(joins_key: str) -> list:
    """Tune's JSON and CSV loggers (`result.json`, `progress.csv`), made to keep every row a trial logged.

    Tune 2.54-2.60 writes both files in the driver's staging folder and copies that folder to storage
    every few seconds. When a trial starts again with a checkpoint (PBT's exploit, a retry), each
    logger first copies the *storage* copy of its file over the staging one (`_restore_from_remote`,
    from `JsonLoggerCallback.log_trial_start` / `CSVLoggerCallback._setup_trial`; added by
    ray-project/ray#38598 for `Tuner.restore` in a new session) and appends to it: every row
    logged since the last copy is lost, and the next copy overwrites storage's with the shorter file.
    Tune's JSON logger does this at every start, its CSV logger only after the trial ended (a retry),
    so a PBT member's `result.json` lost rows its `progress.csv` kept (raysweep issue 45).

    Here the copy is made only when the staging file does not exist (a new driver session: a
    resume), since within one session the staging file holds every row the storage one does.
    The other way round, the JSON logger copies a restarted trial's staging `result.json` to storage when the
    trial starts again in this session (a retry, PBT's exploit), before Tune runs the trial: the trial reads its
    history there to tell the rows logged before from those it must report again
    (`trainables/command/step_reporter.py:StepReporter.after_restart`), and a storage copy a few seconds old
    lacked rows, which were then logged twice (a CI run, 2026-11-30: a retried command trial's epoch 1). A copy
    that fails (OSError) is a warning: the trial then reads the older copy, as before.
    Passed in `RunConfig.callbacks`, they stand in for Tune's (which adds its own only when none
    is there). Upstream: no Ray issue found for this (searched 2026-11-27: result.json,
    progress.csv, PBT, restore, rows lost).

    The CSV logger also writes a command trial's result that joins a final block to the step before
    it (marked `joins_key`: `records.JOINS_STEP_METRIC`, `trainables/command/step_reporter.py:StepReporter`) in
    place of that step's row, so that progress.csv holds one row per epoch (result.json keeps both; the
    tables keep the joined one).

    Returns:
        [JsonLoggerCallback, CSVLoggerCallback] instances (subclasses, so Tune sees them as its own).
    """
    json_logger, csv_logger = _history_keeping_classes()
    return [json_logger(), csv_logger(joins_key)]


@functools.cache
def _history_keeping_classes() -> tuple[type, type]:
    from pathlib import Path

    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    class KeepStagedRows:
        def _restore_from_remote(self, file_name: str, trial) -> None:
            if Path(trial.local_path, file_name).exists():
                return  # this session's file: every row the storage copy has, and those logged since
            super()._restore_from_remote(file_name, trial)

    class OneRowPerStep(KeepStagedRows, CSVLoggerCallback):
        def __init__(self, joins_key: str):
            super().__init__()
            self.joins_key = joins_key

        def log_trial_result(self, iteration: int, trial, result: dict) -> None:
            starts = self.__dict__.setdefault("_row_starts", {})  # trial -> where its last row starts
            file = self._trial_files.get(trial)
            if file is not None and result.get(self.joins_key) and trial in starts:
                file.flush()
                file.truncate(starts[trial])  # the step's row, written again joined below
                file.seek(starts[trial])
            start = file.tell() if file is not None else None
            super().log_trial_result(iteration, trial, result)
            if start is None:  # the file was opened (and its header maybe written) for this row: find it
                self._trial_files[trial].flush()
                data = Path(trial.local_path, "progress.csv").read_bytes()
                start = data.rstrip(b"\n").rfind(b"\n") + 1
            starts[trial] = start

    class StorageCopyOnRestart(KeepStagedRows, JsonLoggerCallback):
        def log_trial_start(self, trial) -> None:
            staged = Path(trial.local_path, "result.json")
            restarted = staged.exists()  # a start in this session logged rows before (or opened the file)
            super().log_trial_start(trial)
            if restarted:
                copy_to_trial_storage(trial, staged)

    json_logger = type("HistoryKeepingJsonLogger", (StorageCopyOnRestart,), {"__module__": __name__})
    csv_logger = type("HistoryKeepingCSVLogger", (OneRowPerStep,), {"__module__": __name__})
    return json_logger, csv_logger


def copy_to_trial_storage(trial, staged) -> None:
    """Copy the driver's staged file `staged` (a `pathlib.Path` in `trial.local_path`) to the same name in the
    trial's storage folder (`Trial.storage`: any pyarrow file system; written whole: `upload_files_whole`).
    An OSError (a full disk, storage out of reach) is logged as a warning, not raised: Tune's own periodic
    copy follows."""
    import logging
    import posixpath

    from ray.train._internal.storage import _upload_to_fs_path

    destination = posixpath.join(trial.storage.trial_fs_path, staged.name)
    try:
        _upload_to_fs_path(local_path=str(staged), fs=trial.storage.storage_filesystem, fs_path=destination)
    except OSError as error:
        logging.getLogger(__name__).warning("could not copy %s to %s: %s", staged, destination, error)


def upload_files_whole(copy_whole) -> bool:
    """Tune's copies to a local storage folder (its state, each trial's history) go through `copy_whole(copy_files,
    source, destination, ...)` (`trainables.experiment.storage.copy_whole`, passed in: storage imports this module)
    which writes each file whole (`pyarrow.fs.copy_files` rewrites in place: a full disk left a result.json at
    0 bytes). True."""
    from ray.train._internal import storage as ray_storage

    if not isinstance(ray_storage._pyarrow_fs_copy_files, functools.partial):
        ray_storage._pyarrow_fs_copy_files = functools.partial(copy_whole, ray_storage._pyarrow_fs_copy_files)
    return True


def count_callbacks_by_name() -> bool:
    """Tune's usage record of a run's callbacks imports no tracker: `tune.run` calls
    `ray.air._internal.usage.tag_callbacks` whenever callbacks are given (every sweep's `RunConfig` has some),
    and its `_count_callbacks` imports Ray's W&B, MLflow, Comet and Aim integrations to read four class names;
    with wandb and mlflow installed (the `trackers` extra) that is 2 s and more before the first trial on a
    quiet 2-core machine. Ray compares class names, not classes, so counting by the same names records the
    same tag. Returns True when Tune counts by name (now or before); False when this Ray lacks the function."""
    try:
        from ray.air._internal import usage
    except ImportError:
        return False
    if not hasattr(usage, "_count_callbacks"):
        return False
    if getattr(usage._count_callbacks, "by_name", False):
        return True

    def count_by_name(callbacks):
        from ray.tune import Callback
        from ray.tune.logger import LoggerCallback
        from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES

        integrations = ("WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback")
        built_in = {*integrations, *(c.__name__ for c in DEFAULT_CALLBACK_CLASSES)}
        counts = collections.defaultdict(int)
        for callback in callbacks or []:
            if not isinstance(callback, Callback):  # Tune refuses it later; not counted, as in Ray
                continue
            name = type(callback).__name__
            if name in built_in:
                counts[name] += 1
            elif isinstance(callback, LoggerCallback):
                counts["CustomLoggerCallback"] += 1
            else:
                counts["CustomCallback"] += 1
        return counts

    count_by_name.by_name = True
    usage._count_callbacks = count_by_name
    return True
