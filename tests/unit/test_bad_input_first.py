"""Bad input is refused before anything runs (issue 46): GPU flags the GPUs present cannot meet and a script
file that does not exist, through the `raysweep` command as a user types it, for every sweep kind: exit 2,
one line, no Ray or torch imported, nothing written (the folder's listing is the same before and after),
and before the "holds this sweep already" paragraph. The GPUs present without torch or Ray
(`sweeps/engine/cluster/local_gpus.py`), and the script a command runs (`script_file.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeps.engine.cluster import gpus, local_gpus
from sweeps.engine.command_sweep.script_file import check_script, script_of
from sweeps.engine.flags import UsageError

ROOT = Path(__file__).resolve().parents[2]
RAYSWEEP = [sys.executable, "-X", "importtime", "-c", "import sys; from sweeps.cli import main; main(sys.argv[1:])"]
TRAIN = "import sys\nprint('epoch=1 val_acc=0.5')\n"

CASES = {  # subcommand and flags -> the error's start; two logical GPUs stand for the GPUs present
    "grid, a GPU it lacks": (
        ["grid", "--gpus", "7"],
        "error: --gpus: GPU 7 does not exist; this machine has GPU(s) 0, 1"[:60],
    ),
    "search, too many per trial": (
        ["search", "--gpus-per-trial", "3"],
        "error: --gpus-per-trial=3: this machine has 2 GPUs",
    ),
    "pbt, a GPU it lacks": (["pbt", "--gpus", "0,7"], "error: --gpus: GPU 7 does not exist"),
    "run, a GPU it lacks": (
        ["run", "--seeds", "2", "--gpus", "7", "--", "python", "train.py", "--seed", "{seed}"],
        "error: --gpus: GPU 7 does not exist",
    ),
    "run, no such script": (
        ["run", "--seeds", "2", "--", "python", "nosuch.py", "--seed", "{seed}"],
        "error: command: script 'nosuch.py' does not exist in ",
    ),
    "run --check, no such script": (
        ["run", "--check", "--seeds", "2", "--", "bash", "run.sh", "{seed}"],
        "error: command: script 'run.sh' does not exist in ",
    ),
    "search a command, no such script": (
        ["search", "--", "python", "src/nosuch.py", "--lr", "{lr}"],
        "error: command: script 'src/nosuch.py' does not exist in ",
    ),
}


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exits_2_with_one_line_before_anything_is_imported_or_written(case, tmp_path):
    argv, error = CASES[case]
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "runs" / "command").mkdir(parents=True)  # an experiment folder already there: left as it is
    before = listing(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAYSWEEP_LOGICAL_GPUS": "2", "RAY_ADDRESS": ""}
    proc = subprocess.run([*RAYSWEEP, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and lines[0].startswith(error) and len(lines) == 1, proc.stderr[-2000:]
    assert proc.stdout == "", proc.stdout  # no "trials in the grid", no "holds this sweep already"
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {"ray", "torch", "pandas"} & imported, sorted({"ray", "torch", "pandas"} & imported)
    assert listing(tmp_path) == before  # nothing written: no lock, no snapshot, no probe


def test_the_gpus_present_are_read_without_torch_or_ray(monkeypatch, tmp_path):
    monkeypatch.delenv(gpus.LOGICAL_GPUS_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` of this machine to join
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(local_gpus, "read_nvml", lambda: None)
    monkeypatch.setattr(local_gpus, "_ray_start_here", lambda: False)
    monkeypatch.setattr(gpus, "read_torch", lambda: pytest.fail("torch is not asked"))
    # no Ray of this process (an end-to-end test on this pytest worker may have left `ray_gpus` up: its GPUs are fixed)
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: False))
    present = local_gpus.light_readings()
    driver = Path("/proc/driver/nvidia/gpus")
    assert present == [] if not driver.is_dir() else len(present) == len(list(driver.iterdir()))
    if present == []:
        with pytest.raises(UsageError, match=r"--gpus=0: this machine has no GPU"):
            local_gpus.check_local_gpus([0], None, None)
        with pytest.raises(UsageError, match=r"--gpus-per-trial=0.5: this machine has no GPU; use 0 for CPU trials"):
            local_gpus.check_local_gpus(None, 0.5, "local")
    local_gpus.check_local_gpus([0], 1.0, "10.0.0.1:6379")  # a cluster's GPUs are checked once it is joined
    monkeypatch.setenv(gpus.LOGICAL_GPUS_ENV, "4")
    local_gpus.check_local_gpus([0, 3], 2.0, None)
    with pytest.raises(UsageError, match=r"--gpus-per-trial=8: this machine has 4 GPUs; use at most 4"):
        local_gpus.check_local_gpus(None, 8.0, None)
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: True))
    local_gpus.check_local_gpus([7], None, None)  # a Ray this process started (a notebook's): its own GPUs
    monkeypatch.setattr(local_gpus, "_ray_start_here", lambda: True)  # `ray start` ran here: joined, checked then
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: False))
    local_gpus.check_local_gpus([7], None, None)


def test_the_script_a_command_runs_is_found_as_its_interpreter_would(tmp_path, monkeypatch):
    assert script_of(["python3", "-u", "-W", "ignore", "src/train.py", "--lr", "0.1"]) == ("python", "src/train.py")
    assert script_of(["bash", "-e", "-o", "pipefail", "run.sh"]) == ("shell", "run.sh")
    for runs_no_file in (["python", "-m", "pkg.train"], ["bash", "-ec", "echo 1"], ["python", "{script}"], ["./t"]):
        assert script_of(runs_no_file) is None, runs_no_file
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    check_script(["python", "src/train.py"], tmp_path)
    with pytest.raises(UsageError, match=r"script 'src' does not exist in .* \(it is a folder\)"):
        check_script(["python", "src"], tmp_path)
    with pytest.raises(UsageError, match=r"script '/nowhere/x.py' does not exist;"):
        check_script([sys.executable, "/nowhere/x.py"], tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "on_path.sh").write_text("echo 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    check_script(["bash", "on_path.sh"], tmp_path)  # bash looks for it on PATH too
