"""How a trial and a sweep end, and how they are counted: a command without its metric is never done, an
interrupted sweep says so and exits 130, its printed resume command runs as printed, and the final line,
`--status`, `--status --json`, `python -m analysis --json` and the report count alike."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.command_sweeps import run_sweep
from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# --- sweeps, on the session's shared Ray ------------------------------------------------------------

HALF = """
import sys
for epoch in (1, 2):
    if sys.argv[1] == "quiet":  # a Lightning console: progress-bar postfixes, never --metric
        print(f"epoch={epoch} loss={1 / epoch:.2f} v_num=0", flush=True)
    else:
        print(f"epoch={epoch} val_acc={0.5 + epoch / 10:.2f} loss={1 / epoch:.2f}", flush=True)
"""


def analysis_cli(experiment: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [PY, "-m", "analysis", str(experiment), *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_sweep_where_half_the_trials_never_print_the_metric_exits_1_and_counts_them_alike(tmp_path, sweep_env):
    """About 40 s on 2 busy cores."""
    script = tmp_path / "half.py"
    script.write_text(HALF)
    argv = ["--axis", "variant=loud,quiet", "--", PY, str(script), "{variant}"]
    proc = run_sweep(tmp_path, *argv, env=sweep_env, report=True)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert "sweep finished: 2 trials: 0 running, 0 pending, 1 finished, 1 errored (1 no metric), 0 diverged" in out, out
    assert re.search(
        r"^error: 1 trial\(s\) ended without the sweep's metric: command exited 0 but reported no val_acc$", out, re.M
    )
    assert "  its results held loss (each step's epoch)" in out  # v_num: Lightning's logger version, no metric
    assert re.search(r"^quiet +no metric$", out, re.M), out  # the cell says why
    experiment = tmp_path / "runs" / "command"
    status = json.loads(analysis_cli(experiment, "--status", "--json").stdout)
    counts = {"finished": 1, "errored": 1, "no_metric": 1, "diverged": 0, "interrupted": 0, "not_run": 0}
    assert {k: status["counts"][k] for k in counts} == counts
    summary = json.loads(analysis_cli(experiment, "--json").stdout)
    assert {k: summary["trials"][k] for k in counts} == counts
    assert [c["why"] for c in summary["cells"] if c["key"]["variant"] == "quiet"] == ["no metric"]
    report = (experiment / "report" / "report.md").read_text()
    assert "- trials: 2 (1 finished, 1 errored (1 no metric), 0 diverged)" in report


SLOW_EPOCHS = """
import sys, time
seed = int(sys.argv[1])
for epoch in range(1, 6):
    time.sleep(0.6)
    print(f"epoch={epoch} val_acc={0.5 + epoch / 100 + seed / 1000:.3f}", flush=True)
"""


def start_driver(argv: list[str], env: dict, log: Path, shell: bool = False) -> subprocess.Popen:
    """A sweep driver in its own process group, its output to `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, shell=shell
        )


def epochs(trial: Path) -> list:
    lines = (trial / "result.json").read_text().splitlines() if (trial / "result.json").exists() else []
    return [json.loads(line).get("epoch") for line in lines if line.strip()]


def reported(experiment: Path) -> int:
    return sum(len(epochs(t)) for t in experiment.glob("seed*"))


def printed(experiment: Path) -> int:
    """The `epoch=` lines the trials' commands printed, over every attempt (`command_stdout.txt`, written live)."""
    logs = [t / "command_stdout.txt" for t in experiment.glob("seed*")]
    return sum(log.read_text().count("epoch=") for log in logs if log.exists())


@pytest.mark.slow
def test_ctrl_c_then_the_printed_command_from_a_shell_without_the_venv_then_a_kill_then_status_run_each_epoch_once(
    tmp_path, sweep_env, receiver
):
    """A command sweep launched with a venv on PATH and `python` in its command: SIGINT after the first results
    (Tune's handler) exits 130, its final line and --notify message count alike and say the interruption; its
    printed command, run in a shell whose PATH has no venv, resumes it with the launch's python (and says
    so); SIGKILL to that driver; the command `--status --json` prints finishes it, with every epoch in each
    trial's history once. Two trials of 5 epochs (a third proved nothing more). About 60 s on 2 busy cores."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_EPOCHS)
    venv = tmp_path / "venv" / "bin"  # the venv's python: this interpreter, found on PATH by its name
    venv.mkdir(parents=True)
    (venv / "python").write_text(f'#!/bin/sh\nexec {PY} "$@"\n')
    (venv / "python").chmod(0o755)
    experiment = tmp_path / "runs" / "command"
    flags = ["--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "1", "--quiet"]
    flags += ["--no-report"]
    flags += ["--notify", receiver.url]
    argv = [PY, "sweeps/run_command.py", "--axis", "seed=0,1", *flags, "--", "python", str(script), "{seed}"]
    launch_env = {**sweep_env, "PATH": f"{venv}{os.pathsep}{sweep_env['PATH']}"}  # the venv activated
    first = start_driver(argv, launch_env, tmp_path / "first.log")
    wait_for(lambda: reported(experiment) or first.poll() is not None, 240, "a first result")
    first.send_signal(signal.SIGINT)
    assert first.wait(120) == 130, (tmp_path / "first.log").read_text()[-3000:]
    out = (tmp_path / "first.log").read_text()
    assert "FileNotFoundError" not in out and "Trials did not complete" not in out, out
    line = re.search(
        r"^interrupted: (\d) of 2 trials finished((?:, \d [a-z ]+)*) \(Ctrl-C\); continue with: (.+)$", out, re.M
    )
    assert line and int(line[1]) < 2, out[-3000:]
    note = " (add your --notify URLs again, which are not recorded)"  # the URL's secret is never written
    assert line[3].endswith(note), line[3]
    command = line[3].removesuffix(note)
    recorded = [flag for flag in flags if flag not in ("--notify", receiver.url)]
    assert (
        command
        == f"{PY} sweeps/run_command.py --axis seed=0,1 {' '.join(recorded)} --resume -- python {script} {{seed}}"
    )
    [message] = receiver.messages  # the one message of the first driver, counted as its final line
    assert message["title"] == "sweep command interrupted (Ctrl-C, exit code 130)"
    assert message["message"].splitlines()[:2] == [f"{line[1]} finished, 0 errored{line[2]}", "stopped early: Ctrl-C"]
    status = json.loads(analysis_cli(experiment, "--status", "--json").stdout)
    assert status["counts"]["interrupted"] + status["counts"]["not_run"] == 2 - int(line[1]), status["counts"]
    assert status["resume_command"] == command and status["exit_code"] == 1 and status["ended_by"] == "Ctrl-C"

    new_shell = {**sweep_env, "PATH": os.pathsep.join(("/usr/bin", "/bin"))}  # no venv: another python, or none
    resumed = start_driver(command, new_shell, tmp_path / "resumed.log", shell=True)  # run as printed
    # Killed while its commands run: a line they print after the resume (each reruns its 5 epochs in 3 s), not a
    # result in the history, which the driver may copy to storage only at its end (the first driver may have
    # logged 4 epochs: the resumed one then adds the 5th alone, as it finishes; a CI run of 64f97d5)
    before = printed(experiment)
    wait_for(lambda: printed(experiment) > before or resumed.poll() is not None, 240, "a line after --resume")
    assert resumed.poll() is None, (tmp_path / "resumed.log").read_text()[-3000:]
    os.killpg(resumed.pid, signal.SIGKILL)  # the driver dies; the shared Ray ends its trials
    resumed.wait(30)
    assert f"the command's python is {venv / 'python'}, as at launch" in (tmp_path / "resumed.log").read_text()
    status = json.loads(wait_for(lambda: analysis_cli(experiment, "--status", "--json").stdout, 60, "status"))
    assert status["driver"]["state"] == "gone" and status["resume_command"] == command, status
    final = subprocess.run(
        status["resume_command"], shell=True, cwd=ROOT, env=new_shell, capture_output=True, text=True, timeout=400
    )
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert "sweep finished: 2 trials: 0 running, 0 pending, 2 finished, 0 errored, 0 diverged" in final.stdout
    for trial in sorted(experiment.glob("seed*")):
        assert epochs(trial) == [1, 2, 3, 4, 5], trial.name  # each epoch once, across the three drivers


@pytest.mark.slow
def test_ctrl_c_on_the_built_in_grid_exits_130_and_every_table_shows_the_unfinished_trials(tmp_path, sweep_env):
    """`noise_grid.py`, SIGINT to the driver after the first epoch. About 40 s on 2 busy cores."""
    experiment = tmp_path / "runs" / "grid"
    argv = [PY, "sweeps/noise_grid.py", "--smoke-test", "--epochs", "40", "--noise-rates", "0.2", "--name", "grid"]
    argv += ["--no-report", "--storage-path", str(tmp_path / "runs"), "--progress-every", "1"]
    driver = start_driver(argv, sweep_env, tmp_path / "grid.log")
    reported = lambda: any("val/acc" in f.read_text() for f in experiment.glob("*/result.json"))  # noqa: E731
    wait_for(lambda: reported() or driver.poll() is not None, 240, "a first epoch")  # Tune makes the file first
    driver.send_signal(signal.SIGINT)
    assert driver.wait(120) == 130, (tmp_path / "grid.log").read_text()[-3000:]
    out = (tmp_path / "grid.log").read_text()
    assert "FileNotFoundError" not in out and "sweep finished" not in out, out[-3000:]
    block = re.search(
        r"^\[(\S+)\] sweep interrupted: (2 trials: 0 running, 0 pending, 0 finished, .* (1|2) interrupted.*)$",
        out,
        re.M,
    )
    assert block, out
    assert re.search(r"^0\.2 +(interrupted|not run) +(interrupted|not run)$", out, re.M), out[-3000:]
    assert "best configuration: none" in out
    assert re.search(
        rf"^interrupted: 0 of 2 trials finished, .*\(Ctrl-C\); continue with: {re.escape(PY)} sweeps/noise_grid",
        out,
        re.M,
    )
    assert out.rstrip().endswith("--progress-every 1 --resume")
    status = analysis_cli(experiment, "--status")
    assert status.returncode == 1 and "exit code 130 (Ctrl-C)" in status.stdout and "--resume`" in status.stdout
    # the console's final block and --status: the same counts, epochs (done / planned: the trials left count
    # theirs) and clock (from the driver's start to its end)
    assert status.stdout.splitlines()[0] == f"[{block[1]}] {block[2]}", (status.stdout, block[0])


BUDGET = """
import pathlib, sys, time
lr, name, flag = float(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
number = int(name.split("_")[2])  # lr_search_00003_lr0.012: its place in the search
if number == 1:  # good at ASHA's first rung, then it runs on until the time budget stops it
    print("epoch=1 val_acc=0.99", flush=True)
    time.sleep(600)
elif number == 2:  # as good, and ends by itself after its 3 epochs: finished
    for epoch in (1, 2, 3):
        print(f"epoch={epoch} val_acc=0.99", flush=True)
    flag.touch()
else:  # worse, once the others have set ASHA's first rung: pruned there, long before it could print its epoch 2
    while not flag.exists():  # (a stop that came late under load let it print all 3 and end as finished)
        time.sleep(0.2)
    for epoch in (1, 2, 3):
        print(f"epoch={epoch} val_acc=0.5", flush=True)
        time.sleep(600)
"""


@pytest.mark.slow
def test_sigterm_to_the_process_group_exits_143_with_the_table_and_leaves_no_ray(tmp_path):
    """What SLURM and `timeout` do: SIGTERM to the driver's whole process group, its own local Ray
    started (in a session of its own, so it outlives the signal until the driver has written its ending).
    About 40 s on 2 busy cores."""
    import psutil

    experiment = tmp_path / "runs" / "term"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "", "RAYSWEEP_LOGICAL_GPUS": ""}
    argv = [
        PY,
        "sweeps/run_command.py",
        "--name",
        "term",
        "--address",
        "local",
        "--no-report",
        "--storage-path",
        str(tmp_path / "runs"),
    ]
    argv += ["--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--axis", "seed=0,1", "--"]
    argv += [
        PY,
        "tests/scripts/timed_epochs.py",
        "--startup",
        "0",
        "--epochs",
        "200",
        "--epoch-s",
        "1",
        "--seed",
        "{seed}",
    ]
    driver = start_driver(argv, env, tmp_path / "term.log")
    wait_for(lambda: reported(experiment) or driver.poll() is not None, 240, "a first epoch")
    ray_processes = psutil.Process(driver.pid).children(recursive=True)
    assert any("raylet" in " ".join(p.cmdline()) for p in ray_processes)
    os.killpg(driver.pid, signal.SIGTERM)
    out_of = lambda: (tmp_path / "term.log").read_text()[-3000:]  # noqa: E731
    assert driver.wait(120) == 143, out_of()
    out = (tmp_path / "term.log").read_text()
    assert "best configuration:" in out and re.search(r"^interrupted: .*\(SIGTERM\); continue with: ", out, re.M), out[
        -3000:
    ]
    assert json.loads((experiment / "driver.json").read_text())["exit_code"] == 143
    left = psutil.wait_procs(ray_processes, timeout=30)[1]
    assert not left, [p.cmdline() for p in left]


@pytest.mark.slow
def test_a_search_its_time_budget_ended_counts_alike_everywhere_and_advises_no_resume(tmp_path, sweep_env, receiver):
    """A search of a command with ASHA and --time-budget-s: one trial finishes, one is pruned, one runs until the
    budget stops it. The progress block, the last line, the search's closing table, --status (text and JSON),
    --json, the report's search table and the --notify message count 1 finished, 1 pruned, 1 interrupted;
    nothing advises a --resume (it would train nothing). About 50 s on 2 busy cores (the budget: 30 s; the three
    trials settle about 5 s after it starts at load 7)."""
    script = tmp_path / "budget.py"
    script.write_text(BUDGET)
    argv = [PY, "sweeps/lr_search.py", "--num-samples", "3", "--max-concurrent", "3", "--metric", "val_acc"]
    argv += ["--grace-period", "1", "--reduction-factor", "2", "--time-budget-s", "30", "--notify", receiver.url]
    argv += ["--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--quiet"]
    argv += ["--", PY, str(script), "{lr}", "{trial_name}", str(tmp_path / "flag"), "--epochs", "3"]
    proc = subprocess.run(argv, cwd=ROOT, env=sweep_env, capture_output=True, text=True, timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    said = "1 finished, 1 pruned, 0 errored, 0 diverged, 1 interrupted"
    assert f"sweep stopped by its time budget: 3 trials: 0 running, 0 pending, {said} |" in out, out[-3000:]
    assert (
        "stopped by its time budget: 1 of 3 trials finished, 1 pruned, 1 interrupted (--time-budget-s 30 reached)\n"
        in out
    )
    assert "3 trials: 1 finished, 1 pruned, 1 interrupted\n" in out
    ended = {row.split()[1][:15]: row for row in out.splitlines() if re.match(r"^\d +lr_search_0000\d", row)}
    assert "finished" in ended["lr_search_00002"] and "pruned by ASHA" in ended["lr_search_00003"], ended
    assert "--resume" not in out + proc.stderr  # no advice to resume: Tune ended its trials and its searcher
    experiment = tmp_path / "runs" / "lr_search"
    status = analysis_cli(experiment, "--status")
    assert f"3 trials: 0 running, 0 pending, {said} |" in status.stdout and "continue with" not in status.stdout
    assert status.stdout.rstrip().endswith("(--time-budget-s 30 reached); --resume would run none of them")
    counts = {"finished": 1, "pruned": 1, "errored": 0, "interrupted": 1, "not_run": 0}
    document = json.loads(analysis_cli(experiment, "--status", "--json").stdout)
    assert {k: document["counts"][k] for k in counts} == counts, document["counts"]
    assert (document["ended_by"], document["resume_command"]) == ("time budget", None)
    summary = json.loads(analysis_cli(experiment, "--json").stdout)
    assert {k: summary["trials"][k] for k in counts} == counts and summary["ended_by"] == "time budget"
    assert {t["trial"][:15]: t["ended"] for t in summary["search"]["trials"]} == {
        "lr_search_00001": "interrupted",
        "lr_search_00002": "finished",
        "lr_search_00003": "pruned",
    }
    report = (experiment / "report" / "report.md").read_text()
    assert f"- trials: 3 ({said})" in report
    assert "1 stopped by the time budget" in report and "1 pruned by ASHA" in report  # the search table's caption
    [message] = receiver.messages
    assert message["title"] == "sweep lr_search stopped by its time budget (exit code 0)"
    assert message["message"].splitlines()[:2] == [
        "1 finished, 1 pruned, 0 errored, 1 interrupted",
        "stopped early: --time-budget-s 30 reached",
    ]
