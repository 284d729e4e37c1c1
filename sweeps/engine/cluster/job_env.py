"""The sweep's Ray job environment: the launching shell's variables, and raysweep's own packages first.

Why: a trial runs in a Ray worker, and on a cluster that `ray start` began (hours earlier, or as
another user) that worker has the environment of `ray start`, not of the shell that launched the
sweep. A variable the user exported (`DATA_DIR`, `HF_HOME`, `WANDB_API_KEY`, `CUDA_HOME`) would be
missing, or someone else's used, and even `PATH`, so which `python` runs the command could change.
So a sweep that joins a cluster passes the shell's variables (`carried_env`) as its `ray.init`'s
`runtime_env` `env_vars` (docs.ray.io/en/latest/ray-core/handling-dependencies.html); a private
Ray's workers are this process's children and have them already. `--no-env` leaves them out, for
clusters whose nodes differ. A variable whose name says it holds a secret (`SECRET_NAME`:
AWS_SECRET_ACCESS_KEY, WANDB_API_KEY, HF_TOKEN, ..._PASSWORD) never goes into `env_vars`: Ray's runtime
env agent logs every runtime env it creates, values included ("Creating runtime env: ..." in
runtime_env_agent.log, a file anyone on the node may read). Those reach the workers through the job's
`worker_process_setup_hook` instead (`worker_setup_hook`): a function Ray pickles into its GCS store and
runs in each worker before any task, which sets them in the worker's environment (and so the command's).

Second, Ray puts the driver's current folder first on every worker's `sys.path` (the job's
`py_driver_sys_path`), so a user's repository with its own `analysis/`, `sweeps/` or `trainables/`
package would shadow ours in the workers. Where one does (`shadowing`), the job's
`worker_process_setup_hook` (`packages_first_hook`) puts a finder first on each worker's
`sys.meta_path` that resolves those three names in raysweep's own folder (`our_packages_first`); the
`raysweep` command installs the same finder in the driver. And since the trials get this shell's
PATH, `command_text` names the program a command sweep's command resolves to, in its launch line.
Nothing here imports Ray.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

PACKAGES = ("sweeps", "trainables", "analysis")  # raysweep's import names
ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding them: a checkout or site-packages

# Not carried (by name or prefix), each with why:
NOT_CARRIED = {
    "HOSTNAME": "identifies the launching machine",
    "HOST": "identifies the launching machine",
    "PWD": "the shell's own folder: each trial runs in its own",
    "OLDPWD": "the shell's own bookkeeping",
    "SHLVL": "the shell's own bookkeeping",
    "_": "the shell's own bookkeeping",
}
NOT_CARRIED_PREFIXES = {
    "RAY_": "Ray's own settings: the cluster's, set where each node started",
    "TUNE_": "Tune's switches, read by the driver, and what it sets per trial (TUNE_ORIG_WORKING_DIR)",
    "RAYSWEEP_": "raysweep sets them per trial (the trial's config, folder, metrics file)",
    "SLURM_": "the launching job step's identity; each node's Ray has its own",
    "PMI_": "the launching MPI/PMI step's identity",
    "PMIX_": "the launching MPI/PMI step's identity",
    "BASH_FUNC_": "the shell's exported functions",
}
# What Ray sets per trial: the accelerators it assigned (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
# NEURON_RT_VISIBLE_CORES, TPU_VISIBLE_CHIPS, HABANA_VISIBLE_MODULES, ...).
RAY_SETS_PER_TRIAL = re.compile(r"^[A-Z0-9_]*_VISIBLE_(DEVICES|CORES|CHIPS|MODULES)$")
# raysweep points these at each trial's folder where they are unset (trainables/command/process.py:tracker_env),
# so that each trial's tracker records stay in it.
TRIAL_FOLDERS = ("WANDB_DIR", "MLFLOW_TRACKING_URI")
# carried despite their prefix: the tests' switches a trial reads (trainables/command/startup.py: FAULT_ENV, LIMIT_ENV)
TEST_SWITCHES = ("RAYSWEEP_FAULT_INJECT", "RAYSWEEP_STARTUP_LIMIT_S")
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set in a driver that `ray job submit` started
RAY_EXPANDS = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)  # what os.path.expandvars replaces (posixpath._varprog)
# a name that says its value is a secret: carried through the setup hook, never Ray's logged `env_vars`
SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH|_KEY$|^KEY$|_PASS$",
    re.IGNORECASE,
)


@dataclasses.dataclass(frozen=True)
class CarriedEnv:
    """The launching shell's variables that reach every trial (`env_vars`: {name: value}, sorted by
    name; `secrets`: those of them whose name says they are secret, `SECRET_NAME`, which Ray must not
    log) and the names left out because Ray would rewrite their values (`rewritten`, see `carried_env`)."""

    env_vars: dict[str, str]
    rewritten: list[str]
    secrets: dict[str, str] = dataclasses.field(default_factory=dict)


def carried_env(environ: Mapping[str, str]) -> CarriedEnv:
    """The variables of `environ` (the launching shell's, `os.environ`) that reach every trial.

    Carried: everything the user set, `PATH` included (the command's `python` is the one the shell
    finds), values as they are (secrets included: they reach the trials through Ray's job config,
    never the experiment's records or Ray's logs: `secrets` holds those whose name says so, `SECRET_NAME`,
    which the setup hook sets as written, `$` included). Not carried: `NOT_CARRIED` and `NOT_CARRIED_PREFIXES` (machine
    and shell identity, Ray's, Tune's and raysweep's own but the tests' `TEST_SWITCHES`), what Ray sets per trial
    (`RAY_SETS_PER_TRIAL`), the tracker folders raysweep sets per trial (`TRIAL_FOLDERS`), the
    variables of a `ray job submit` job's own `runtime_env` (Ray refuses a second value for them),
    and a value holding `$NAME` or `${NAME}`: Ray expands those in `env_vars` with the node's
    variables (`os.path.expandvars` in ray._private.utils.update_envs), so it would not arrive as written.
    """
    submitted = _submitted_job_env_vars(environ)
    wanted = {
        name: value
        for name, value in sorted(environ.items())
        if name not in NOT_CARRIED
        and (name in TEST_SWITCHES or not name.startswith(tuple(NOT_CARRIED_PREFIXES)))
        and not RAY_SETS_PER_TRIAL.match(name)
        and name not in TRIAL_FOLDERS
        and name not in submitted
    }
    secrets = {name: value for name, value in wanted.items() if SECRET_NAME.search(name)}
    rewritten = [name for name, value in wanted.items() if RAY_EXPANDS.search(value) and name not in secrets]
    plain = {k: v for k, v in wanted.items() if k not in rewritten and k not in secrets}
    return CarriedEnv(plain, rewritten, secrets)


def _submitted_job_env_vars(environ: Mapping[str, str]) -> set[str]:
    """Names in the `env_vars` of the job `ray job submit` started this driver as (none otherwise).

    Ray merges those with the driver's `ray.init(runtime_env=...)` and refuses a name set in both
    (ray/_private/worker.py, "Failed to merge the Job's runtime env")."""
    try:
        job = json.loads(environ.get(JOB_CONFIG_ENV) or "{}")
        return set(((job.get("runtime_env") or {}).get("env_vars") or {}))
    except (ValueError, AttributeError):
        return set()


def job_runtime_env(
    runtime_env: dict | None,
    carry_env: bool,
    address: str | None,
    environ: Mapping[str, str] = os.environ,
    driver_folders: list[str] | None = None,
    always: tuple[str, ...] | list[str] = (),
) -> dict | None:
    """The sweep's `ray.init(runtime_env=...)`: `runtime_env` (a code snapshot's `working_dir`, or None)
    plus what this job needs, only where it needs it: a job with a `runtime_env` gets no prestarted
    workers, so its first trials start later (about 5 s on 2 busy cores, docs/performance.md).

    - `env_vars` (`carried_env(environ)`, its secrets left out) when joining a cluster at `address`, unless
      `carry_env` is False (--no-env); a private Ray's workers are this process's children and inherit its
      whole environment anyway. Joining, the variables Ray would rewrite are named on stderr.
    - the `worker_process_setup_hook` (`worker_setup_hook`) that sets the carried secrets in every worker,
      and puts raysweep's packages first in every worker when one of the folders Ray puts first on the
      workers' `sys.path` (`driver_folders`, default `ray_driver_folders()`) holds a package or module
      named like ours; not through Ray Client (`ray://`), whose driver runs on the head, in the client
      server's folder. Joining, the `always` names set in `environ` (those Tune itself would copy into each
      trial's env_vars, `ray_private.stop_tune_copying_secrets`: AWS credentials) go through the hook even
      with --no-env; a private Ray's workers inherit them.
    Returns:
        The runtime_env, or None when the job needs none.
    """
    job = dict(runtime_env or {})
    secrets = {name: environ[name] for name in always if name in environ} if address else {}
    if carry_env and address:
        carried = carried_env(environ)
        job["env_vars"] = carried.env_vars
        secrets |= carried.secrets
        if carried.rewritten:
            print(
                f"warning: not carried to the trials: {', '.join(carried.rewritten)} (a value holding $NAME or "
                "${NAME}, which Ray's runtime_env would expand; export it before `ray start`, or pass it in "
                "the command)",
                file=sys.stderr,
            )
    ours_first = not (address and "://" in address) and shadowing(
        ray_driver_folders() if driver_folders is None else driver_folders
    )
    if ours_first or secrets:
        job["worker_process_setup_hook"] = worker_setup_hook(ROOT if ours_first else None, secrets)
    return job or None


def worker_setup_hook(packages_root: str | None, secrets: Mapping[str, str]):
    """Ray's `worker_process_setup_hook` for this job: a function of no arguments, run in each worker before
    it imports any task, that sets `secrets` ({name: value}) in the worker's environment and, with
    `packages_root`, installs `our_packages_first`'s finder for that folder. Ray pickles it (by value: a
    closure) into its GCS store under a key, which is all its runtime env, and so its logs, hold."""
    install = packages_first_hook(packages_root) if packages_root else None
    values = dict(secrets)

    def setup() -> None:
        import os

        os.environ.update(values)
        if install is not None:
            install()

    return setup


def ray_driver_folders() -> list[str]:
    """The folders Ray puts first on every worker's `sys.path` for this driver (`py_driver_sys_path`,
    ray/_private/worker.py `connect`): the current folder, and the script's when it is on `sys.path`."""
    script = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    return [os.path.abspath(os.curdir)] + ([script] if script in sys.path else [])


def shadowing(folders: list[str]) -> list[str]:
    """The `folders` (other than raysweep's own) holding a package or module named like one of ours
    (`analysis/`, `sweeps.py`, ...), which would shadow ours when first on `sys.path`."""
    return [
        folder
        for folder in folders
        if os.path.realpath(folder) != os.path.realpath(ROOT)
        and any(os.path.exists(os.path.join(folder, name + end)) for name in PACKAGES for end in ("", ".py"))
    ]


def command_text(template: list[str]) -> str:
    """The command as typed, and the program its name resolves to on this shell's PATH, which the trials
    get: `python train.py --lr '{lr}' (python = /repo/.venv/bin/python)`; a program given by its path, or
    chosen per trial by a placeholder, as it is. Said in a command sweep's launch line."""
    program = template[0] if template and os.sep not in template[0] and "{" not in template[0] else None
    resolved = shutil.which(program) if program else None
    return shlex.join(template) + (f" ({program} = {resolved})" if resolved else "")


def our_packages_first(root: str = ROOT) -> None:
    """Make `import sweeps`, `trainables` and `analysis` (and their submodules) load from `root`,
    whatever folder comes first on `sys.path`: a finder first on `sys.meta_path` (PEP 451) that
    looks those three names up in `root` only. Installed once per process."""
    packages_first_hook(root)()


def packages_first_hook(root: str, packages: tuple[str, ...] = PACKAGES):
    """A function of no arguments that installs `our_packages_first`'s finder: Ray's
    `worker_process_setup_hook`, run in each worker before it imports any task.

    Defined inside this function so that Ray pickles it by value: the worker unpickles it without
    importing a module of ours (which is what it must not import from the wrong folder)."""

    def install() -> None:
        import importlib.machinery
        import sys

        class RaysweepPackages:
            """Resolves raysweep's top-level package names in raysweep's own folder."""

            wanted, folder = packages, root

            @classmethod
            def find_spec(cls, name, path=None, target=None):
                if name not in cls.wanted:
                    return None
                return importlib.machinery.PathFinder.find_spec(name, [cls.folder])

        if not any(getattr(f, "__name__", "") == "RaysweepPackages" for f in sys.meta_path):
            sys.meta_path.insert(0, RaysweepPackages)

    return install
