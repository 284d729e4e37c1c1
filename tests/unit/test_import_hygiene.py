"""A driver imports only what its path uses (issue 50): no torch in a sweep's driver (command sweeps and the
built-in grid alike: the trials train, the driver does not), and no tracker package (W&B, MLflow) loaded by
Tune's start-up unless the sweep logs to it.

Each check runs in a fresh interpreter, so what the test session imported does not count.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# What `Tuner.fit` makes before the first trial that could import torch: the sweep's RunConfig, then Tune's
# default TensorBoard logger (tensorboardX imports torch, `sweeps/engine/run/tune_start.py`)
TUNES_START = (
    "\nfrom sweeps.engine.run.launch import sweep_run_config\nsweep_run_config('x', '/tmp')"
    "\nfrom ray.tune.logger import TBXLoggerCallback\nTBXLoggerCallback()"
)


def modules_imported_by(script: Path) -> list[str]:
    """Every module a script imports anywhere in its file (top level and inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return sorted(names)


def loaded_after(code: str) -> set[str]:
    """The top-level packages loaded in a fresh interpreter after running `code` (raises on its failure)."""
    probe = code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules}))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.check_output([sys.executable, "-c", probe], cwd=ROOT, env=env, text=True, timeout=300)
    return set(ast.literal_eval(out.splitlines()[-1]))


def test_a_command_sweeps_driver_never_imports_torch():
    """Everything `sweeps/run_command.py` imports on its way to `tuner.fit()`, the GPU reading of a local
    sweep (no NVML here) and the OOM check after the fit: torch stays out (it cost 1.3 s of start-up,
    through trainables.command.failure -> process -> trainables.gpu)."""
    modules = modules_imported_by(ROOT / "sweeps" / "run_command.py")
    assert "trainables.command.runner" in modules and "sweeps.engine.run.launch" in modules
    code = "\n".join(f"import {name}" for name in modules) + (
        "\nfrom sweeps.engine.cluster.gpus import read_gpus"
        "\nfrom trainables.gpu_oom import is_gpu_oom"
        "\nread_gpus()"
        "\nassert not is_gpu_oom(RuntimeError('trial failed'))" + TUNES_START
    )
    loaded = loaded_after(code)
    assert "ray" in loaded  # the path was imported
    assert "torch" not in loaded


def test_the_grids_driver_never_imports_torch():
    """The default grid's driver hands `train_classifier` to Tune and never trains: everything
    `sweeps/noise_grid.py` imports (but `trainables.ddp`, the data-parallel trainable of 2+ GPUs per trial,
    built on Ray Train and torch) and the data load leave torch to the trials."""
    modules = [m for m in modules_imported_by(ROOT / "sweeps" / "noise_grid.py") if m != "trainables.ddp"]
    code = "\n".join(f"import {name}" for name in modules) + (
        "\nfrom trainables import train_classifier, parse_config, load_data\nload_data(parse_config({}))" + TUNES_START
    )
    loaded = loaded_after(code)
    assert {"ray", "sklearn"} <= loaded  # the path was imported, the data loaded
    assert "torch" not in loaded


def test_tunes_start_up_imports_no_tracker_the_sweep_does_not_use():
    """A sweep's RunConfig has callbacks; Tune's usage record of them imported W&B and MLflow (2 s and more
    of start-up) to read four class names. `sweep_run_config` makes it count by name."""
    code = (
        "from ray.air._internal import usage\n"
        "from sweeps.engine.run.launch import sweep_run_config\n"
        "run_config = sweep_run_config('x', '/tmp')\n"
        "counts = usage._count_callbacks(run_config.callbacks)\n"
        "assert set(counts) == {'CustomCallback', 'CustomLoggerCallback'}, counts\n"  # the history-keeping loggers
        "assert sum(counts.values()) == len(run_config.callbacks), counts\n"
    )
    loaded = loaded_after(code)
    assert not loaded & {"wandb", "mlflow", "comet_ml", "aim"}, loaded & {"wandb", "mlflow"}


def test_a_command_trials_set_up_never_imports_torch(tmp_path):
    """What a command trial runs between its turn at the failure gate and its command's start (the runtime's
    imports, the environment step of a half-GPU trial with and without --mps) leaves torch to the command:
    `mps_env` imported it in every command trial, MPS or not, 4-7 s of set-up per trial on the loaded 2-core
    machine, and the waiting trials of an 8-slot sweep started 13 s after the gate opened (issue 53)."""
    mps_dir = tmp_path / "mps"
    (mps_dir / "gpu0").mkdir(parents=True)
    (mps_dir / "gpu0" / "device.json").write_text('{"index": 0, "memory_total": 1073741824}')
    code = (
        "from pathlib import Path\n"
        "import trainables.command.runner\n"
        "from trainables.command.gpu_sharing import GpuSharing, cap_line, mps_env\n"
        "from trainables.command.process import command_env\n"
        "env = command_env({'seed': 0}, Path('/w'), 't', Path('/w/metrics.jsonl'), 0.5)\n"
        "env['CUDA_VISIBLE_DEVICES'] = '0'\n"
        "assert cap_line(env)\n"
        "assert mps_env(dict(env), 0.5, GpuSharing()) is None\n"
        f"assert 'memory limit' in mps_env(dict(env), 0.5, GpuSharing(mps_dir={str(mps_dir)!r}))\n"
    )
    loaded = loaded_after(code)
    assert "ray" in loaded  # the runtime was imported
    assert "torch" not in loaded


def test_a_command_grids_driver_loads_scipy_only_for_seeds_auto(tmp_path):
    """`--seeds auto`'s searcher and its statistics (scipy.stats: 0.7-1.1 s of a driver's start) load only for
    `--seeds auto`: a command grid's driver, up to the fit (`run_grid`), leaves scipy out; with `--seeds auto`
    it is there."""
    (tmp_path / "train.py").write_text("print('epoch=1 val_acc=0.5')\n")
    grid = ["--axis", "method=a,b", "--storage-path", str(tmp_path / "runs"), "--quiet"]
    command = ["--", sys.executable, str(tmp_path / "train.py"), "{method}", "{seed}"]
    for argv, expected in (
        ([*grid, "--seeds", "2", "--name", "fixed", *command], "False"),
        ([*grid, "--seeds", "auto", "--compare", "method", "--name", "auto", *command], "True"),
    ):
        code = (
            "import sys\nfrom sweeps import run_command\n"
            "def fit(*args):\n"
            "    print('scipy', 'scipy' in {m.split('.')[0] for m in sys.modules})\n"
            "    raise SystemExit(0)\n"
            f"run_command.run_grid = fit\nrun_command.main({argv!r})\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.check_output([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True, timeout=300)
        assert f"scipy {expected}" in out.splitlines(), out
