"""What ran, recorded at every run of a sweep: command, code (commit, branch, diff), versions, nodes."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from analysis.reading.provenance import changed_files, read_records
from trainables.command.workdir import snapshot_copies
from trainables.experiment import records
from trainables.experiment.redaction import redacted_argv
from trainables.experiment.release import release

SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".jl", ".r", ".R", ".lua", ".pl", ".rb", ".js")  # a command's script
PROJECT = str(Path(__file__).resolve().parents[3])  # the built-in sweeps' code: this checkout
MAX_UNTRACKED = 200  # untracked code files named in a record; the rest counted (`untracked_more`)
SHOWN_CHANGES = 2  # files named in the "code changed" line before "and N more"


def record_run(experiment_dir: str, trainable_params: dict) -> dict | None:
    """Write this run's record (`provenance/run-<UTC time>.json`, and `.patch` with the uncommitted
    diff) into `experiment_dir` (a folder or URI), and print one line naming the files whose code
    changed since the previous run's record. Call it with Ray up (it reads `ray.nodes()`).

    Args:
        trainable_params: the sweep's `Trainable.params`; a command sweep's `template` and `cwd`
            say which repository to record (`code_folder`), else this project.
    Returns:
        The record written, or None when it could not be (one warning line; the sweep goes on).
    """
    try:
        previous = read_records(experiment_dir)
        record, patch = collect(code_folder(trainable_params), nodes=ray_nodes(), outputs=outputs_of(experiment_dir))
        now = time.time()  # the record's name: when it was written, to the millisecond (sorts in order)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
        if previous and record["code"].get("commit") and previous[-1].get("code", {}).get("commit"):
            record["code"]["since_previous"] = commit_diff(record["code"]["repo"], previous[-1]["code"]["commit"])
        records.write_provenance(experiment_dir, stamp, record, patch)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"warning: no provenance record: {e}", file=sys.stderr)
        return None
    if previous and (files := changed_files(previous[-1], record)):
        print(changed_line(files, experiment_dir), flush=True)
    return record


def changed_line(files: list[str], experiment_dir: str) -> str:
    """One console line for the files whose code changed since the previous run: the first
    `SHOWN_CHANGES`, how many more, and the command that lists them all."""
    shown = files if len(files) <= SHOWN_CHANGES + 1 else files[:SHOWN_CHANGES]
    more = f" and {len(files) - len(shown)} more" if len(files) > len(shown) else ""
    return (
        f"code changed since the previous run: {', '.join(shown)}{more}: "
        f"python -m analysis {shlex.quote(experiment_dir)} --provenance"
    )


def outputs_of(experiment_dir: str) -> tuple[str, ...]:
    """The local folders holding the sweep's outputs, left out of the code's record: the experiment
    folder and the storage folder holding it (`--storage-path`: the out-of-memory re-runs beside it);
    () on object storage."""
    if "://" in experiment_dir:
        return ()
    folder = Path(experiment_dir).resolve()
    return str(folder), str(folder.parent)


def collect(folder: str, nodes: list[dict] | None = None, outputs: tuple[str, ...] = ()) -> tuple[dict, str]:
    """This process's provenance, without writing anything.

    Args:
        folder: a folder of the swept code; its git repository (if any) is recorded.
        nodes: the cluster's nodes (`ray_nodes()`); None: only this machine (host name, NVML GPUs).
        outputs: the sweep's output folders, left out of the untracked files (`git_state`).
    Returns:
        (record: `command` (shlex-joined, the Python executable first), `cwd`, `started` (Unix
        seconds the process started), `started_utc`, `code` (`git_state`), `raysweep` (`release.release()`),
        `versions`, `packages` (name -> version), `nodes` (host, cpus, gpu_count, gpus [{name, memory_gib}]);
        the patch text of `git diff HEAD`, "" when clean or not a repository).
    """
    started = process_start_time()
    code, patch = git_state(folder, outputs)
    gpus, driver = local_gpus()
    here = {"host": socket.gethostname(), "cpus": os.cpu_count() or 0, "gpu_count": len(gpus), "gpus": gpus}
    for node in nodes or []:
        if node["host"] == here["host"] and not node["gpus"]:
            node["gpus"] = gpus  # Ray names the model only; NVML gives the driver's node's memory too
    record = {
        "command": shlex.join([sys.executable, *redacted_argv(sys.argv)]),  # --notify URLs: scheme and host
        "cwd": os.getcwd(),
        "started": started,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "code": code,
        "raysweep": release(),  # this run's raysweep {"version", "commit"}: a resume may run another release
        "versions": versions() | {"driver": driver},
        "packages": {d.metadata["Name"]: d.version for d in importlib.metadata.distributions() if d.metadata["Name"]},
        "nodes": nodes or [here],
    }
    return record, patch


def code_folder(trainable_params: dict) -> str:
    """The folder whose repository holds the swept code: for a command sweep, the folder of the
    first word of the command that is an existing script (`SCRIPT_SUFFIXES`, relative to its
    `cwd`: `python src/train.py` -> src/), else its `cwd`; for the built-in sweeps, this project."""
    template, cwd = trainable_params.get("template"), trainable_params.get("cwd")
    if not template:
        return PROJECT
    for word in template:
        path = Path(cwd or ".", word)
        if "{" not in word and path.suffix in SCRIPT_SUFFIXES and path.is_file():
            return str(path.resolve().parent)
    return str(cwd or os.getcwd())


def git_state(folder: str, outputs: tuple[str, ...] = ()) -> tuple[dict, str]:
    """The git state of the repository holding `folder`: `{folder, repo, commit, branch,
    diff_files (path -> sha256 of its part of `git diff HEAD`), untracked, untracked_more}` and the
    diff's text; outside a repository (or without git) `{folder, why}` and "".

    `untracked` names the code a run may have used that git does not track: of
    `git ls-files --others --exclude-standard` (what git ignores left out), the files a command
    sweep's snapshot copies (`workdir.snapshot_copies`: no links, outputs such as `runs/` or
    checkpoints, data), outside the `outputs` folders inside the repository (the experiment and storage
    folders: trial folders and their links), at most
    `MAX_UNTRACKED` of them by name; `untracked_more` counts the rest."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=60).stdout

    try:
        repo = git("rev-parse", "--show-toplevel").strip()
        commit = git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.SubprocessError) as e:
        why = getattr(e, "stderr", "") or str(e)
        return {
            "folder": folder,
            "why": f"not a git repository: {why.strip().splitlines()[-1] if why.strip() else e}",
        }, ""
    branch = git("rev-parse", "--abbrev-ref", "HEAD").strip()
    patch = subprocess.run(
        ["git", "diff", "HEAD", "--binary"], cwd=repo, capture_output=True, text=True, timeout=60
    ).stdout
    inside = [Path(out).relative_to(repo) for out in outputs if Path(out).is_relative_to(repo)]
    skip = [f":(exclude,top){out.as_posix()}" for out in inside if out.parts]  # never the repository itself
    listed = git("-C", repo, "ls-files", "--others", "--exclude-standard", "--", ".", *skip).split("\n")
    untracked = sorted(f for f in listed if f and snapshot_copies(Path(repo, f), f))
    code = {
        "folder": folder,
        "repo": repo,
        "commit": commit,
        "branch": None if branch == "HEAD" else branch,
        "diff_files": diff_file_hashes(patch),
        "untracked": untracked[:MAX_UNTRACKED],
        "untracked_more": max(0, len(untracked) - MAX_UNTRACKED),
    }
    return code, patch


def diff_file_hashes(patch: str) -> dict[str, str]:
    """Path -> sha256 (hex, 16 digits) of that file's section of a `git diff` text."""
    sections = re.split(r"^(?=diff --git )", patch, flags=re.M)
    out = {}
    for section in sections:
        if match := re.match(r"diff --git a/(.*?) b/(.*)", section):
            out[match.group(2)] = hashlib.sha256(section.encode()).hexdigest()[:16]
    return out


def commit_diff(repo: str, previous_commit: str) -> list[str]:
    """Files that differ between `previous_commit` and HEAD (`git diff --name-only`); [] when equal,
    ["<commit unknown>"] when the previous commit is no longer in the repository."""
    done = subprocess.run(
        ["git", "diff", "--name-only", previous_commit, "HEAD"], cwd=repo, capture_output=True, text=True, timeout=60
    )
    if done.returncode:
        return [f"<commit {previous_commit[:10]} not in {repo}>"]
    return [f for f in done.stdout.split("\n") if f]


def versions() -> dict:
    """Python, torch, Ray and CUDA versions (None when absent). torch's CUDA version is read from
    its `torch/version.py` (what `torch.version.cuda` returns) without importing torch (seconds)."""
    out = {"python": platform.python_version(), "torch": None, "ray": None, "cuda": None}
    for name in ("torch", "ray"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    if out["torch"]:
        try:
            text = Path(importlib.metadata.distribution("torch").locate_file("torch/version.py")).read_text()
            match = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, flags=re.M)
            out["cuda"] = match.group(1) if match else None
        except OSError:
            pass
    return out


def local_gpus() -> tuple[list[dict], str | None]:
    """This machine's GPUs through NVML (`nvidia-ml-py`): ([{name, memory_gib}], driver version);
    ([], None) without NVML or a GPU driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # the package absent, or NVMLError: no driver (pynvml's errors share no base but Exception)
        return [], None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            gpus.append({"name": name.decode() if isinstance(name, bytes) else name, "memory_gib": memory})
        driver = pynvml.nvmlSystemGetDriverVersion()
        return gpus, driver.decode() if isinstance(driver, bytes) else driver
    finally:
        pynvml.nvmlShutdown()


def ray_nodes() -> list[dict] | None:
    """The alive nodes of the Ray cluster this process is connected to: host, CPUs, GPU count and
    models (Ray's `accelerator_type:<model>` resource; memory only where NVML runs, the driver's
    node); None when Ray is not up."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        models = [k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")]
        count = resources.get("GPU", 0)
        gpus = [{"name": models[0], "memory_gib": 0.0}] * int(count) if models else []
        nodes.append(
            {"host": node.get("NodeManagerHostname"), "cpus": resources.get("CPU", 0), "gpu_count": count, "gpus": gpus}
        )
    return nodes


def process_start_time() -> float:
    """Unix seconds this process started, so that a sweep's wall time includes its imports.

    On Linux: now, less the time since the start that `/proc/self/stat` gives (field 22, `starttime`, clock ticks
    after boot; proc(5)) against `CLOCK_BOOTTIME`, to one clock tick (10 ms). psutil's `create_time` adds the boot
    time of `/proc/stat`, whole seconds, so it reads up to 1 s early: a 20 s sweep's wall time was 0.98 s long on a
    machine that booted at .98 of a second. Elsewhere (macOS), psutil's `create_time`.
    """
    try:
        with open("/proc/self/stat") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()  # the name, field 2, may hold spaces
        since_boot_s = int(after_name[19]) / os.sysconf("SC_CLK_TCK")
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot_s)
    except (OSError, AttributeError, IndexError, ValueError):  # no /proc, no CLOCK_BOOTTIME
        import psutil

        return psutil.Process().create_time()
