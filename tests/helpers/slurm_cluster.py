"""A one-node SLURM on this machine for tests: Debian's `munged`, `slurmctld` and `slurmd` on loopback.

The configuration is written under the test's folder; the daemons' sockets, state and spool live in a
short folder of their own (the munge socket's path must stay short, and the `munge` user must reach
it), removed at the end. Known to work with `slurm-wlm` 22.05: `ProctrackType=proctrack/linuxproc`
(no cgroups needed), `TaskPlugin=task/none`, `JobAcctGatherType=jobacct_gather/none`,
`select/cons_tres`, its own ports, and `munged` run as the `munge` user. Everything started here is
stopped by its pid, never by name; `.ci/run` installs the packages in CI.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.helpers.processes import wait_for
from tests.helpers.ray_cluster import free_port

NODE = "raysweep-node"
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "srun")
SBIN = "/usr/sbin:/sbin"  # where Debian puts the daemons (not on every user's PATH)
INSTALL = "apt-get install slurm-wlm munge (as .ci/run does in CI)"


def program(name: str) -> str | None:
    """The path of a SLURM or munge program, on PATH or in /usr/sbin."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


def missing_reason() -> str | None:
    """Why a one-node SLURM cannot run here, in one line; None when it can."""
    if os.geteuid() != 0:
        return f"a one-node SLURM needs root (slurmd runs jobs as their user; munged as munge); {INSTALL}"
    missing = [name for name in PROGRAMS if program(name) is None]
    if missing:
        return f"SLURM is not installed here ({', '.join(missing)} missing): {INSTALL}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no munge user (the munge package creates it): {INSTALL}"
    return None


def slurm_conf(run_dir: Path, logs: Path, cpus: int) -> str:
    """slurm.conf of one node with `cpus` CPUs on 127.0.0.1, its own ports, state and spool under `run_dir`."""
    return "\n".join(
        [
            "ClusterName=raysweep-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={run_dir / 'munge' / 'socket'}",
            f"StateSaveLocation={run_dir / 'state'}",
            f"SlurmdSpoolDir={run_dir / 'spool'}",
            f"SlurmctldPidFile={run_dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={run_dir / 'slurmd.pid'}",
            f"SlurmctldLogFile={logs / 'slurmctld.log'}",
            f"SlurmdLogFile={logs / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=5",  # seconds between a finished job's SIGTERM to its steps and SIGKILL (default 30)
            # seconds a finished job's record is kept (default 300): `sbatch --wait` polls every 2 s while
            # MinJobAge / 2 <= 2, else backs off to 8 s and 32 s (slurm's src/sbatch/sbatch.c `_job_wait`), so a 20 s
            # job returned after 42 s; 5, not less, keeps the record for that poll
            "MinJobAge=5",
            f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} State=UNKNOWN",
            f"PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def start_munged(run_dir: Path, logs: Path) -> subprocess.Popen:
    """A fresh key and `munged` in the foreground as the munge user, its socket in `run_dir/munge`; waits for it."""
    folder = run_dir / "munge"
    folder.mkdir()
    shutil.chown(folder, "munge", "munge")
    folder.chmod(0o711)  # munged refuses a socket folder others cannot search, or can write
    key = folder / "munge.key"
    subprocess.run([program("mungekey"), "-c", "-k", str(key)], user="munge", check=True, timeout=60)
    proc = subprocess.Popen(
        [
            program("munged"),
            "--foreground",
            f"--socket={folder / 'socket'}",
            f"--key-file={key}",
            f"--log-file={folder / 'munged.log'}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--seed-file={folder / 'munged.seed'}",
        ],
        user="munge",
        stdout=(logs / "munged.out").open("w"),
        stderr=subprocess.STDOUT,
    )
    wait_for(lambda: (folder / "socket").exists() or proc.poll() is not None, 60, "munged's socket")
    assert proc.poll() is None, (logs / "munged.out").read_text()
    return proc


@contextlib.contextmanager
def one_node_slurm(folder: Path, cpus: int):
    """munged, slurmctld and slurmd for one node of `cpus` CPUs; config and logs under `folder`.

    Yields:
        The environment a client (`sbatch`, `sinfo`) uses it with: `SLURM_CONF`, and PATH with /usr/sbin.
    """
    logs = folder / "logs"
    logs.mkdir(parents=True)
    run_dir = Path(tempfile.mkdtemp(prefix="rs-slurm-"))
    run_dir.chmod(0o755)  # the munge user reaches its socket folder through it
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(run_dir, logs, cpus))
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{os.environ.get('PATH', '')}{os.pathsep}{SBIN}"}
    daemons = []
    try:
        daemons.append(start_munged(run_dir, logs))
        for argv in ([program("slurmctld"), "-D", "-i"], [program("slurmd"), "-D", "-N", NODE]):
            daemons.append(
                subprocess.Popen(argv, env=env, stdout=(logs / "daemons.out").open("a"), stderr=subprocess.STDOUT)
            )
        wait_for(lambda: node_state(env) == "idle" or any(d.poll() is not None for d in daemons), 90, "an idle node")
        assert all(d.poll() is None for d in daemons), read_logs(logs)
        yield env
    finally:
        for daemon in reversed(daemons):
            stop(daemon)
        shutil.rmtree(run_dir, ignore_errors=True)


def node_state(env: dict) -> str:
    """The node's state as `sinfo` reports it (`idle`, `idle*`, `unk*`, ...), or '' when none answers."""
    proc = subprocess.run(
        [program("sinfo"), "--noheader", "--format=%t"], env=env, capture_output=True, text=True, timeout=30
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def stop(proc: subprocess.Popen, timeout_s: float = 20) -> None:
    """SIGTERM one process we started, by its pid; SIGKILL it if it is still there after `timeout_s`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def read_logs(logs: Path) -> str:
    """The tail of every log in `logs`, for an assertion message."""
    return "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}" for path in sorted(logs.iterdir()))


def job_processes(job_id: str) -> list[int]:
    """The pids of live processes that belong to SLURM job `job_id` (their environment names it: the batch
    step, its `srun` steps and every process they started, Ray's included)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SLURM_JOB_ID") == job_id:
                found.append(proc.pid)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            continue
    return found
