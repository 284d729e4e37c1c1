"""A real Ray cluster on this machine for tests: `ray start --block` processes the test owns.

Each node is its own `ray start` process with its own `--temp-dir` and ports; the test stops
exactly those processes by pid (never `ray stop`, which would end other people's Ray on this
machine). HOME points into the test's folder, so the authentication token `ray start --head`
finds (Ray 2.59+ turns token authentication on when ~/.ray/auth_token exists) is the test's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers.processes import wait_for

RAY = str(Path(sys.executable).with_name("ray"))


def twice(start):
    """`start(1)`, and `start(2)` if that raised AssertionError (`start_node` timed out): a loaded machine can
    miss Ray's fixed 30 s wait for a raylet to register with its GCS (ray/_private/node.py), once."""
    try:
        return start(1)
    except AssertionError:
        return start(2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token_env(home: Path) -> dict:
    """The environment of a user whose ~/.ray/auth_token is `home/.ray/auth_token` (created here),
    RAY_AUTH_MODE unset."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    }
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    home.mkdir(parents=True, exist_ok=True)
    # 60 s ran out at load 30 (the CLI imports Ray first)
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=180)
    assert (home / ".ray" / "auth_token").is_file()
    return env


def start_node(
    folder: Path,
    env: dict,
    *,
    head_port: int | None = None,
    address: str | None = None,
    node_ip: str | None = None,
    num_cpus: int = 1,
    num_gpus: int = 0,
    extra_env: dict | None = None,
    timeout_s: float = 120,
) -> subprocess.Popen:
    """Start one node (`head_port` for the head, else `address` of the head) and wait until it is up.

    The node's Ray temp dir is a fresh short folder under /tmp (Unix socket paths must stay under
    108 bytes, too short for pytest's tmp_path); `stop_node` removes it. `folder` gets the log.
    Returns:
        The `ray start --block` process (`.temp_dir` is its Ray temp dir); its children are the
        node's raylet and the rest.
    """
    folder.mkdir(parents=True, exist_ok=True)
    temp_dir = tempfile.mkdtemp(prefix="raysweep-node-")
    cmd = [
        RAY,
        "start",
        "--block",
        f"--temp-dir={temp_dir}",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        "--disable-usage-stats",
        # no log monitor: it tails every worker's log files ten times a second to copy them to drivers that ask
        # (log_to_driver), and no sweep or test here asks; on a head that ran a few hundred workers it took ~1.5 %
        # of a core for as long as the head lived (issue 53: the suite's CPU)
        "--include-log-monitor=false",
    ]
    if head_port is not None:
        # a dashboard port of its own: without a dashboard `ray start` still refuses to start while its default,
        # 8265, is taken (a local sweep's dashboard on this machine: the node times out in its start)
        cmd += ["--head", f"--port={head_port}", "--include-dashboard=false", f"--dashboard-port={free_port()}"]
    else:
        cmd += [f"--address={address}"]
    if node_ip:
        cmd += [f"--node-ip-address={node_ip}"]
    log = folder / "ray_start.log"
    proc = subprocess.Popen(
        cmd, env={**env, **(extra_env or {})}, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )  # its own process group: stopped as one, by its pid
    proc.temp_dir = temp_dir
    try:
        wait_for(
            lambda: "block forever" in log.read_text() or proc.poll() is not None, timeout_s, f"ray start in {folder}"
        )
    except AssertionError:
        stop_node(proc)
        raise
    assert proc.poll() is None, log.read_text()[-3000:]
    return proc


@contextlib.contextmanager
def shared_head(folder: Path, extra_env: dict | None = None, num_cpus: int | None = None, num_gpus: int = 0):
    """A `ray start --head` that sweep subprocesses join instead of starting a private Ray each (4-6 s
    of start-up plus shutdown per sweep; issue 26).

    CPUs as a private Ray here would have them (or `num_cpus` logical ones), no GPU (or `num_gpus`
    logical ones: Ray hands them out as on a real box), no dashboard; its own ports, temp dir and token
    (RAY_AUTH_TOKEN_PATH, so HOME stays the user's); PYTHONPATH at this repository, so its workers
    import `trainables` whatever the driver's cwd; `extra_env` (e.g. object-storage credentials) for
    its workers too. Stopped by pid on exit (`stop_node`), never by `ray stop`.
    Yields:
        The environment a sweep subprocess joins it with (`RAY_ADDRESS` is the head's `HOST:PORT`).
    """
    home = folder / "home"
    token_env(home)  # generates home/.ray/auth_token
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAYSWEEP_LOGICAL_GPUS")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(home / ".ray" / "auth_token"),
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        RAY_raylet_start_wait_time_s="120",  # Ray's 30 s for the raylet to register: missed twice in a row at load 30
        **(extra_env or {}),
    )

    def start(attempt: int) -> tuple[subprocess.Popen, int]:
        port = free_port()
        cpus = num_cpus or os.cpu_count() or 2
        return start_node(folder / f"start{attempt}", env, head_port=port, num_cpus=cpus, num_gpus=num_gpus), port

    head, port = twice(start)
    try:
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{port}", "RAYSWEEP_LOGICAL_GPUS": ""}
    finally:
        stop_node(head)


def raylet_pid(node: subprocess.Popen) -> int:
    """The pid of the raylet that a `start_node` process runs (its direct child named `raylet`)."""
    import psutil

    return next(c.pid for c in psutil.Process(node.pid).children() if c.name() == "raylet")


def stop_node(node: subprocess.Popen, timeout_s: float = 20) -> None:
    """SIGTERM the `ray start` process, whose handler stops the node's processes (about 3 s; a SIGTERM
    to its whole process group left it waiting past 30 s), then SIGKILL whatever of its group is left;
    remove its temp dir."""
    try:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(node.pid, signal.SIGKILL)  # stragglers, or the `ray start` process itself after timeout_s
    except ProcessLookupError:  # the group is gone already
        pass
    node.wait(timeout_s)
    shutil.rmtree(node.temp_dir, ignore_errors=True)


def start_two_nodes(folder: Path, env: dict, worker_ip: str, nodes: list) -> str:
    """A head (fast failure detection: Ray's defaults wait ~15 s before declaring a node dead) and a
    second node on `worker_ip` that joins with RAY_AUTH_MODE=token, 1 CPU each; each is appended to
    `nodes` as soon as it runs (the caller stops them). Returns the head's `HOST:PORT`."""
    port = free_port()
    nodes.append(
        start_node(
            folder / "head",
            env,
            head_port=port,
            extra_env={"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4"},
        )
    )
    nodes.append(start_second_node(folder / "worker", env, f"127.0.0.1:{port}", worker_ip))
    return f"127.0.0.1:{port}"


def start_second_node(folder: Path, env: dict, address: str, worker_ip: str) -> subprocess.Popen:
    """The second node of `start_two_nodes`: 1 CPU on `worker_ip`, joining `address` with RAY_AUTH_MODE=token."""
    return start_node(folder, env, address=address, node_ip=worker_ip, extra_env={"RAY_AUTH_MODE": "token"})


@dataclasses.dataclass
class TwoRaylets:
    """The two-raylet cluster of `start_two_nodes`, shared by a test session's cluster tests
    (`tests/conftest.py`'s `two_raylets`): started once, its second node started again after a test
    killed it.

    `env` is the environment of its nodes and of a driver that joins it (the token in its HOME,
    RAY_AUTH_MODE unset); `nodes` are the head and the second node, whose raylet a test may kill.
    """

    folder: Path
    env: dict
    worker_ip: str
    address: str = ""
    nodes: list = dataclasses.field(default_factory=list)
    restarts: int = 0

    def start(self) -> None:
        def start(attempt: int) -> str:
            self.stop()  # what a failed first attempt started
            return start_two_nodes(self.folder / f"start{attempt}", self.env, self.worker_ip, self.nodes)

        self.address = twice(start)

    def second_node_up(self) -> None:
        """Start the second node again when its `ray start --block` has exited (it does once its raylet
        is killed) or its raylet is gone; the head must be alive."""
        head, worker = self.nodes
        assert head.poll() is None, f"the head of {self.address} has exited: see {self.folder}/start*/head"
        if worker.poll() is None and _has_raylet(worker):
            return
        stop_node(worker)

        def start(attempt: int) -> subprocess.Popen:
            self.restarts += 1
            return start_second_node(self.folder / f"worker{self.restarts}", self.env, self.address, self.worker_ip)

        self.nodes[1] = twice(start)

    def stop(self) -> None:
        while self.nodes:
            stop_node(self.nodes.pop())


def _has_raylet(node: subprocess.Popen) -> bool:
    import psutil

    try:
        return raylet_pid(node) > 0
    except (StopIteration, psutil.NoSuchProcess):
        return False


def kill_node_under_a_trial(
    argv: list[str],
    env: dict,
    cwd: Path,
    log: Path,
    node: subprocess.Popen,
    find_victim,
    wait_s: float = 120,
    sweep_s: float = 240,
) -> tuple[str, int, str]:
    """Run a sweep driver (`argv`, output to `log`); once `find_victim()` names a trial training on
    `node` (polled up to `wait_s`), SIGKILL that node's raylet and wait up to `sweep_s` for the driver.
    Returns:
        (the trial's name, the driver's exit code, its output).
    """
    driver = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        victim = wait_for(lambda: find_victim() or (driver.poll() is not None), wait_s, "a trial training on that node")
        assert isinstance(victim, str), f"the sweep ended first: {log.read_text()[-3000:]}"
        os.kill(raylet_pid(node), signal.SIGKILL)
        code = driver.wait(timeout=sweep_s)
    finally:
        if driver.poll() is None:
            driver.kill()
    return victim, code, log.read_text()


def alive_nodes(address: str, env: dict) -> list[str]:
    """Node IPs of the live nodes, asked from a separate Python (the test process keeps no Ray)."""
    code = (
        "import json, ray; ray.init(address=%r, log_to_driver=False); "
        "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))" % address
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def temp_dir_of(address: str) -> Path:
    """The Ray temp dir of the head whose GCS listens at `address` (`HOST:PORT`), from its `gcs_server`'s
    `--log_dir` (`<temp dir>/session_<...>/logs`). Raises StopIteration when no such process runs here."""
    import psutil

    port = int(address.rsplit(":", 1)[1])
    gcs = next(
        psutil.Process(c.pid)
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid
    )
    log_dir = next(a.split("=", 1)[1] for a in gcs.cmdline() if a.startswith("--log_dir="))
    return Path(log_dir).parents[1]


def files_holding(folders: list[Path], secrets: list[str]) -> dict[str, str]:
    """The regular files under `folders` whose bytes hold any of `secrets` (each file read whole): path -> the start of
    the line holding the first one found (at most 600 bytes)."""
    wanted = [s.encode() for s in secrets]
    found = {}
    for folder in folders:
        for path in folder.rglob("*"):
            try:
                data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            except OSError:  # a file removed meanwhile, a socket
                continue
            at = next((data.find(s) for s in wanted if s in data), -1)
            if at >= 0:
                start = data.rfind(b"\n", 0, at) + 1  # the line holding it, from its start
                found[str(path)] = data[start : min(at + 50, start + 600)].decode(errors="replace")
    return found
