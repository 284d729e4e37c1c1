"""The `raysweep` console command (sweeps/cli.py) and what a trial gets from the launching shell
(sweeps/engine/cluster/job_env.py): its subcommands on the scripts' own parsers, `--help` before the heavy
imports, the shell's environment carried to the trials, and a user's repository with its own `analysis/`,
`sweeps/`, `trainables/` packages; end to end from a wheel installed into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sweeps import cli
from sweeps.engine.cluster import job_env
from tests.helpers.repos import clashing_repo

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"ray", "torch", "pandas", "matplotlib"}


def test_help_of_every_subcommand_answers_before_ray_torch_pandas_matplotlib(tmp_path):
    """`raysweep --help` and each `raysweep SUB --help` print their own parser's help, named as called, exit 0; no
    command or an unknown one exits 2; none of it imports Ray, torch, pandas or matplotlib."""
    code = (
        "import sys\nfrom sweeps.cli import main, SUBCOMMANDS\n"
        "for argv in ([], ['gird'], ['--version'], ['--help'], *([name, '--help'] for name in SUBCOMMANDS)):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        print('exit', *argv[:1], e.code)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "[]", lines[-1]
    exits = [line for line in lines if line.startswith("exit")]
    assert exits == [
        "exit 2",
        "exit gird 2",
        "exit --version 0",
        "exit --help 0",
        *(f"exit {name} 0" for name in cli.SUBCOMMANDS),
    ]
    assert re.search(r"^raysweep (\d+\.\d+\.\d+|unknown)$", proc.stdout, re.M)
    assert "invalid choice: 'gird'" in proc.stderr
    for name in cli.SUBCOMMANDS:
        assert f"usage: raysweep {name} " in proc.stdout, name
    assert "usage: raysweep [-h] [--version] COMMAND" in proc.stdout


def test_a_subcommands_usage_error_is_its_scripts_naming_the_subcommand(tmp_path):
    """`raysweep grid` is `sweeps/noise_grid.py`'s parser and main: the same one-line error and exit code 2."""
    script = [sys.executable, "-c", "import sys; from sweeps.cli import main; main(sys.argv[1:])"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad_flag = subprocess.run([*script, "grid", "--noise-rate-list", "0.2"], cwd=tmp_path, env=env, capture_output=True)
    assert bad_flag.returncode == 2
    assert bad_flag.stderr.decode().strip() == (
        "error: unrecognized arguments: --noise-rate-list 0.2 (see raysweep grid --help)"
    )
    bad_value = subprocess.run([*script, "run", "--seeds", "0", "--", "x"], cwd=tmp_path, env=env, capture_output=True)
    assert bad_value.returncode == 2 and bad_value.stderr.decode().startswith("error: --seeds")


def test_carried_env_keeps_the_users_variables_and_path_and_leaves_out_the_machines_rays_and_raysweeps():
    environ = {
        "PATH": "/home/u/repo/.venv/bin:/usr/bin",
        "DATA_DIR": "/data",
        "WANDB_API_KEY": "0123abcd",
        "PRICE": "5$ each",  # a lone $ is left alone by Ray
        "HOSTNAME": "login-1",
        "PWD": "/home/u/repo",
        "CUDA_VISIBLE_DEVICES": "0",
        "ROCR_VISIBLE_DEVICES": "1",
        "RAY_ADDRESS": "10.0.0.1:6379",
        "TUNE_ORIG_WORKING_DIR": "/",
        "RAYSWEEP_TRIAL_DIR": "/runs/x",
        "WANDB_DIR": "/home/u/wandb",
        "MLFLOW_TRACKING_URI": "sqlite:///m.db",
        "SLURM_JOB_ID": "7",
        "BASH_FUNC_module%%": "() {  eval $($LMOD_CMD bash $*)\n}",
        "PASSWORD": "pa$HOME",  # a secret: set as written by the setup hook, which expands nothing
        "DATA_ROOT": "$HOME/data",  # Ray would expand $HOME in env_vars with the node's
    }
    carried = job_env.carried_env(environ)
    assert carried.env_vars == {
        "DATA_DIR": "/data",
        "PATH": "/home/u/repo/.venv/bin:/usr/bin",
        "PRICE": "5$ each",
    }
    assert carried.secrets == {"PASSWORD": "pa$HOME", "WANDB_API_KEY": "0123abcd"}  # never in Ray's logged env_vars
    assert carried.rewritten == ["DATA_ROOT"]
    submitted = {job_env.JOB_CONFIG_ENV: json.dumps({"runtime_env": {"env_vars": {"DATA_DIR": "/job"}}})}
    assert "DATA_DIR" not in job_env.carried_env({**environ, **submitted}).env_vars  # `ray job submit` set it


def test_job_runtime_env_holds_the_shells_variables_on_a_cluster_and_the_hook_where_a_folder_shadows_ours(
    tmp_path, capsys
):
    """Only what the job needs (a runtime_env costs the first trials their prestarted workers): the shell's
    variables when joining a cluster (a private Ray's workers inherit them), unless --no-env; the hook when a
    folder Ray puts first on the workers' sys.path holds a package or module named like ours."""
    environ = {"DATA_DIR": "/data", "DATA_ROOT": "$HOME/data", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    plain, clashing = tmp_path / "plain", clashing_repo(tmp_path / "repo")
    plain.mkdir()
    snapshot = {"working_dir": "/runs/x/code/1"}
    assert job_env.job_runtime_env(snapshot, True, None, environ, [str(plain)]) == snapshot
    assert job_env.job_runtime_env(None, True, None, environ, [str(plain), str(ROOT)]) is None
    private = job_env.job_runtime_env(None, True, None, environ, [str(clashing)])
    assert set(private) == {"worker_process_setup_hook"} and callable(private["worker_process_setup_hook"])
    assert capsys.readouterr().err == ""
    joined = job_env.job_runtime_env(None, True, "10.0.0.1:6379", environ, [str(plain)])
    assert joined["env_vars"] == {"DATA_DIR": "/data"} and "s3cr3t" not in repr(joined)
    assert "not carried to the trials: DATA_ROOT" in capsys.readouterr().err
    saved = os.environ.pop("AWS_SECRET_ACCESS_KEY", None)
    try:
        joined["worker_process_setup_hook"]()  # what Ray runs in each worker before its first task
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    finally:
        os.environ.pop("AWS_SECRET_ACCESS_KEY")
        if saved is not None:
            os.environ["AWS_SECRET_ACCESS_KEY"] = saved
    assert job_env.job_runtime_env(None, False, "10.0.0.1:6379", environ, [str(plain)]) is None  # --no-env
    assert job_env.job_runtime_env(None, False, "ray://10.0.0.1:10001", environ, [str(clashing)]) is None
    (plain / "analysis.py").write_text("")  # a module shadows as a package does
    assert job_env.shadowing([str(plain), str(clashing), str(ROOT)]) == [str(plain), str(clashing)]


def test_no_env_flag_reaches_the_run_options():
    from sweeps import noise_grid
    from sweeps.engine import run_flags

    assert run_flags.run_options(noise_grid.parse_args([])).carry_env is True
    assert run_flags.run_options(noise_grid.parse_args(["--no-env"])).carry_env is False


def test_worker_hook_unpickles_without_our_packages_then_loads_ours_before_the_repos(tmp_path):
    """Ray pickles the setup hook by value: a worker whose first `sys.path` entry is the user's repository (Ray puts
    the driver's folder there) unpickles it without importing ours, and after it imports ours, not the repo's."""
    from ray import cloudpickle

    repo = clashing_repo(tmp_path / "repo")
    code = (
        "import pickle, sys\n"
        "hook = pickle.loads(sys.stdin.buffer.read())\n"
        "print(sorted({'sweeps', 'trainables', 'analysis'} & set(sys.modules)))\n"
        "try:\n    import trainables\nexcept ImportError as e:\n    print('before the hook:', e)\n"
        "hook()\n"
        "import trainables.config, analysis, sweeps.engine\n"
        "print(trainables.config.__file__, analysis.__file__, sweeps.engine.__file__, sep='\\n')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo,  # `python -c` puts the current folder first on sys.path, as Ray does in a worker
        input=cloudpickle.dumps(job_env.packages_first_hook(str(ROOT))),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    lines = proc.stdout.decode().splitlines()
    assert lines[:2] == ["[]", "before the hook: the repo's own trainables package"]
    assert lines[2:] == [
        str(ROOT / "trainables" / "config.py"),
        str(ROOT / "analysis" / "__init__.py"),
        str(ROOT / "sweeps" / "engine" / "__init__.py"),
    ]


def test_launch_lines_of_a_command_name_the_program_this_shells_path_resolves(tmp_path, monkeypatch):
    """`raysweep run`'s and `raysweep search`'s first line say which `python` the trials will run (the
    shell's PATH reaches them); a program given by path is shown as it is."""
    import types

    from sweeps import lr_search
    from sweeps.engine.command_sweep import command_template

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    plan = types.SimpleNamespace(todo=[{}, {}], reused={})
    line = command_template.launch_line(["python", "train.py", "--lr", "{lr}"], plan, "output")
    assert line.startswith(f"command: python train.py --lr '{{lr}}' (python = {bin_dir / 'python'}); 2 to run")
    assert job_env.command_text(["./train.sh", "{lr}"]) == "./train.sh '{lr}'"  # by path: as it is
    assert job_env.command_text(["{program}", "x"]) == "'{program}' x"  # chosen per trial
    args = lr_search.parse_args(["--num-samples", "2", "--", "python", "train.py", "--lr", "{lr}"])
    assert lr_search.launch_line(args, None).endswith(
        f"; command: python train.py --lr '{{lr}}' (python = {bin_dir / 'python'})"
    )


def test_tune_no_longer_copies_the_drivers_credentials_into_its_trials_logged_env_vars(monkeypatch):
    """Tune puts the driver's AWS_* credentials in every trial actor's runtime_env env_vars, which Ray's runtime
    env agent logs (issue 55): raysweep takes them off Tune's list and carries them itself (the setup hook)."""
    from trainables import ray_private

    copies = ray_private.tune_env_copies()
    saved = set(copies)
    try:
        assert "AWS_SECRET_ACCESS_KEY" in copies or "AWS_SECRET_ACCESS_KEY" in ray_private._KEPT_FROM_TUNE
        kept_out = ray_private.stop_tune_copying_secrets(job_env.SECRET_NAME)
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} <= set(kept_out)
        assert not set(kept_out) & copies
        assert ray_private.stop_tune_copying_secrets(job_env.SECRET_NAME) == kept_out  # idempotent
    finally:
        copies.clear()
        copies.update(saved)
    carried = job_env.job_runtime_env(None, False, "10.0.0.1:6379", {"AWS_SECRET_ACCESS_KEY": "s3cr3t"}, [], kept_out)
    assert "env_vars" not in carried and callable(carried["worker_process_setup_hook"])  # --no-env: still carried
