"""Fault injection: killed workers and drivers, raising and diverging trials, torn and malicious
checkpoints, extending a finished grid, bad flags, and the dashboard's bind address."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from analysis.status import read_status
from sweeps import noise_grid
from tests.helpers.processes import wait_for, wait_until
from tests.helpers.trial_results import results_of
from trainables import train_epochs

ROOT = Path(__file__).resolve().parents[2]
DIVERGING = {"lr": 10.0, "grad_clip": 0.0, "momentum": 0.99}  # blows up within two epochs on digits


# --- Ray: a killed worker, a raising trial, a diverging trial in one sweep -----------------------


@pytest.mark.slow
def test_killed_raising_and_diverging_trials_in_one_sweep(ray_gpus, tmp_path, monkeypatch, capsys):
    """(a) sym_0.2 is SIGKILLed in epoch 3 on its first attempt, (c) sym_0.3 always raises,
    (d) sym_0.4 diverges; sym_0.1 is healthy. --max-failures 1: two attempts each."""
    from ray import tune

    from trainables import train_classifier

    marker = tmp_path / "killed_once"

    def faulty_trainable(config, data=None):  # pickled by value into the workers (a closure)
        rate = config["noise_rate"]
        if rate == 0.3:
            raise RuntimeError("injected fault: this trial always raises")
        if rate == 0.4:
            config = {**config, **DIVERGING}
        if rate == 0.2 and not marker.exists():
            marker.touch()
            real_report = tune.report

            def report(metrics, checkpoint=None):
                real_report(metrics, checkpoint=checkpoint)
                if metrics["epoch"] == 2:  # kill this worker process while it trains epoch 3
                    threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGKILL)).start()

            tune.report = report
        return train_classifier(config, data)

    monkeypatch.setattr("trainables.trial.train_classifier", faulty_trainable)  # what the sweep imports
    code = noise_grid.main(
        [
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.1,0.2,0.3,0.4",
            "--epochs",
            "6",
            "--max-failures",
            "1",
            "--gpus-per-trial",
            "0",
            "--no-report",
            "--storage-path",
            str(tmp_path),
            "--name",
            "faults",
        ]
    )
    out = capsys.readouterr().out
    experiment = tmp_path / "faults"
    assert code == 1  # a trial ended in error

    healthy = results_of(experiment / "sym_0.1_seed0")
    assert [r["epoch"] for r in healthy] == [1, 2, 3, 4, 5, 6] and not (
        experiment / "sym_0.1_seed0" / "error.txt"
    ).exists()

    killed = results_of(experiment / "sym_0.2_seed0")
    epochs = [r["epoch"] for r in killed]  # a result row written as the worker died may be lost; no epoch twice
    assert marker.exists() and epochs[-1] == 6 and all(b > a for a, b in zip(epochs, epochs[1:]))
    assert len({r["pid"] for r in killed}) >= 2  # the later epochs ran in a new worker, resumed from a checkpoint
    torch.set_num_threads(1)  # as in a 1-CPU Ray worker, so the floats match bit for bit
    reference = list(train_epochs({"noise_type": "sym", "noise_rate": 0.2, "seed": 0, "epochs": 6}))[-1][0]
    for key in ("train/loss", "val/acc", "val/loss", "test/acc"):
        assert killed[-1][key] == pytest.approx(reference[key], rel=1e-6), key

    error_file = experiment / "sym_0.3_seed0" / "error.txt"
    assert error_file.read_text().count("Failure # ") == 2  # max_failures + 1 attempts
    assert (
        "error: trial sym_0.3_seed0 failed: RuntimeError: injected fault: this trial always raises; "
        f"error file: {error_file}" in out
    )

    diverged = results_of(experiment / "sym_0.4_seed0")[-1]
    assert diverged["diverged"] is True and "val/acc" not in diverged
    dump = json.loads((experiment / "sym_0.4_seed0" / "divergence.json").read_text())
    assert dump["gradients"] and dump["step"] == diverged["diverged/step"]
    assert "diverged (not ranked): sym_0.4_seed0" in out
    # The table counts the errored (0.3) and diverged (0.4) trials but shows no value for them.
    table = out[out.index("test/acc (%)") : out.index("report:")].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[2:6]}
    assert float(rows["0.1"][0]) > 50 and rows["0.1"][-1] == "(1)"
    assert float(rows["0.2"][0]) > 50 and rows["0.2"][-1] == "(1)"
    assert rows["0.3"] == ["errored"] and rows["0.4"] == ["diverged"]
    assert "1 errored, 1 diverged" in out


# --- Ray: the driver killed three times, resumed each time; then the grid extended --------------


def run_driver(argv: list[str], kill_after: float | None, experiment: Path) -> None:
    """Run a sweep driver; with `kill_after`, SIGKILL it that many seconds after its experiment state
    first exists (else it must exit 0)."""
    proc = subprocess.Popen(
        [sys.executable, "sweeps/noise_grid.py", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    if kill_after is not None:
        before = set(experiment.glob("experiment_state-*.json"))
        saved = lambda: proc.poll() is not None or set(experiment.glob("experiment_state-*.json")) - before  # noqa: E731
        wait_for(saved, 300, "a new experiment state", every_s=0.05)
        time.sleep(kill_after)
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=300)
    reader.join(timeout=10)
    assert kill_after is not None or proc.returncode == 0, "".join(lines)[-3000:]


@pytest.mark.slow
def test_driver_killed_three_times_resumes_and_extends(ray_gpus, tmp_path, capsys):
    """(b) Every trial completes exactly once and never redoes an epoch. The drivers join the test's Ray
    (--address) so a restart costs a driver, not a whole cluster. (What the kills cost in time is a speed:
    not measured here.)"""
    address = ray_gpus.get_runtime_context().gcs_address
    grid = [
        "--noise-types",
        "sym",
        "--noise-rates",
        "0.1,0.2,0.3",
        "--epochs",
        "30",
        "--gpus-per-trial",
        "0",
        "--address",
        address,
        "--no-report",
        "--storage-path",
        str(tmp_path),
    ]
    rng = random.Random(0)
    experiment = tmp_path / "killed"
    for attempt in range(4):
        kill_after = rng.uniform(0.5, 2.5) if attempt < 3 else None
        run_driver([*grid, "--name", "killed", *(["--resume"] if attempt else [])], kill_after, experiment)

    trials = sorted(p.name for p in experiment.iterdir() if (p / "result.json").exists())
    assert trials == [f"sym_{r}_seed0" for r in ("0.1", "0.2", "0.3")]  # one folder per cell
    for name in trials:
        epochs = [r["epoch"] for r in results_of(experiment / name)]
        assert epochs[-1] == 30 and epochs.count(30) == 1, (name, epochs)  # completed exactly once
        assert all(b > a for a, b in zip(epochs, epochs[1:])), (name, epochs)  # never went backwards

    # Extend the finished grid by one noise rate: only the new cell runs (in-process, same Ray).
    code = noise_grid.main([*grid[:3], "0.1,0.2,0.3,0.4", *grid[4:], "--name", "killed"])
    out = capsys.readouterr().out
    assert code == 0 and "1 to run, 3 reused" in out and "3 finished trial(s) reused" in out
    assert len([p for p in experiment.iterdir() if (p / "result.json").exists()]) == 4
    table = out[out.index("test/acc (%)") : out.index("results:")].splitlines()
    assert [line.split()[0] for line in table[2:6]] == ["0.1", "0.2", "0.3", "0.4"]  # every cell, old and new
    assert all(line.split()[-1] == "(1)" for line in table[2:6])


@pytest.mark.slow
def test_cell_finished_just_before_the_kill_is_not_run_again_on_resume(ray_gpus, tmp_path):
    """The driver is SIGKILLed right after a trial's last epoch, likely before Tune's next snapshot
    of its experiment state, and that state is then cut mid-file; on --resume (from the last whole copy of
    the state) that trial trains nothing again and the other completes. Cut again once the sweep finished,
    the state hides no result: status counts both trials finished and a --resume runs nothing."""
    address = ray_gpus.get_runtime_context().gcs_address
    argv = [
        "sweeps/noise_grid.py",
        "--noise-types",
        "sym",
        "--noise-rates",
        "0.1,0.2",
        "--epochs",
        "4",
        "--max-concurrent",
        "1",
        "--gpus-per-trial",
        "0",
        "--address",
        address,
        "--no-report",
        "--storage-path",
        str(tmp_path),
        "--name",
        "window",
        "--quiet",
    ]
    experiment = tmp_path / "window"
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240

    def a_finished_trial() -> Path | None:
        assert proc.poll() is None, "the sweep ended before a trial finished"
        trials = [t for t in experiment.glob("sym_*") if (t / "result.json").exists()]
        return next((t for t in trials if (rows := results_of(t)) and rows[-1].get("epoch") == 4), None)

    finished = wait_for(a_finished_trial, 240, "a trial that finished", every_s=0.02)
    # The trial's `stdout` reaches storage by Tune's background artifact sync, after its last result:
    # the test counts its epoch lines, so it waits (deadline) until all 4 are there, then kills.
    stdout = finished / "stdout"

    def never() -> str:
        text = stdout.read_text() if stdout.exists() else "absent"
        return f"the trial's stdout never reached storage with 4 epoch lines: {text}"

    def four_epoch_lines() -> bool:
        assert proc.poll() is None, never()
        return stdout.read_text().count("Epoch [") == 4

    assert wait_until(four_epoch_lines, deadline - time.monotonic(), every_s=0.02), never()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    rows_before = results_of(finished)
    log_before = (finished / "stdout").read_text()
    state = cut_state(experiment)  # and its Tune state torn, as a full disk or a copy cut short leaves it

    resumed = subprocess.run([sys.executable, *argv, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"warning: {state} is torn (cut mid-file); resuming from its last whole copy" in resumed.stderr
    assert [r["epoch"] for r in results_of(finished)] == [r["epoch"] for r in rows_before] == [1, 2, 3, 4]
    assert (finished / "stdout").read_text().count("Epoch [") == log_before.count("Epoch [") == 4  # not trained again
    # The other cell completed once, in one folder. (Started after Tune's last save, no state lists it: the
    # resumed trial of its config continues in its folder, `trial_folders.note_resume`; its log then holds the
    # epochs the killed driver ran past its newest checkpoint twice.)
    others = [t for t in experiment.glob("sym_*") if t != finished and (t / "result.json").exists() and results_of(t)]
    assert len(others) == 1 and [r["epoch"] for r in results_of(others[0])] == [1, 2, 3, 4], others
    logged = {trial: (trial / "stdout").read_text().count("Epoch [") for trial in (finished, others[0])}
    # The finished sweep's state torn too: status counts both trials finished, a --resume runs nothing.
    cut_state(experiment)
    status = read_status(str(experiment))["status"]
    assert (status["finished"], status["interrupted"]) == (2, 0), status
    again = subprocess.run([sys.executable, *argv, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 to run, 2 reused" in again.stdout or "nothing left to run" in again.stdout, again.stdout[-3000:]
    for trial in (finished, others[0]):  # neither trained again
        assert [r["epoch"] for r in results_of(trial)] == [1, 2, 3, 4]
        assert (trial / "stdout").read_text().count("Epoch [") == logged[trial]


def cut_state(experiment: Path) -> Path:
    """Cut the newest `experiment_state-*.json` of `experiment` to half its length; return it."""
    state = max(experiment.glob("experiment_state-*.json"))
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    return state


# --- a full disk: a 4 MB tmpfs as the storage folder ------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (root where mounts are allowed; else the test is skipped: tests/unit/test_disk_full.py
    injects ENOSPC at each write path instead); `grow()` frees space by making it 60 MiB."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    grow = lambda: subprocess.run(["mount", "-o", "remount,size=60m", str(folder)], check=True)  # noqa: E731
    yield folder, grow
    subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_its_continue_command_reruns_no_finished_trial(ray_gpus, small_disk):
    """3 trials of 6 epochs, one at a time, keep 3 checkpoints of 0.7 MB each (6.3 MB in all): the 4 MiB fill up
    mid-sweep, after the first trial (two at once filled it before either ended, at load 2.6). The sweep ends with
    one line naming the folder, exit 1, driver.json closed; no history left cut; once space is freed the printed
    command finishes every trial, and one that had finished trains nothing again."""
    folder, grow = small_disk
    grid = ["--noise-types", "sym", "--noise-rates", "0.1,0.2,0.3", "--epochs", "6", "--gpus-per-trial", "0"]
    grid += ["--max-concurrent", "1"]
    address = ray_gpus.get_runtime_context().gcs_address
    argv = ["sweeps/noise_grid.py", *grid, "--address", address, "--storage-path", str(folder), "--name", "full"]
    full = subprocess.run(
        [sys.executable, *argv, "--quiet", "--no-report"], cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    lines = [line for line in full.stderr.splitlines() if line.startswith("error: the disk of the storage folder")]
    assert full.returncode == 1 and len(lines) == 1, full.stdout[-3000:] + full.stderr[-3000:]
    assert f"{folder} is full" in lines[0] and "EOFError" not in full.stderr
    experiment = folder / "full"
    assert json.loads((experiment / "driver.json").read_text())["exit_code"] == 1
    histories = {t.name: results_of(t) for t in experiment.glob("sym_*") if (t / "result.json").exists()}  # whole
    logs = {t.name: (t / "stdout").read_text() for t in experiment.glob("sym_*") if (t / "stdout").exists()}
    # trained to its end before the disk filled (its last rows may not have reached the full disk)
    done = [
        name for name, text in logs.items() if "Epoch [6/6]" in text and not (experiment / name / "error.txt").exists()
    ]
    assert done, logs  # the first trials fit: 4 MiB hold one trial's checkpoints
    for name in done:  # its history was not emptied by a later copy
        assert histories.get(name), name

    grow()
    command = lines[0].split("continue with: ", 1)[1]
    assert command.endswith("--resume --retry-errored")
    again = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for name in done:  # what it wrote is kept, and no epoch of it ran twice
        rows = results_of(experiment / name)
        assert rows[: len(histories[name])] == histories[name] and [r["epoch"] for r in rows] == [1, 2, 3, 4, 5, 6]
    status = read_status(str(experiment))["status"]
    assert status["finished"] == 3 and status["errored"] == 0, status
