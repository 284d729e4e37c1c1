"""Ray start-up for a sweep: a local Ray with a safe dashboard, or a connection to a cluster,
and the checks that need the running cluster (can any node ever hold one trial?).
"""

from __future__ import annotations

import os
import sys
import time

import ray

from sweeps.cli import UsageError, check_dashboard_host


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



def concurrent_slots(gpus_per_trial: float, cpus_per_trial: float) -> int:
    """Trials the cluster can run at once: GPU slices when trials use GPUs, else CPU cores."""
    resources = ray.cluster_resources()
    if gpus_per_trial > 0:
        return max(1, int(resources.get("GPU", 0) / gpus_per_trial + 1e-9))
    return max(1, int(resources.get("CPU", 1) / cpus_per_trial + 1e-9))
