"""`python -m analysis EXP --status`: a sweep's status from its folder, from another shell (issue 21)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.status import exit_code, format_status, read_status, resume_command, watch
from tests.helpers.analysis_fixtures import T0, trial_spec, write_experiment
from tests.helpers.processes import wait_until
from tests.helpers.sweep_status import ENV, record, rows, small_sweep

ROOT = Path(__file__).resolve().parents[2]


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_counts_running_trial_best_and_live_driver(tmp_path):
    experiment = small_sweep(tmp_path, record(os.getpid()))
    report = read_status(experiment, now=T0 + 20)
    s = report["status"]
    assert (s["finished"], s["diverged"], s["errored"], s["running"], s["pending"], s["total"]) == (2, 1, 1, 1, 3, 8)
    assert s["best"] == (pytest.approx(0.97), "sym_0.2_seed4")  # the running trial leads
    lines = format_status(report, now=time.time())
    assert lines[0].startswith(
        "[0:00:20] 8 trials: 1 running, 3 pending, 2 finished, 1 errored, 1 diverged | "
        "best val/acc 97.00% (sym_0.2_seed4)"
    )
    assert "sym_0.2_seed4  epoch 2/5  val/acc 97.00%" in lines[1] and lines[1].endswith("GPU 1")
    assert lines[2].strip() == "sym_0.2_seed4:INFO | [GPU 1 | pid 7] Epoch [2/5] | Loss 0.5"  # its last log line
    assert lines[3].startswith(f"driver: alive on {socket.gethostname()}, pid {os.getpid()}")
    assert exit_code(report) == 0


def test_newer_results_than_the_state_snapshot_are_read_from_the_running_trial(tmp_path):
    experiment = small_sweep(tmp_path, None)
    result = next(experiment.glob("train_abcde_00004_*")) / "result.json"
    last = json.loads(result.read_text().splitlines()[-1])
    with result.open("a") as f:
        f.write(json.dumps({**last, "epoch": 3, "val/acc": 0.99, "training_iteration": 3}) + "\n")
        f.write('{"epoch": 4, "val/acc": 0.3')  # being written: left out
    report = read_status(experiment)
    assert report["status"]["running_trials"][0][1]["epoch"] == 3
    assert report["status"]["best"] == (0.99, "sym_0.2_seed4")
    assert report["driver_alive"] is None
    assert format_status(report)[-1].startswith("driver: unknown")
    assert exit_code(report) == 0


def test_an_extended_grid_counts_the_cells_of_every_run(tmp_path):
    """`--seeds 2` after a finished grid: the new run's state file lists only its own trials; the
    finished cells, listed in the first run's file, are done, not running."""
    config = lambda seed: {"noise_rate": 0.2, "seed": seed, "epochs": 5}  # noqa: E731
    first = write_experiment(tmp_path / "a", "grid", [trial_spec("sym_0.2_seed0", config(0), rows(5, 0.80))])
    second = write_experiment(
        tmp_path / "b",
        "grid",
        [trial_spec("sym_0.2_seed1", config(1), rows(2, 0.70), status="RUNNING", trial_id="fghij_00000")],
    )
    for path in second.iterdir():
        if path.name.startswith("train_"):
            path.rename(first / path.name)
    (second / next(second.glob("experiment_state-*.json")).name).rename(
        first / "experiment_state-2026-01-02_00-00-00.json"
    )
    status = read_status(first, now=T0 + 20)["status"]
    assert (status["finished"], status["running"], status["total"]) == (1, 1, 2)
    assert [name for name, _, _ in status["running_trials"]] == ["sym_0.2_seed1"]
    assert status["best"] == (pytest.approx(0.85), "sym_0.2_seed0")


@pytest.mark.parametrize(
    "driver,heartbeat_age_s,alive,says",
    [
        (dict(ended=T0, exit_code=0), 0, False, "driver: finished at"),
        (dict(host="elsewhere"), 5, True, "driver: alive on elsewhere"),
        (dict(host="elsewhere"), 600, False, "driver: gone (was on elsewhere"),
    ],
)
def test_driver_on_another_host_by_heartbeat_and_an_ended_driver(tmp_path, driver, heartbeat_age_s, alive, says):
    # the heartbeat's age is taken when the test runs, not when pytest collects it (a long suite in between)
    report = read_status(small_sweep(tmp_path, record(0, heartbeat=time.time() - heartbeat_age_s, **driver)))
    assert report["driver_alive"] is alive
    assert any(line.startswith(says) for line in format_status(report))
    assert exit_code(report) == (0 if alive else 1)  # trials are left: a stopped sweep needs --resume


def test_dead_driver_with_trials_left_says_resume_and_exits_1(tmp_path):
    experiment = small_sweep(tmp_path, record(dead_pid()))
    result = subprocess.run(
        [sys.executable, "-m", "analysis", str(experiment), "--status"],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "driver: gone (was on" in result.stdout
    assert "4 trial(s) left: continue with: `python sweeps/noise_grid.py --seeds 8 --resume`" in result.stdout


def test_a_report_its_writer_left_unfinished_is_said_with_the_command_that_rebuilds_it(tmp_path):
    experiment = small_sweep(tmp_path, record(dead_pid(), ended=time.time(), exit_code=0))
    assert not any("report" in line for line in format_status(read_status(experiment)))
    (experiment / "report.writing").mkdir()  # the driver was killed while writing its report
    lines = format_status(read_status(experiment))
    assert lines[-2] == (
        "  report: not finished (its writer was stopped while writing it; report.writing/ holds the part written): "
        f"rebuild it with `python -m analysis {experiment}`"
    )

    spaced = small_sweep(tmp_path / "Drive's runs", record(dead_pid(), ended=time.time(), exit_code=0))
    (spaced / "report.writing").mkdir()
    command = format_status(read_status(spaced))[-2].split("`")[1]  # pasted into a shell, it names the folder
    assert shlex.split(command) == ["python", "-m", "analysis", str(spaced)], command


def test_watch_prints_again_until_the_driver_ends(tmp_path):
    import io
    import threading

    experiment = small_sweep(tmp_path, record(os.getpid()))
    stream = io.StringIO()
    blocks = lambda: stream.getvalue().count("driver: ")  # noqa: E731
    ender = threading.Thread(
        target=lambda: (
            wait_until(lambda: blocks() >= 2, 30)
            and (experiment / "driver.json").write_text(json.dumps(record(os.getpid(), ended=time.time(), exit_code=0)))
        )
    )
    ender.start()
    assert watch(experiment, 0.1, stream) == 1  # ended with trials left: --resume
    ender.join()
    out = stream.getvalue()
    assert out.count("driver: alive on") >= 2 and out.count("driver: finished at") == 1
    assert out.rstrip().endswith("--seeds 8 --resume` (add --retry-errored to run its 1 errored trial(s) again too)")


def test_status_of_an_experiment_on_object_storage(tmp_path):
    """The same block from a URI (fsspec's in-memory filesystem stands in for s3://)."""
    fsspec = pytest.importorskip("fsspec")
    experiment = small_sweep(tmp_path, record(dead_pid()))
    memory = fsspec.filesystem("memory")
    for file in experiment.rglob("*"):
        if file.is_file():
            memory.pipe(f"/status-exp/{file.relative_to(experiment).as_posix()}", file.read_bytes())
    local, remote = read_status(experiment, now=T0 + 20), read_status("memory://status-exp", now=T0 + 20)
    assert remote["where"] == "memory:///status-exp"
    assert format_status(remote, now=T0) == format_status(local, now=T0)  # log line and driver record included
    assert remote["driver_alive"] is False and exit_code(remote) == 1


def test_a_sweep_killed_before_tunes_first_snapshot_has_only_its_driver_record(tmp_path):
    experiment = tmp_path / "early"
    experiment.mkdir()
    (experiment / "driver.json").write_text(json.dumps(record(dead_pid())))
    report = read_status(experiment)
    assert (report["status"]["total"], report["left"], report["driver_alive"]) == (0, 0, False)
    assert format_status(report)[-1].startswith("driver: gone (was on")
    (experiment / "raysweep.json").write_text(
        json.dumps({"metric": "val/acc", "mode": "max", "total_trials": 12, "argv": ["sweeps/noise_grid.py"]})
    )
    report = read_status(experiment)
    assert (report["status"]["not_run"], report["left"], exit_code(report)) == (12, 12, 1)  # its driver is gone
    assert format_status(report)[-1] == (
        "  12 trial(s) left, none saved yet: start the sweep again with `python sweeps/noise_grid.py`"
    )  # --resume needs Tune's tuner.pkl


def test_resume_command_keeps_the_sweeps_own_flags():
    assert (
        resume_command({"argv": ["sweeps/run_command.py", "--name", "a b", "--resume"]})
        == "python sweeps/run_command.py --name 'a b' --resume"  # a sweep recorded before its interpreter was
    )
    assert resume_command(None) == "its command line and --resume"
    assert (
        resume_command({"argv": ["sweeps/run_command.py", "--resume"]}, resume=False) == "python sweeps/run_command.py"
    )


def test_a_sweep_the_raysweep_command_launched_resumes_by_its_absolute_path_whatever_the_path(tmp_path, monkeypatch):
    program = tmp_path / "venv" / "bin" / "raysweep"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    launch = {"argv": [str(program), "run", "--axis", "lr=0.1,0.01", "--", "python", "train.py", "{lr}"]}
    for path in ("/usr/bin:/bin", f"{program.parent}:/usr/bin:/bin"):  # a new shell, without the venv; the venv's
        monkeypatch.setenv("PATH", path)
        assert resume_command(launch) == f"{program} run --axis lr=0.1,0.01 --resume -- python train.py {{lr}}"
    assert resume_command(launch, retry_errored=True).endswith(" --resume --retry-errored -- python train.py {lr}")


def test_resume_command_runs_the_recorded_interpreter_with_resume_before_the_command_and_placeholders_unquoted():
    launch = {
        "python": "/opt/my env/bin/python",
        "argv": ["sweeps/run_command.py", "--axis", "lr=0.1,0.01", "--", "python", "main.py", "--lr", "{lr}"]
        + ["--save", "{trial_dir}/model.pt", "--resume", "{trial_dir}/ckpt", "--tag", "{a,b}", "it's"],
    }
    assert resume_command(launch) == (
        "'/opt/my env/bin/python' sweeps/run_command.py --axis lr=0.1,0.01 --resume -- python main.py --lr {lr} "
        "--save {trial_dir}/model.pt --resume {trial_dir}/ckpt --tag '{a,b}' 'it'\"'\"'s'"
    )  # the script's own --resume stays after `--`; `{a,b}` would be brace-expanded: quoted
    assert shlex.split(resume_command(launch))[-12:] == launch["argv"][-12:]  # the shell reads back each word


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--status", "--watch", "0"], "--watch=0 must be > 0 seconds"),
        (["OTHER", "--status"], "--status takes one experiment, not 2"),
    ],
)
def test_bad_status_flags_are_one_line_exit_2(tmp_path, argv, match):
    experiment = small_sweep(tmp_path, None)
    argv = [str(experiment) if a == "OTHER" else a for a in argv]
    result = subprocess.run(
        [sys.executable, "-m", "analysis", str(experiment), *argv],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and match in result.stderr


def test_not_an_experiment_is_one_line_exit_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "analysis", str(tmp_path), "--status"],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
