"""Ray start-up for a sweep: a local Ray with a safe dashboard, or a connection to a cluster,
and the checks that need the running cluster (can any node ever hold one trial?).

Connecting to `--address HOST:PORT` is checked before `ray.init` so that a mistake is one line
within seconds: nothing answering at the address, or a cluster that refuses this driver's
authentication token (`connect_checks`). Left to Ray, both cost 20 s to minutes of retry lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time

import ray

from sweeps.engine.cluster import job_env
from sweeps.engine.flags import UsageError, check_dashboard_host
from sweeps.engine.run_flags import GPU_SHARE
from trainables import ray_private

CONNECT_TIMEOUT_S = 5.0  # the TCP probe of HOST:PORT, and again the GCS handshake: <= 10 s in all
TOKEN_HELP = (
    "every node and every driver needs the same token: copy the head's token (`ray get-auth-token` there) "
    "into ~/.ray/auth_token here or set RAY_AUTH_TOKEN, and set RAY_AUTH_MODE=token "
    "(docs.ray.io/en/latest/ray-security/token-auth.html)"
)


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
    print(
        f"warning: the Ray dashboard will listen on {host}: anyone who can reach its port can run code on "
        f"this cluster through the Jobs API (CVE-2023-48022). Prefer 127.0.0.1 and an SSH tunnel.",
        file=sys.stderr,
    )
    try:
        AUTH_MODE_ENV_VAR = ray_private.auth_mode_env_var()
    except ImportError:
        print("warning: this Ray has no token authentication; firewall the dashboard port", file=sys.stderr)
        return
    mode = os.environ.setdefault(AUTH_MODE_ENV_VAR, "token")
    if mode.lower() == "token":
        print(
            f"token authentication is on ({AUTH_MODE_ENV_VAR}=token): clients need the token in ~/.ray/auth_token "
            f"(`ray get-auth-token`)",
            file=sys.stderr,
        )
    else:
        print(
            f"warning: {AUTH_MODE_ENV_VAR}={mode} was set: the dashboard is open to anyone who can reach it",
            file=sys.stderr,
        )


def init_ray(
    address: str | None,
    dashboard_host: str,
    num_gpus: int | None = None,
    log_to_driver: bool = False,
    runtime_env: dict | None = None,
    carry_env: bool = True,
) -> None:
    """Start a local Ray (dashboard on `dashboard_host`) or join a running cluster; say which, in one line.

    `address` (or, when None, the environment variable RAY_ADDRESS) names a running cluster:
    `auto`, `HOST:PORT` of its head's GCS, or `ray://HOST:PORT` (Ray Client). A `HOST:PORT` is
    checked first by `connect_checks` (token authentication, a probe of the port, the GCS
    handshake). Without an address, a cluster that `ray start --head` runs on this machine is
    joined (Ray's own default for `ray.init()`: several sweeps then share its GPUs); `local`
    always starts a private Ray, whatever runs here and whatever RAY_ADDRESS says. The line is
    `started a local Ray with N CPUs and G GPUs in T s; dashboard: URL` or `joined the running
    cluster at ADDRESS with N CPUs and G GPUs (K nodes); dashboard: URL`. Trials' output is not
    copied to this console unless `log_to_driver`: it goes to each trial's `stdout` / `stderr`
    files (`RunConfig(log_to_file=True)`) and the dashboard's logs. `runtime_env`: the sweep's own
    (a code snapshot's `working_dir`: Ray uploads it once and unpacks it on each node), to which
    `job_env.job_runtime_env` adds, where needed, this shell's environment on a joined cluster (unless
    not `carry_env`: --no-env) and raysweep's packages first in every worker; a Ray this process
    already runs keeps its own.
    Raises:
        UsageError: nothing answers at the address, it is not a Ray head, or it refuses the token; a
            `working_dir` asked for while this process already runs Ray (it cannot take one then).
    """
    started = time.perf_counter()
    address = cluster_to_join(address)
    tune_copies = ray_private.stop_tune_copying_secrets(job_env.SECRET_NAME)  # Tune would log them (Ray's agent)
    if runtime_env:  # the snapshot applied its own excludes: a file the repo's .gitignore names is still code
        os.environ.setdefault("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
    if ray.is_initialized():  # a notebook or test that started Ray itself: its workers have its environment
        if runtime_env:
            raise UsageError("the code snapshot travels as Ray's runtime_env, which a Ray already started cannot take")
        print(
            f"using this process's Ray at {ray.get_runtime_context().gcs_address} with {_capacity()}; "
            f"dashboard: {ray_private.dashboard_url() or 'not running'}",
            flush=True,
        )
        return
    runtime_env = job_env.job_runtime_env(runtime_env, carry_env, address, always=tune_copies)
    if address:
        try:
            context = ray.init(address=address, log_to_driver=log_to_driver, runtime_env=runtime_env)
        except ConnectionError as e:  # after the checks, rare: e.g. the head died in between
            raise UsageError(f"--address={address}: {str(e).splitlines()[0]}") from None
        new_token = None
    else:
        secure_dashboard(dashboard_host)
        new_token = quiet_local_token_auth()
        context = start_local_ray(
            address="local",
            dashboard_host=dashboard_host,
            include_dashboard=True,
            num_gpus=num_gpus,
            log_to_driver=log_to_driver,
            runtime_env=runtime_env,
        )
    _announce(context, address, started, None if address else new_token)


def start_local_ray(**init_kwargs):
    """`ray.init(**init_kwargs)` for a new local Ray, tried a second time when the first start fails
    (a loaded machine: its processes miss Ray's start-up timeouts), after `ray.shutdown()`.

    Raises:
        UsageError: both starts failed; one line with the first line of Ray's error.
    """
    for attempt in (1, 2):
        try:
            with ray_private.ray_processes_in_own_session():  # a TERM to our group spares them
                return ray.init(**init_kwargs)
        except Exception as e:  # any failure of Ray's start-up: RuntimeError, TimeoutError, ConnectionError...
            ray.shutdown()
            if attempt == 2:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise UsageError(f"the local Ray did not start, twice: {type(e).__name__}: {first}") from None
            print(f"the local Ray did not start ({type(e).__name__}); trying once more", flush=True)


def _announce(context, address: str | None, started: float, new_token) -> None:
    """`init_ray`'s line: the cluster joined at `address`, or the local Ray started at `started`
    (`time.perf_counter`), and the token authentication a new local Ray turned on."""
    url = context.dashboard_url
    dashboard = f"dashboard: {'http://' + url if url else 'not running'}"
    if address:
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        print(
            f"joined the running cluster at {ray.get_runtime_context().gcs_address} with {_capacity()} "
            f"({nodes} node{'s' if nodes != 1 else ''}); {dashboard}",
            flush=True,
        )
        return
    print(f"started a local Ray with {_capacity()} in {time.perf_counter() - started:.1f} s; {dashboard}", flush=True)
    if new_token and new_token.exists():
        print(
            f"token authentication is on (Ray's default for a local Ray): a new token was saved to {new_token}",
            flush=True,
        )


def cluster_to_join(address: str | None) -> str | None:
    """The address `init_ray` joins, checked (`connect_checks`): `address`, else RAY_ADDRESS, else the
    cluster `ray start` runs on this machine; None: start a private Ray (`local`, or nothing runs).

    Raises:
        UsageError: the address does not answer, naming the recorded cluster when it came from there.
    """
    private = address == "local"
    found = None if private or address or os.environ.get("RAY_ADDRESS") else running_local_cluster()
    address = None if private else (address or os.environ.get("RAY_ADDRESS") or found)
    if address:
        try:
            connect_checks(address)  # also when Ray already runs here: a named address must answer
        except UsageError as e:
            if not found:
                raise
            raise UsageError(
                f"the cluster `ray start` recorded on this machine ({found}) does not answer: {e}; "
                "`ray stop` clears it, --address local starts a private Ray"
            ) from None
    return address


def quiet_local_token_auth():
    """Before a local `ray.init`: choose token authentication, Ray's own default for a new local
    cluster since 2.59, explicitly, so that Ray does not log its WARNING that it did (Ray is silent
    when RAY_AUTH_MODE is set; docs.ray.io/en/latest/ray-security/token-auth.html). A mode the
    user set is left alone.
    Returns:
        The path of the token file Ray will generate (`~/.ray/auth_token`, its INFO line silenced:
        the caller says it in its own line), or None (a mode was set, a token exists, or this Ray
        has no token authentication).
    """
    try:
        if ray_private.auth_mode_env_var() in os.environ:
            return None
    except ImportError:
        return None
    ray_private.enable_token_auth()  # RAY_AUTH_MODE=token for this process and its children, as Ray would
    path = ray_private.default_token_path()
    if path.exists() or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return None
    logging.getLogger(ray_private.AUTH_LOGGER).setLevel(logging.WARNING)
    return path


def running_local_cluster() -> str | None:
    """The GCS address of the cluster `ray start` last started on this machine (Ray's
    `ray_current_cluster` file, which `ray.init()` without an address joins), or None."""
    try:
        return ray_private.find_bootstrap_address()
    except Exception:  # another Ray version: leave it to ray.init
        return None


def _capacity() -> str:
    """`N CPUs and G GPUs` of the whole cluster (fractions as Ray counts them)."""
    cpus, gpus = (ray.cluster_resources().get(name, 0) for name in ("CPU", "GPU"))
    return f"{cpus:g} CPU{'' if cpus == 1 else 's'} and {gpus:g} GPU{'' if gpus == 1 else 's'}"


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a `HOST:PORT` or `[IPv6]:PORT` address; None for `auto`, `local` and `ray://...`.

    Raises:
        UsageError: neither of those forms, or a port outside 1..65535.
    """
    if address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"--address={address!r} is not HOST:PORT (the head's GCS port, e.g. 10.0.0.5:6379), "
            "'auto' or ray://HOST:PORT"
        )
    return host, int(port)


def use_token_if_available() -> str:
    """Turn on Ray's token authentication for this driver when a token is available and no mode was chosen.

    Ray itself does so only for `address="auto"`, never for an explicit address (ray PR #64755;
    docs.ray.io/en/latest/ray-security/token-auth.html), so a driver naming the head of a token
    cluster would be refused. Ray looks for the token in RAY_AUTH_TOKEN, then the file named by
    RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token; its own loader is asked, so the order is Ray's.
    Returns:
        The mode the driver will use: "token"; "disabled" (set so by RAY_AUTH_MODE); "no token"
        (none found, whatever the mode); "" when this Ray has no token authentication.
    """
    try:
        AUTH_MODE_ENV_VAR = ray_private.auth_mode_env_var()
        loader = ray_private.auth_token_loader()
    except ImportError:
        return ""
    loader.reset_cache()  # the environment may have changed since the last look (tests, notebooks)
    if not loader.has_token(ignore_auth_mode=True):
        return "disabled" if os.environ.get(AUTH_MODE_ENV_VAR, "").lower() == "disabled" else "no token"
    if AUTH_MODE_ENV_VAR in os.environ:
        return os.environ[AUTH_MODE_ENV_VAR].lower()
    ray_private.enable_token_auth()  # RAY_AUTH_MODE=token for this process and its children, as `auto` would
    return "token"


def connect_checks(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Before `ray.init(address=...)`: choose the token mode, probe the port, then try the GCS handshake.

    Each step has its own deadline of `timeout_s` seconds, so a wrong address is reported within
    about 2 * `timeout_s` instead of Ray's retry loop (20 s of retries for a refused token, minutes
    for a closed port). `auto`, `local` and `ray://` addresses are left to Ray.
    Raises:
        UsageError: one line naming the address and what to do.
    """
    where = split_address(address)
    if where is None:
        return
    host, port = where
    mode = use_token_if_available()
    if mode == "no token" and os.environ.get("RAY_AUTH_MODE", "").lower() == "token":  # Ray's C++ client would abort
        raise UsageError(
            f"--address={address}: RAY_AUTH_MODE=token is set but there is no token in RAY_AUTH_TOKEN, "
            f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token; {TOKEN_HELP}"
        )
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise UsageError(
            f"--address={address}: nothing answers at {host}:{port} ({reason}); start the head there "
            f"with `ray start --head --port {port}`, or check the host and the port"
        ) from None
    error = gcs_handshake(f"{host}:{port}", timeout_s)
    if error is None:
        return
    if type(error).__name__ == "AuthenticationError":
        why = {
            "": "this Ray predates token authentication",
            "disabled": "RAY_AUTH_MODE=disabled is set here",
            "no token": "no token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token here",
        }.get(mode, "its token differs from the cluster's")
        raise UsageError(
            f"--address={address}: the Ray cluster refused this driver's authentication ({why}); {TOKEN_HELP}"
        )
    raise UsageError(
        f"--address={address}: {host}:{port} answers but not as a Ray head's GCS port "
        f"({str(error).splitlines()[0] if str(error) else type(error).__name__}); "
        "give the port of `ray start --head --port` (default 6379)"
    )


def gcs_handshake(address: str, timeout_s: float) -> Exception | None:
    """Open a GCS client to `HOST:PORT` as `ray.init` would; the error, or None when it connected.

    Runs in a thread so that a port that answers but is not a GCS (Ray waits 40 s) is given up
    after `timeout_s`; Ray's C++ warnings during the attempt go to /dev/null (our caller prints
    one line instead).
    """
    outcome: dict = {}

    def connect():
        try:
            ray_private.gcs_client(address)
        except Exception as e:  # AuthenticationError, RpcError (timed out) ...
            outcome["error"] = e

    with _stderr_silenced():
        thread = threading.Thread(target=connect, daemon=True)
        thread.start()
        thread.join(timeout_s)
    if thread.is_alive():
        return TimeoutError(f"no GCS handshake within {timeout_s:g} s")
    return outcome.get("error")


@contextlib.contextmanager
def _stderr_silenced():
    """Point file descriptor 2 at /dev/null for the block (C++ logging writes there, not to sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def default_gpus_per_trial() -> float:
    """`run_flags.GPU_SHARE` (0.25: four small trials share a GPU) when the cluster has GPUs, else 0 (CPU)."""
    return GPU_SHARE if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


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


def concurrent_slots(gpus_per_trial: float, cpus_per_trial: float) -> int:
    """Trials the cluster can run at once: GPU slices when trials use GPUs, else CPU cores."""
    resources = ray.cluster_resources()
    if gpus_per_trial > 0:
        return max(1, int(resources.get("GPU", 0) / gpus_per_trial + 1e-9))
    return max(1, int(resources.get("CPU", 1) / cpus_per_trial + 1e-9))
