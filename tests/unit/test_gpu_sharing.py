"""A fractional command trial's GPU sharing, on CPU: the memory cap its PyTorch obeys (a sitecustomize hook
on its PYTHONPATH, shown with a fake torch module) and NVIDIA MPS (shown with a fake control daemon)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sweeps.engine.cluster import mps_daemons
from sweeps.engine.flags import UsageError
from trainables.command.gpu_sharing import CAP_HOOK_DIR, MPS_DEVICE_FILE, GpuSharing, cap_line, mps_env
from trainables.command.parse import StepContext
from trainables.command.process import command_env

GIB = 2**30

# torch as far as the hook sees it: `import torch` imports torch.cuda; CUDA starts in `_lazy_init`, which
# runs the queued calls (torch's own order); every call is recorded in `events`.
FAKE_TORCH = {
    "torch/__init__.py": "import torch.cuda as cuda\n",
    "torch/cuda/__init__.py": textwrap.dedent(
        """
        import os
        events, _queued, _initialized = [], [], False

        def _lazy_call(fn):
            fn() if _initialized else _queued.append(fn)

        def _lazy_init():
            global _initialized
            if not _initialized:
                events.append(["cuda init", os.environ.get("CUDA_VISIBLE_DEVICES")])
                _initialized = True
                for fn in _queued:
                    fn()

        def device_count():
            return 1

        def set_per_process_memory_fraction(fraction, device=None):
            _lazy_init()
            events.append(["memory fraction", fraction, device])
        """
    ),
}


def write_files(root: Path, files: dict) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def trial_env(tmp_path: Path, gpus: float, memory_cap: bool = True, *path: Path) -> dict:
    """The environment a trial's command gets (`command_env`), with `path` after the hook on PYTHONPATH."""
    env = command_env({"lr": 0.1}, tmp_path, "t0", tmp_path / "metrics.jsonl", gpus, memory_cap)
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH")]), *map(str, path)])
    return env


def run_python(code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_cap_is_applied_when_cuda_starts_not_at_import(tmp_path):
    fake = write_files(tmp_path / "fake", FAKE_TORCH)
    env = trial_env(tmp_path, 0.25, True, fake)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(CAP_HOOK_DIR)
    script = """
        import json, os, torch
        at_import = list(torch.cuda.events)
        os.environ["CUDA_VISIBLE_DEVICES"] = "3"  # the script picks its GPU after importing torch
        torch.cuda._lazy_init()  # its first CUDA call
        print(json.dumps({"at_import": at_import, "at_init": torch.cuda.events}))
    """
    done = run_python(script, env, tmp_path)
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)
    assert events["at_import"] == []  # nothing touched CUDA at import
    assert events["at_init"] == [["cuda init", "3"], ["memory fraction", 0.225, 0]]  # the script's GPU, then the cap
    said = "raysweep: GPU memory capped at 0.225 of each visible device (1) as CUDA started"
    assert said in done.stderr
    context = StepContext("epoch", [], None)  # the line is no metric for the default reading
    assert context.feed(done.stderr.strip()) == [] and context.close(False) == []


def test_the_hook_leaves_a_process_without_torch_alone_and_runs_the_users_sitecustomize(tmp_path):
    user = write_files(tmp_path / "user", {"sitecustomize.py": "import os\nos.environ['USER_HOOK'] = 'ran'\n"})
    env = trial_env(tmp_path, 0.25, True, user)
    script = """
        import os, sys
        print(os.environ.get("USER_HOOK"), sys.modules["sitecustomize"].__file__, "torch" in sys.modules)
    """
    done = run_python(script, env, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    hook, module, torch_loaded = done.stdout.split()
    assert hook == "ran" and module == str(user / "sitecustomize.py") and torch_loaded == "False"


def test_real_torch_gets_the_cap_queued_on_its_cuda_init(tmp_path):
    env = trial_env(tmp_path, 0.5, True)
    script = """
        import torch
        queued = [getattr(f, "__qualname__", "") for f, _ in torch.cuda._queued_calls]
        print(any(q.startswith("queue_cap") for q in queued), float(torch.ones(3).sum()))
    """
    done = run_python(script, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "3.0"]  # CUDA never started on this CPU machine: nothing said
    assert "raysweep" not in done.stderr


def test_no_hook_without_a_fraction_or_with_no_memory_cap(tmp_path):
    capped = trial_env(tmp_path, 0.25)
    assert cap_line(capped).startswith("GPU memory cap 0.225 of the device")
    for env in (trial_env(tmp_path, 0.25, False), trial_env(tmp_path, 1.0), trial_env(tmp_path, 0.0)):
        assert str(CAP_HOOK_DIR) not in env.get("PYTHONPATH", "") and cap_line(env) is None
    assert "RAYSWEEP_GPU_MEMORY_FRACTION" in trial_env(tmp_path, 0.25, False)  # for a script that caps itself
    shell = subprocess.run(["sh", "-c", "echo $RAYSWEEP_LR"], env=capped, capture_output=True, text=True)
    assert shell.stdout == "0.1\n" and shell.returncode == 0  # a non-Python command ignores the hook


# --- MPS -------------------------------------------------------------------------------------------


def test_mps_client_env_from_the_share(tmp_path):
    folder = tmp_path / "mps" / "gpu2"
    folder.mkdir(parents=True)
    (folder / MPS_DEVICE_FILE).write_text(json.dumps({"index": "2", "memory_total": 80 * GIB}))
    sharing = GpuSharing(mps_dir=str(tmp_path / "mps"))
    env = {"CUDA_VISIBLE_DEVICES": "2"}
    said = mps_env(env, 0.25, sharing)
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=18432M",  # 80 GiB x 0.25 x (1 - 0.1 headroom)
    }  # no CUDA_VISIBLE_DEVICES: the daemon shows its one GPU as device 0
    assert said == "--mps: an MPS client of GPU 2's daemon, 25% of its threads, device memory limit 18432MiB"
    uncapped = {"CUDA_VISIBLE_DEVICES": "2"}
    mps_env(uncapped, 0.5, GpuSharing(memory_cap=False, mps_dir=sharing.mps_dir))
    assert uncapped["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in uncapped
    elsewhere = {"CUDA_VISIBLE_DEVICES": "1"}  # no daemon for GPU 1 here (another node)
    assert "no MPS daemon of this sweep for GPU 1" in mps_env(elsewhere, 0.25, sharing)
    assert elsewhere == {"CUDA_VISIBLE_DEVICES": "1"}
    assert mps_env({"CUDA_VISIBLE_DEVICES": "2"}, 1.0, sharing) is None  # a whole GPU: no MPS
    assert mps_env({"CUDA_VISIBLE_DEVICES": "2"}, 0.25, GpuSharing()) is None  # no --mps


def test_mps_is_refused_in_one_line_where_it_is_missing(monkeypatch, tmp_path):
    from sweeps import run_command

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control
    with pytest.raises(UsageError, match="--mps needs NVIDIA MPS, but nvidia-cuda-mps-control is not on PATH"):
        run_command.parse_args(["--mps", "--", sys.executable, "train.py"])
    assert run_command.parse_args(["--no-memory-cap", "--", sys.executable, "train.py"]).no_memory_cap


# A stand-in for nvidia-cuda-mps-control: `-f` runs in the foreground, writes its environment and makes
# the control pipe, and ends when `quit` arrives (the way the real one is told, on its pipe folder).
FAKE_CONTROL = """#!{python}
import json, os, sys, time
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
if sys.argv[1:] == ["-f"]:
    if os.environ.get("FAKE_MPS_FAIL"):
        print("An instance of this daemon is already running"); sys.exit(1)
    keys = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
    json.dump({{k: os.environ.get(k) for k in keys}}, open(os.path.join(pipe, "env.json"), "w"))
    open(os.path.join(pipe, "control"), "w").close()
    while not os.path.exists(os.path.join(pipe, "quit")):
        time.sleep(0.02)
elif sys.stdin.read().strip() == "quit" and not os.environ.get("FAKE_MPS_DEAF"):
    open(os.path.join(pipe, "quit"), "w").close()
"""


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(FAKE_CONTROL.format(python=sys.executable))
    control.chmod(control.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "mps"


def test_one_daemon_per_gpu_started_and_stopped_by_pid(fake_mps, monkeypatch):
    mps_daemons.check_mps(True)  # found on PATH
    fake_mps.mkdir()
    with mps_daemons.mps_daemons(str(fake_mps), 0.25, ["0", "2"], {"0": 80 * GIB}) as daemons:
        assert [gpu for gpu, _ in daemons] == ["0", "2"] and all(p.poll() is None for _, p in daemons)
        for gpu in ("0", "2"):
            pipe = fake_mps / f"gpu{gpu}" / "pipe"
            assert json.loads((pipe / "env.json").read_text()) == {
                "CUDA_VISIBLE_DEVICES": gpu,
                "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
                "CUDA_MPS_LOG_DIRECTORY": str(fake_mps / f"gpu{gpu}" / "log"),
            }
        env = {"CUDA_VISIBLE_DEVICES": "2"}
        assert mps_env(env, 0.25, GpuSharing(mps_dir=str(fake_mps))).endswith("25% of its threads")  # no memory known
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(fake_mps / "gpu2" / "pipe")
    assert all(p.returncode == 0 for _, p in daemons)  # each quit when told
    assert not (fake_mps / "gpu0" / MPS_DEVICE_FILE).exists()  # a late trial finds no daemon

    monkeypatch.setenv("FAKE_MPS_DEAF", "1")  # a daemon that ignores `quit` is ended by pid
    monkeypatch.setattr(mps_daemons, "STOP_WAIT_S", 0.5)
    with mps_daemons.mps_daemons(str(fake_mps), 0.5, ["1"], {}) as daemons:
        pass
    assert daemons[0][1].returncode == -15  # SIGTERM to its process group

    with mps_daemons.mps_daemons(str(fake_mps), 1.0, ["1"], {}) as daemons:
        assert daemons == []  # whole GPUs: no MPS
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(UsageError, match="for GPU 3 exited with code 1: An instance of this daemon is already running"):
        with mps_daemons.mps_daemons(str(fake_mps), 0.25, ["3"], {}):
            pass
