"""Every use of Ray's private API (underscore modules, internal attributes), in one package; tested with Ray 2.54-2.60.

Ray keeps no promise about these names between minor versions, so `pyproject.toml` pins
`ray[tune,default]>=2.54,<2.61` (the versions this package was tested with: 2.54 when each use
was written, 2.60.0 installed now). A newer Ray that moves one of them breaks only this package
(accessors here, Tune's patched behaviour in `tune_patches.py`, re-exported here);
`tests/unit/test_ray_private.py` keeps every other file off Ray's private modules. Each accessor
imports when called (ImportError when this Ray lacks it), so importing this package costs nothing
and callers keep their own fallback. It lives in `trainables/`, the bottom layer, so that
`trainables`, `analysis`, `sweeps` and `benchmarks` can all import it.
"""

from __future__ import annotations

import contextlib

from trainables.ray_private.tune_patches import (  # noqa: F401 (re-exported: callers name `ray_private.<function>`)
    count_callbacks_by_name,
    count_each_actor_death_once,
    history_keeping_loggers,
    upload_files_whole,
)

AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"  # the logger of Ray's token set-up


# --- cluster start-up and authentication (sweeps/engine/cluster/ray_start.py) ------------------------


def auth_mode_env_var() -> str:
    """The name of Ray's auth-mode variable (`RAY_AUTH_MODE`).

    Raises:
        ImportError: this Ray has no token authentication.
    """
    from ray._private.authentication.authentication_token_setup import AUTH_MODE_ENV_VAR

    return AUTH_MODE_ENV_VAR


def enable_token_auth() -> None:
    """Set RAY_AUTH_MODE=token for this process and its children, as Ray's `auto` mode would. Raises ImportError."""
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    _enable_token_auth()


def default_token_path():
    """The `Path` of the token file Ray reads and generates (`~/.ray/auth_token`). Raises ImportError."""
    from ray._private.authentication.authentication_token_setup import _get_default_token_path

    return _get_default_token_path()


def auth_token_loader():
    """Ray's `AuthenticationTokenLoader` singleton (`has_token`, `reset_cache`). Raises ImportError."""
    from ray._raylet import AuthenticationTokenLoader

    return AuthenticationTokenLoader.instance()


def reset_auth_config() -> None:
    """Forget the cached token and re-read the auth mode from the environment (tests, notebooks)."""
    from ray._raylet import Config

    auth_token_loader().reset_cache()
    Config.initialize("")


def gcs_client(address: str):
    """Connect Ray's `GcsClient` to `address` (host:port); raises what Ray raises on failure."""
    from ray._raylet import GcsClient

    return GcsClient(address=address)


def find_bootstrap_address() -> str | None:
    """The GCS address in Ray's `ray_current_cluster` file (the cluster `ray start` last started here)."""
    from ray._private.services import find_bootstrap_address as find

    return find(None)


def dashboard_url() -> str | None:
    """The dashboard URL of the Ray this process is connected to (None: no dashboard)."""
    import ray

    return ray._private.worker.get_dashboard_url()


def stop_log_monitor() -> None:
    """Stop the log monitor of the Ray this process started with `ray.init` (no-op when already stopped): it
    copies workers' output to drivers started with `log_to_driver`, tailing every worker's log files ten times a
    second. `ray.init` has no `include_log_monitor` (`ray start --include-log-monitor=false` has); the test
    suite's in-process Ray (tests/conftest.py's `ray_gpus`, log_to_driver=False) stops it."""
    import ray

    ray._private.worker._global_node.kill_log_monitor(check_alive=False)


# --- inside a trial (trainables/) ----------------------------------------------------------


def proctitle_functions():
    """(setproctitle, getproctitle) of Ray's vendored copy. Raises ImportError."""
    from ray._raylet import getproctitle, setproctitle

    return setproctitle, getproctitle


def train_session():
    """The running trial's Ray Train session (`.storage`, `.stop_event`), or None outside a trial.

    Raises:
        ImportError, AttributeError: this Ray keeps its session elsewhere.
    """
    from ray.train._internal.session import get_session

    return get_session()


def wait_in_trial_stop(wait, timeout_s: float) -> None:
    """Make Tune's stop of the running trial call `wait(timeout_s)` once it has woken the trial's thread.

    Tune stops a function trial by `FunctionTrainable.cleanup` → `_TrainSession.finish(timeout=0)` on the actor's
    main thread: it sets the stop event, releases the thread blocked in `tune.report` (which then raises
    SystemExit) and returns at once; Tune then removes the trial's placement group, which kills the worker, its
    daemon training thread with it, typically 0.01-0.2 s later (measured, Ray 2.60; atexit hooks do not run
    then). A trial that still has rows to write once stopped (`StepReporter.report_new`) holds the stop here for
    at most `timeout_s` seconds: this session's `finish` is replaced by one that calls Ray's own, then `wait`
    (e.g. `threading.Event.wait`; whatever it returns is ignored). Installing it again (a reused actor's next
    trial) replaces the previous wait. Outside a trial: nothing.

    Raises:
        ImportError, AttributeError: this Ray keeps its session elsewhere, or its `finish` is gone.
    """
    session = train_session()
    if session is None:
        return
    finish = type(session).finish.__get__(session)  # Ray's own, not a wait installed for an earlier trial

    def finish_then_wait(*args, **kwargs):
        try:
            return finish(*args, **kwargs)
        finally:
            wait(timeout_s)

    session.finish = finish_then_wait


# --- Tune's trial bookkeeping and start-up (sweeps/engine/run/checkpoint_repair.py, no_retry.py, launch.py,
# monitoring.py) ---


def trial_folder_path(trial) -> str:
    """The trial's folder on its storage filesystem (`Trial.storage.trial_fs_path`)."""
    return trial.storage.trial_fs_path


def local_trial_folder(trial) -> str | None:
    """The trial's folder when its storage is a local (or mounted) file system, else None (object storage)."""
    import pyarrow.fs

    local = isinstance(trial.storage.storage_filesystem, pyarrow.fs.LocalFileSystem)
    return trial.storage.trial_fs_path if local else None


def trial_folder_uri(trial) -> str:
    """The trial's folder as `trainables.experiment.storage` names it: a local path, or `s3://bucket/...`."""
    return storage_context_uri(trial.storage)


def storage_context_uri(context) -> str:
    """The trial folder of a Ray Train `StorageContext` (a driver's `Trial.storage`, or a running trial's
    `train_session().storage`) as `trainables.experiment.storage` names it: a local path, or `s3://bucket/...`."""
    kind = context.storage_filesystem.type_name
    return context.trial_fs_path if kind == "local" else f"{kind}://{context.trial_fs_path}"


def staged_trial_folder(trial, name: str) -> str | None:
    """The driver's staging folder of trial folder `name` in `trial`'s experiment
    (`StorageContext.experiment_driver_staging_path/<name>`, on the driver's disk; it holds the files the driver
    writes, `result.json` among them, before Tune copies them to storage). Tune names a new trial's folder
    `<name>_<4 hex digits>` when that path exists (`ray.tune.experiment.trial._create_unique_logdir_name`), as it
    does for a driver resumed in the same Ray session as the one killed. None when this trial has no storage."""
    staging = getattr(getattr(trial, "storage", None), "experiment_driver_staging_path", None)
    return f"{staging}/{name}" if staging else None


def keep_trial_folder_name(trial, name: str) -> None:
    """Give a new `trial` the folder `name` as it is, from its `trial_dirname_creator`: `Trial.init_local_path`
    names it itself only while `relative_logdir` is unset, and then adds `_<4 hex digits>` when the driver's
    staging folder of `name` exists (`staged_trial_folder`)."""
    trial.relative_logdir = name
    trial.storage.trial_dir_name = name


def replace_checkpoints(trial, checkpoints: list, last_index: int | None) -> None:
    """Rebuild `trial`'s checkpoint bookkeeping from `checkpoints`, [(tune.Checkpoint, its metrics)]
    oldest first, so Tune keeps and deletes them by the trial's `CheckpointConfig` as it would
    have; with `last_index`, the next checkpoint the trial saves is `checkpoint_<last_index + 1>`."""
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    manager = _CheckpointManager(trial.run_metadata.checkpoint_manager.checkpoint_config)
    for checkpoint, metrics in checkpoints:
        manager.register_checkpoint(_TrainingResult(checkpoint=checkpoint, metrics=metrics))
    trial.run_metadata.checkpoint_manager = manager
    trial.invalidate_json_state()
    if last_index is not None:
        trial.storage.current_checkpoint_index = last_index


def tune_env_copies() -> set:
    """The names of the driver's variables Tune copies into every trial actor's `runtime_env` `env_vars`
    (`ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE`, the set itself: AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, ...). Raises ImportError, AttributeError."""
    from ray.tune.execution import class_cache

    return class_cache.ENV_VARS_TO_PROPAGATE


_KEPT_FROM_TUNE: set[str] = set()  # the names `stop_tune_copying_secrets` took off Tune's list


def stop_tune_copying_secrets(secret_name) -> list[str]:
    """Keep Tune from copying the driver's credentials into every trial actor's `runtime_env` `env_vars`
    (`tune_env_copies`), which Ray's runtime env agent logs in plain text ("Creating runtime env: ..." in
    runtime_env_agent.log). Idempotent.

    Args:
        secret_name: a compiled pattern; the names it finds (`.search`) are no longer copied.
    Returns:
        The names no longer copied, sorted ([] when this Ray has no such list): the caller carries them another way.
    """
    try:
        copies = tune_env_copies()
    except (ImportError, AttributeError):
        return []
    secret = {name for name in copies if secret_name.search(name)}
    copies.difference_update(secret)
    _KEPT_FROM_TUNE.update(secret)
    return sorted(_KEPT_FROM_TUNE)


def stop_retries(trial) -> None:
    """Make Tune end `trial` as ERROR at its next error instead of retrying it: `Trial.should_recover`
    is `num_failures <= max_failures`, and the next error raises `num_failures` above this."""
    trial.max_failures = trial.num_failures


# --- benchmarks: synthetic experiments and instrumentation ----------------------------------


def storage_context_class():
    """Ray Train's `StorageContext` (where a trial's files go; `persist_current_checkpoint`)."""
    from ray.train._internal.storage import StorageContext

    return StorageContext


def placement_group_factory_class():
    """Tune's `PlacementGroupFactory` (a trial's resources, as stored in its experiment state)."""
    from ray.tune.execution.placement_groups import PlacementGroupFactory

    return PlacementGroupFactory


# --- a local Ray in its own session (sweeps/engine/cluster/ray_start.py) --------------------------


@contextlib.contextmanager
def ray_processes_in_own_session():
    """While open, the processes `ray.init` starts (GCS, raylet, dashboard...) begin a session of their
    own (`setsid`), so a SIGTERM to the driver's process group (SLURM, `timeout`) leaves them up until
    the driver has written its ending and calls `ray.shutdown()`. Linux's parent-death signal that Ray
    sets still ends them with the driver. Replaces `ray._private.services.ConsolePopen` meanwhile."""
    import sys

    from ray._private import services

    original = services.ConsolePopen
    if sys.platform == "win32":
        yield
        return

    class OwnSessionPopen(original):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnSessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = original
