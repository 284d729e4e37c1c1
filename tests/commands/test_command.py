"""Command sweeps: checking a user's command before Ray starts, and running it as Tune trials
(`trainables/command/runner.py`) with tests/scripts/train_script.py, a PyTorch script that knows nothing of Ray."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from analysis.reading.load import load_history, load_trials
from tests.helpers.processes import wait_until
from trainables.command.gpu_sharing import CAP_HOOK_DIR

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, "tests/scripts/train_script.py"]  # relative: run with cwd=ROOT, like a user's sweep


# --- process clean-up without Tune: the worker itself SIGKILLed ---------------------------------


def alive(pids) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_killed_worker_takes_the_command_and_its_grandchildren_with_it(tmp_path):
    """A stand-in worker starts a command (which forks a grandchild) as train_command does; then the
    worker and its direct children are SIGKILLed, as Ray does when a worker exits."""
    worker_code = (
        "import sys, time\n"
        "from trainables.command.process import start_command\n"
        "from trainables.command.watchdog import start_watchdog\n"
        "proc = start_command(['sh', '-c', 'sleep 600 & sleep 600'], {'PATH': '/usr/bin:/bin'})\n"
        "start_watchdog(proc.pid, 1.0)\n"
        "print(proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", worker_code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    leader = int(worker.stdout.readline())
    assert wait_until(lambda: len([p for p in psutil.process_iter() if _pgid(p) == leader]) == 4)  # shim, sh, 2 sleeps
    group = [p.pid for p in psutil.process_iter() if _pgid(p) == leader]
    direct = psutil.Process(worker.pid).children()
    assert [p.pid for p in direct] == [leader]  # the shim; the detached watchdog is missed by Ray's kill of children
    for process in [*direct, psutil.Process(worker.pid)]:
        process.send_signal(signal.SIGKILL)
    worker.wait()
    assert wait_until(lambda: not alive(group)), f"survivors: {alive(group)}"


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


# --- Ray Tune sweeps of the script ------------------------------------------------------------


def tune_command(
    tmp_path,
    name: str,
    template: list[str],
    param_space: dict,
    *,
    resources=None,
    tune_config=None,
    max_failures: int = 0,
    stop=None,
    **kwargs,
):
    """Run a sweep of `template` with the command trainable (the run settings of `sweep_run_config`)."""
    from ray import tune
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig, SyncConfig, Tuner

    from trainables.command.runner import train_command

    trainable = tune.with_parameters(train_command, template=template, cwd=str(ROOT), grace_period_s=2.0, **kwargs)
    tuner = Tuner(
        tune.with_resources(trainable, resources or {"cpu": 0.5, "gpu": 0.5}),
        param_space=param_space,
        tune_config=tune_config,
        run_config=RunConfig(
            storage_path=str(tmp_path),
            name=name,
            log_to_file=True,
            verbose=0,
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),  # as sweeps/run_command.py:fit_grid
            sync_config=SyncConfig(sync_artifacts=True),
            stop=stop,
        ),
    )
    return tuner.fit()


def rows(result) -> list[dict]:
    path = Path(result.path) / "result.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def envs(result) -> list[dict]:
    """What each run of the script saw, oldest first (one file per process)."""
    found = [json.loads(p.read_text()) for p in (Path(result.path) / "work").glob("env_*.json")]
    return sorted(found, key=lambda e: e["started"])


@pytest.mark.slow
def test_grid_of_two_axes_and_two_seeds_at_half_a_gpu(ray_gpus, tmp_path):
    from ray import tune

    template = [
        *SCRIPT,
        "--noise-rate",
        "{noise_rate}",
        "--noise-type",
        "{noise_type}",
        "--seed",
        "{seed}",
        "--epochs",
        "3",
        "--out",
        "{trial_dir}",
    ]
    grid = tune_command(
        tmp_path,
        "grid",
        template,
        {
            "noise_rate": tune.grid_search([0.0, 0.4]),
            "noise_type": tune.grid_search(["sym"]),
            "seed": tune.grid_search([0, 1]),
        },
    )
    assert len(grid) == 4 and not grid.errors
    intervals = []
    for result in grid:
        assert [r["epoch"] for r in rows(result)] == [1, 2, 3]
        assert all(0.0 <= r["val_acc"] <= 1.0 and r["loss"] > 0 for r in rows(result))
        trial = Path(result.path)
        (env,) = envs(result)  # one run of the script per trial
        config = result.config
        assert env["argv"][:2] == ["--noise-rate", str(config["noise_rate"])]  # 0.0 and 0.4, plainly
        assert env["cwd"] == str(ROOT)
        assert env["RAYSWEEP_NOISE_RATE"] == str(config["noise_rate"]) and env["RAYSWEEP_SEED"] == str(config["seed"])
        assert env["RAYSWEEP_NOISE_TYPE"] == "sym"
        assert env["RAYSWEEP_TRIAL_DIR"] == str(trial / "work") and env["argv"][-1] == str(trial / "work")
        assert trial.name.startswith(env["RAYSWEEP_TRIAL_NAME"])
        assert env["RAYSWEEP_METRICS_FILE"] == str(trial / "metrics.jsonl")
        assert float(env["RAYSWEEP_GPU_MEMORY_FRACTION"]) == pytest.approx(0.45)
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(CAP_HOOK_DIR)  # the cap at CUDA start
        gpu = env["CUDA_VISIBLE_DEVICES"]
        assert gpu != "" and "," not in gpu  # one GPU id, set by Ray
        stdout = (trial / "stdout").read_text()
        assert f"{env['RAYSWEEP_TRIAL_NAME']}: GPU memory cap 0.45 of the device, set in the command's" in stdout
        assert f"{env['RAYSWEEP_TRIAL_NAME']}:OUT | [GPU {gpu} | pid {env['pid']}] epoch=3 val_acc=" in stdout
        intervals.append((gpu, env["started"], (trial / "work" / "ckpt.npz").stat().st_mtime))
    for gpu, start, _ in intervals:
        assert sum(1 for g, s, e in intervals if g == gpu and s <= start <= e) <= 2  # never three on one GPU


@pytest.mark.slow
def test_killed_command_is_retried_and_resumes_from_its_own_checkpoint(ray_gpus, tmp_path):
    template = [*SCRIPT, "--epochs", "5", "--kill-self-at-epoch", "2", "--seed", "{seed}", "--out", "{trial_dir}"]
    grid = tune_command(tmp_path, "retry", template, {"seed": 0}, max_failures=1)
    (result,) = grid
    assert result.error is None
    assert [r["epoch"] for r in rows(result)] == [1, 2, 3, 4, 5]  # once each, in order
    first, second = envs(result)
    assert first["pid"] != second["pid"]
    trial = Path(result.path)
    assert "resumed from epoch 2" in (trial / "stderr").read_text()
    assert "command exited with signal SIGKILL" in (trial / "error.txt").read_text()


@pytest.mark.slow
def test_asha_stops_the_worse_trial_and_its_process_tree_is_gone(ray_gpus, tmp_path):
    from ray import tune
    from ray.tune import TuneConfig
    from ray.tune.schedulers import ASHAScheduler

    # The noisy trial starts once the clean one has ended, so it meets the clean trial's score at each rung and is
    # cut (a fixed 3 s head start was not enough with both cores burnt: the noisy trial ran all 8 epochs).
    template = [
        *SCRIPT,
        "--noise-rate",
        "{noise_rate}",
        "--epochs",
        "8",
        "--sleep",
        "0.2",
        "--spawn-child",
        "--start-after",
        "{start_after}",
        "--touch-when-done",
        "{done}",
        "--out",
        "{trial_dir}",
    ]
    clean_done = str(tmp_path / "clean_done")
    space = {
        "noise_rate": tune.grid_search([0.0, 0.95]),
        "start_after": tune.sample_from(lambda spec: clean_done if spec.config["noise_rate"] > 0.5 else ""),
        "done": tune.sample_from(lambda spec: "" if spec.config["noise_rate"] > 0.5 else clean_done),
    }
    scheduler = ASHAScheduler(time_attr="epoch", max_t=8, grace_period=1, reduction_factor=2)
    grid = tune_command(
        tmp_path,
        "asha",
        template,
        space,
        tune_config=TuneConfig(metric="val_acc", mode="max", scheduler=scheduler, reuse_actors=True),
    )
    assert not grid.errors
    by_rate = {r.config["noise_rate"]: r for r in grid}
    assert rows(by_rate[0.0])[-1]["epoch"] == 8
    stopped = rows(by_rate[0.95])
    assert stopped[-1]["epoch"] < 8 and stopped[-1]["val_acc"] < 0.3
    work = str(Path(by_rate[0.95].path) / "work")
    assert wait_until(lambda: not marked(work)), f"survivors: {marked(work)}"


def marked(work: str) -> list[str]:
    """Command lines of live processes started for the trial whose work folder is `work`."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if work in cmdline and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_end_of_sweep_mid_epoch_ends_the_command(ray_gpus, tmp_path):
    """The sweep ends (a stopper's stop_all) while the script is inside a 120 s epoch: no result
    is due, and the command's group (a grandchild too) is gone all the same."""
    from ray import tune

    class StopOnceStarted(tune.Stopper):
        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            return any(tmp_path.glob("budget/*/work/env_*.json"))

    template = [*SCRIPT, "--epochs", "3", "--sleep", "120", "--spawn-child", "--seed", "{seed}", "--out", "{trial_dir}"]
    (result,) = tune_command(tmp_path, "budget", template, {"seed": 0}, stop=StopOnceStarted())
    work = str(Path(result.path) / "work")
    assert envs(result) and not rows(result)  # it started, and was stopped before its first result
    assert wait_until(lambda: not marked(work)), f"survivors: {marked(work)}"


@pytest.mark.slow
def test_failing_silent_diverging_and_jsonl_scripts_in_one_sweep(ray_gpus, tmp_path):
    from ray import tune

    template = [*SCRIPT, "--epochs", "3", "{variant}", "--out", "{trial_dir}"]
    variants = ["--exit-code=3", "--print-nothing", "--nan-at-epoch=2", "--report=jsonl", "--report=helper"]
    grid = tune_command(
        tmp_path, "variants", template, {"variant": tune.grid_search(variants)}, resources={"cpu": 0.4, "gpu": 0}
    )
    by = {r.config["variant"]: r for r in grid}

    failed = Path(by["--exit-code=3"].path) / "error.txt"
    text = failed.read_text()
    assert (
        "CommandFailed: command exited with exit code 3" in text
        and "RuntimeError: injected failure for the test" in text
    )
    assert [r["epoch"] for r in rows(by["--exit-code=3"])] == [1, 2, 3]  # its results still count

    silent = (Path(by["--print-nothing"].path) / "error.txt").read_text()
    assert "reported no metric: expected stdout or stderr lines naming the step" in silent and "metrics.jsonl" in silent

    diverged = by["--nan-at-epoch=2"]
    assert diverged.error is None
    history = rows(diverged)
    assert [r["epoch"] for r in history] == [1, 2] and history[-1]["diverged"] is True
    assert "val_acc" not in history[-1] and history[-1]["diverged/metrics"] == "loss"
    assert json.loads((Path(diverged.path) / "divergence.json").read_text())["non_finite_metrics"] == ["loss"]

    for variant in ("--report=jsonl", "--report=helper"):
        result = by[variant]
        assert result.error is None and [r["epoch"] for r in rows(result)] == [1, 2, 3], variant
        assert all(0 <= r["val_acc"] <= 1 for r in rows(result))
        assert "epoch=" not in (Path(result.path) / "stdout").read_text()  # nothing on stdout: the file did it


# --- sweeps/run_command.py: the script on the shared launcher -------------------------------------

RUN = [
    "--",
    sys.executable,
    "tests/scripts/train_script.py",
    "--noise-rate",
    "{noise_rate}",
    "--noise-type",
    "{noise_type}",
    "--seed",
    "{seed}",
    "--out",
    "{trial_dir}",
    "--epochs",
    "2",
]


@pytest.mark.slow
def test_command_sweep_on_half_gpus_then_extended_reuses_finished_cells(ray_gpus, tmp_path, capsys):
    """2 noise rates x 2 noise types of a plain script at 0.5 logical GPU per trial; run again with a third
    noise rate: only its 2 cells run, the 4 finished ones are reused. (One seed: a second doubles the trials
    and proves nothing more; issue 53.)"""
    from sweeps import run_command

    flags = [
        "--axis",
        "noise_type=sym,asym",
        "--seeds",
        "1",
        "--gpus-per-trial",
        "0.5",
        "--cpus-per-trial",
        "0.5",
        "--storage-path",
        str(tmp_path),
        "--quiet",
    ]
    assert run_command.main(["--axis", "noise_rate=0.2,0.4", *flags, *RUN]) == 0
    out = capsys.readouterr().out
    experiment = tmp_path / "command"
    trials = sorted(p.name for p in experiment.iterdir() if (p / "result.json").exists())
    assert trials == sorted(f"{t}_{r}_seed0" for t in ("sym", "asym") for r in ("0.2", "0.4"))
    for name in trials:
        envs = [json.loads(p.read_text()) for p in (experiment / name / "work").glob("env_*.json")]
        assert envs and envs[0]["RAYSWEEP_GPU_MEMORY_FRACTION"] == "0.45" and envs[0]["CUDA_VISIBLE_DEVICES"] in "0123"
        assert envs[0]["RAYSWEEP_TRIAL_NAME"] == name
        assert re.search(
            rf"^{name}:OUT \| \[GPU [0-3] \| pid \d+\] epoch=2 val_acc=",
            (experiment / name / "stdout").read_text(),
            re.M,
        )
    header = next(line for line in out.splitlines() if line.split()[:1] == ["noise_rate"])
    assert header.split() == ["noise_rate", "asym", "sym"]  # the table, laid out as the grid
    assert (experiment / "report" / "report.md").exists()

    assert run_command.main(["--axis", "noise_rate=0.2,0.4,0.6", *flags, *RUN]) == 0
    out = capsys.readouterr().out
    assert "2 to run, 4 reused" in out and "4 finished trial(s) reused" in out
    assert len([p for p in experiment.iterdir() if (p / "result.json").exists()]) == 6


@pytest.mark.slow
def test_a_search_over_a_script_taking_only_lr_records_only_lr_and_marks_only_asha_stops(tmp_path, sweep_env):
    """pytorch/examples mnist's output (tests/scripts/mnist_style.py, as main.py) searched by TPE and ASHA,
    one trial at a time: each trial records the `lr` the script received and nothing of the built-in
    trainable; a trial that ran its 3 epochs is finished, one that ASHA cut is `pruned by ASHA`. Each trial holds
    every CPU of the Ray it joins, so an ASHA-stopped trial's actor left idle would stop the search for good (issue
    55: Tune's actor reuse kept it, 8 minutes with nothing running); it must end within its timeout."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "main.py").write_text((ROOT / "tests" / "scripts" / "mnist_style.py").read_text())
    argv = [sys.executable, str(ROOT / "sweeps" / "lr_search.py"), "--metric", "Accuracy", "--num-samples", "4"]
    argv += ["--grace-period", "1", "--reduction-factor", "2", "--max-concurrent", "1", "--gpus-per-trial", "0"]
    argv += ["--cpus-per-trial", str(os.cpu_count())]  # all the shared head's CPUs (tests/helpers/ray_cluster.py)
    argv += ["--storage-path", str(tmp_path / "runs"), "--quiet", "--no-report"]
    argv += ["--", sys.executable, "main.py", "--epochs", "3", "--lr", "{lr}", "--sleep", "1"]  # ASHA's stop mid-run
    proc = subprocess.run(argv, cwd=repo, env=sweep_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "search over the command's placeholders: {lr} loguniform:0.0001,1; 4 configurations; ASHA max_t 3" in out
    experiment = tmp_path / "runs" / "lr_search"
    trials = sorted(p for p in experiment.iterdir() if (p / "params.json").exists())
    assert len(trials) == 4
    epochs_run = {}
    for trial in trials:
        config = json.loads((trial / "params.json").read_text())
        assert list(config) == ["lr"] and 1e-4 <= config["lr"] <= 1  # what the script received, only that
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1))
    history = load_history(str(experiment))  # with the rows a stopped command logged after Tune's stop
    names = dict(zip(*load_trials(str(experiment))[["trial_id", "trial_name"]].to_numpy().T))
    for trial_id, rows in history.groupby("trial_id"):
        assert list(rows["epoch"]) == list(range(1, len(rows) + 1))
        epochs_run[names[trial_id]] = len(rows)
    cut = sorted(name for name, n in epochs_run.items() if n < 3)
    assert cut and len(cut) < 4, epochs_run  # TPE's seeded draws, one at a time: ASHA cut some, not all
    assert f"4 trials: {4 - len(cut)} finished, {len(cut)} pruned\n" in out, (epochs_run, out[-1500:])
    for name, n in epochs_run.items():
        row = next(line for line in out.splitlines() if line.split()[1:2] == [name])  # the ten best
        assert row.split()[3:6] == ([str(n), "pruned", "by"] if n < 3 else [str(n), "finished", "1"]), row  # ended
    settings = json.loads((experiment / "raysweep.json").read_text())["settings"]
    assert settings["space"] == {"lr": "loguniform:0.0001,1"} and settings["max_t"] == 3
    assert not {"losses", "noise_rate", "batch_sizes", "weight_decay", "sce_alpha"} & set(settings)
    assert not re.search(r"noise_rate|sce_alpha|weight_decay|batch_size", out)  # nor in the final table
