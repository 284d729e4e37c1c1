"""Every use of Ray's private API (underscore modules, internal attributes), in one place; tested with Ray 2.54-2.60.

Ray keeps no promise about these names between minor versions, so `pyproject.toml` pins
`ray[tune,default]>=2.54,<2.61` (the versions this module was tested with: 2.54 when each use
was written, 2.60.0 installed now). A newer Ray that moves one of them breaks only this file;
`tests/test_ray_private.py` keeps every other file off Ray's private modules. Each accessor
imports when called (ImportError when this Ray lacks it), so importing this module costs nothing
and callers keep their own fallback. It lives in `trainables/`, the bottom layer, so that
`trainables`, `analysis`, `sweeps` and `benchmarks` can all import it.
"""

from __future__ import annotations

AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"  # the logger of Ray's token set-up


# --- cluster start-up and authentication (sweeps/engine/cluster.py) ------------------------


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


# --- Tune's trial bookkeeping (sweeps/engine/checkpoint_repair.py, no_retry.py) -------------


def trial_folder_path(trial) -> str:
    """The trial's folder on its storage filesystem (`Trial.storage.trial_fs_path`)."""
    return trial.storage.trial_fs_path


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
