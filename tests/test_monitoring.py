"""Monitoring: console progress, per-trial log lines, sweeps as Ray jobs, the dashboard in a browser."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError
from sweeps.engine.run.monitoring import SweepProgress, format_duration, format_progress, sweep_status
from trainables.experiment.objective import Objective
from trainables.logs import log_epoch, trial_logger

ROOT = Path(__file__).resolve().parents[1]


class FakeTrial(SimpleNamespace):
    """What SweepProgress reads from a Tune Trial: status, config, last_result, metric_analysis, str()."""

    def __str__(self):
        return self.name


def fake_trial(name, status, epochs_done=0, epochs=10, val_acc=None, best=None, **result):
    last = {"epoch": epochs_done, **result} if epochs_done else {}
    if val_acc is not None:
        last["val/acc"] = val_acc
    analysis = {"val/acc": {"max": best if best is not None else val_acc}} if val_acc is not None else {}
    return FakeTrial(
        name=name,
        status=status,
        config={"epochs": epochs},
        last_result=last,
        metric_analysis=analysis,
        error_file=f"/runs/{name}/error.txt",
        path=f"/runs/{name}",
    )


def trials_of(*specs):
    return [fake_trial(*args, **kwargs) for args, kwargs in specs]


def test_status_counts_states_best_and_epochs_including_trials_not_created_yet():
    trials = trials_of(
        (("a", "RUNNING", 4), {"val_acc": 0.80, "best": 0.85, "gpu_ids": "0"}),
        (("b", "RUNNING", 2), {"val_acc": 0.90}),
        (("c", "TERMINATED", 10), {"val_acc": 0.70}),
        (("d", "TERMINATED", 3), {"val_acc": 0.10, "diverged": True}),
        (("e", "ERROR", 1), {}),
        (("f", "PENDING"), {}),
    )
    s = sweep_status(trials, total_trials=8)
    assert (s["running"], s["pending"], s["done"], s["errored"], s["diverged"], s["total"]) == (2, 3, 1, 1, 1, 8)
    assert s["best"] == (0.90, "b")  # the best value any trial reached, not the latest
    assert s["epochs_done"] == 4 + 2 + 10 + 3 + 1
    # running and pending trials plan their 10 epochs, finished ones what they ran, 2 not created 10 each
    assert s["epochs_planned"] == 10 + 10 + 10 + 3 + 1 + 10 + 2 * 10
    assert [name for name, _, _ in s["running_trials"]] == ["b", "a"]  # best val/acc first


def test_progress_block_has_counts_best_eta_and_one_line_per_running_trial():
    timed = {"time_this_iter_s": 6.0}  # Tune's: each epoch takes 6 s, after a start-up of 2 s
    trials = trials_of(
        *[
            ((f"t{i}", "RUNNING", 5), {"val_acc": i / 20, "gpu_ids": str(i % 4), "time_total_s": 32.0, **timed})
            for i in range(11)
        ],
        (("done", "TERMINATED", 10), {"val_acc": 0.5, "time_total_s": 62.0, **timed}),
    )
    status = sweep_status(trials, total_trials=12)
    lines = format_progress(status, elapsed_s=60.0)
    # the wall-time model of --estimate: each running trial has 5 epochs of 6 s left, on its own slot
    assert lines[0] == (
        "[0:01:00] 12 trials: 11 running, 0 pending, 1 done, 0 errored, 0 diverged | "
        "best val/acc 50.00% (t10) | epochs 65/120 | ETA 0:00:30"
    )  # an accuracy held as a fraction in %, as the final table shows it
    assert lines[1].split() == ["t10", "epoch", "5/10", "val/acc", "50.00%", "GPU", "2"]  # no train/loss: never printed
    assert len(lines) == 1 + 8 + 1 and lines[-1] == "  ... and 3 more running"
    # a trial not created yet: its start-up and 10 epochs (2 + 60 s) on the first slot that frees up
    assert format_progress(sweep_status(trials, total_trials=13), 60.0)[0].endswith("ETA 0:01:32")
    # the slots the driver saw at once: two more slots take the waiting trials at once
    more = sweep_status(trials, total_trials=13) | {"slots": 12}
    assert format_progress(more, 60.0)[0].endswith("ETA 0:01:02")
    assert format_progress(sweep_status([], 4), 0.0)[0].endswith("best val/acc - | epochs 0 | ETA ?")
    assert format_duration(3725.4) == "1:02:05"


def test_eta_is_unknown_until_an_epoch_was_timed():
    untimed = trials_of((("a", "RUNNING", 2), {"val_acc": 0.5}), (("b", "PENDING"), {}))
    assert format_progress(sweep_status(untimed, 2), 30.0)[0].endswith("epochs 2/20 | ETA ?")
    first = trials_of((("a", "RUNNING", 1), {"time_total_s": 12.0, "time_this_iter_s": 12.0}), (("b", "PENDING"), {}))
    # one epoch timed: start-up and epoch cannot be told apart, 12 s per epoch: a 9 x 12, b 10 x 12 after it
    assert format_progress(sweep_status(first, 2), 30.0)[0].endswith("ETA 0:03:48")


def test_callback_throttles_skips_unchanged_blocks_and_quiet_keeps_errors_and_end():
    out = io.StringIO()
    progress = SweepProgress(interval_s=0.0, stream=out)
    progress.setup(total_num_samples=2)
    trials = trials_of((("a", "RUNNING", 1), {"val_acc": 0.3}), (("b", "PENDING"), {}))
    progress.on_step_end(iteration=1, trials=trials)
    progress.on_step_end(iteration=2, trials=trials)  # nothing moved: no second block
    assert out.getvalue().count("2 trials:") == 1
    trials[0].last_result = {"epoch": 2, "val/acc": 0.4}
    progress.on_step_end(iteration=3, trials=trials)
    assert out.getvalue().count("2 trials:") == 2 and "epochs 2/20" in out.getvalue()

    slow = SweepProgress(interval_s=3600.0, stream=io.StringIO())
    slow.on_step_end(iteration=1, trials=trials)
    trials[0].last_result = {"epoch": 3, "val/acc": 0.5}
    slow.on_step_end(iteration=2, trials=trials)
    assert slow.stream.getvalue().count("2 trials:") == 1  # within the interval: one block only

    quiet = SweepProgress(interval_s=0.0, quiet=True, stream=io.StringIO())
    quiet.setup(total_num_samples=2)
    quiet.on_step_end(iteration=1, trials=trials)
    trials[1].status = "ERROR"
    quiet.on_trial_error(iteration=2, trials=trials, trial=trials[1])
    trials[0].status = "TERMINATED"
    quiet.on_experiment_end(trials=trials)
    lines = quiet.stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("trial b errored: see /runs/b/error.txt")
    assert "sweep finished: 2 trials: 0 running, 0 pending, 1 done, 1 errored" in lines[1]

    # a searcher that finished early (--seeds auto): the final line counts the trials that ran, not the plan
    early = SweepProgress(interval_s=0.0, quiet=True, stream=io.StringIO())
    early.setup(total_num_samples=32)
    early.on_experiment_end(trials=trials)
    line = early.stream.getvalue().splitlines()[-1]
    assert "sweep finished: 2 trials: 0 running, 0 pending, 1 done, 1 errored" in line
    assert "| 30 planned trial(s) not needed: the searcher finished" in line and "epochs 3/3" in line


def test_trial_log_line_names_trial_gpus_and_pid(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    log = trial_logger("asym_0.375_seed1")
    started = time.perf_counter() - 10.0  # 2 epochs took 10 s: 8 more take 40 s
    log_epoch(log, {"epoch": 2, "train/loss": 1.23456, "val/acc": 0.875, "lr": 0.01, "grad_norm": 2.5}, 10, started)
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(
        rf"asym_0\.375_seed1:INFO \| \[GPU 1,3 \| pid {os.getpid()}\] Epoch \[2/10\] \| Loss 1\.2346 \| "
        r"Val Acc 0\.8750 \| LR 1\.00e-02 \| Grad Norm 2\.5000 \| ETA 0:00:(39|40)",
        line,
    ), line
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    trial_logger("sym_0.5_seed0").info("x")  # the next trial in a reused worker: one handler, CPU
    assert capsys.readouterr().out == f"sym_0.5_seed0:INFO | [CPU | pid {os.getpid()}] x\n"


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--progress-every", "0"], r"--progress-every=0.0 must be > 0 seconds"),
        pytest.param(
            ["--mlflow-uri", "sqlite:///mlflow.db"],
            r"needs the mlflow package: pip install 'raysweep\[trackers\]'",
            marks=pytest.mark.skipif(importlib.util.find_spec("mlflow") is not None, reason="mlflow is installed"),
        ),
        pytest.param(
            ["--wandb-project", "noise"],
            r"needs the wandb package: pip install 'raysweep\[trackers\]'",
            marks=pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed"),
        ),
    ],
)
def test_bad_monitoring_flags_are_refused_before_ray_starts(argv, match, tmp_path):
    with pytest.raises(UsageError, match=match):
        noise_grid.main([*argv, "--storage-path", str(tmp_path / "runs")])
    assert not (tmp_path / "runs").exists()


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def ray_head():
    """A separate Ray head (token auth, non-default ports, its own temp dir) as a subprocess.

    Its own temp dir keeps it out of /tmp/ray/ray_current_cluster, so no `ray.init()` elsewhere
    on the machine connects to it; it is stopped by signalling the `ray start --block` process we
    started (not `ray stop`, which would stop every Ray on the machine).
    Yields (dashboard URL, token, environment of the head).
    """
    gcs, dashboard, client, agent_http, agent_grpc, metrics, runtime_env = free_ports(7)
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Unix socket paths are limited to 107 bytes
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }  # `python` = this venv's
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{dashboard}", token, env
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` and the processes it started
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)  # a graceful stop takes ~30 s on 2 busy cores
            head.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_sweep_submitted_as_ray_job_succeeds_with_best_run_table_in_its_logs(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    url, token, _ = ray_head
    deadline = time.monotonic() + 240
    while True:  # the head's dashboard, then its job agent, take a while to come up
        try:
            client = JobSubmissionClient(url, headers={"Authorization": f"Bearer {token}"})
            job_id = client.submit_job(
                entrypoint=f"python sweeps/noise_grid.py --smoke-test --noise-rates 0.5 --noise-types sym "
                f"--storage-path {tmp_path} --progress-every 1",
                runtime_env={"working_dir": str(ROOT), "excludes": [".venv", "runs", "*.png"]},
            )
            break
        except (ConnectionError, RuntimeError):  # RuntimeError: "No available agent to submit job"
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    while (status := client.get_job_status(job_id)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, client.get_job_logs(job_id)[-3000:]
        time.sleep(2)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    # The table, laid out as the grid: one noise rate (row) x one noise type (column), one seed.
    assert re.search(r"^noise_rate\s+sym\s*$", logs, re.M), logs[-3000:]
    assert re.search(r"^0\.5\s+\d+\.\d\d \(1\)\s*$", logs, re.M), logs[-3000:]  # ... and its cell
    assert "dashboard: http://" in logs
    assert re.search(
        r"\] sweep finished: 1 trials: 0 running, 0 pending, 1 done, 0 errored, 0 diverged "
        r"\| best val/acc \d+\.\d\d% \(sym_0\.5_seed0\) \| epochs 2/2",
        logs,
    ), logs[-3000:]
    trial = tmp_path / "noise_grid" / "sym_0.5_seed0"
    assert re.search(r"sym_0\.5_seed0:INFO \| \[CPU \| pid \d+\] Epoch \[2/2\]", (trial / "stdout").read_text())
    assert (trial / "stderr").exists() and list(trial.glob("events.out.tfevents.*"))


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def headless_chromium(*flags: str, profile: Path) -> subprocess.CompletedProcess:
    """One run of headless Chromium (no sandbox: CI containers run as root) with a throwaway profile."""
    return subprocess.run(
        [
            find_chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,1330",
            "--virtual-time-budget=15000",
            *flags,
        ],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(
    find_chromium() is None and os.environ.get("CI") != "true",  # CI installs it (.ci/run): never skip there
    reason="needs headless Chromium (Debian: apt-get install chromium)",
)
def test_dashboard_shows_the_cluster_during_a_sweep_in_headless_chromium(tmp_path):
    """Run a sweep, open its dashboard's Cluster view in headless Chromium, find a running trial's
    name among the workers (their process titles, `ray::<trial name>`) and keep a screenshot.

    The screenshot goes to $RAYSWEEP_SCREENSHOT when set (docs/dashboard.png was made so), else tmp_path.
    """
    assert find_chromium(), "CI=true but no chromium: .ci/run installs Debian's chromium"
    shot = Path(os.environ.get("RAYSWEEP_SCREENSHOT", tmp_path / "dashboard.png"))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # a local, 127.0.0.1-only dashboard for the browser
    env.pop("RAY_ADDRESS", None)
    sweep = subprocess.Popen(
        [
            sys.executable,
            "sweeps/noise_grid.py",
            "--noise-rates",
            "0.25,0.5",
            "--noise-types",
            "sym",
            "--epochs",
            "400",
            "--cpus-per-trial",
            "0.5",
            "--storage-path",
            str(tmp_path),
            "--progress-every",
            "2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url, seen = None, []
        for line in sweep.stdout:  # wait for the dashboard URL, then for both trials to run
            seen.append(line)
            url = url or (m.group(1) if (m := re.search(r"dashboard: (http://\S+)", line)) else None)
            if url and "2 running" in line:
                break
        assert url, "".join(seen)[-3000:]
        profile, names = tmp_path / "chromium-profile", ("sym_0.25_seed0", "sym_0.5_seed0")
        # The dashboard samples each worker's title every few seconds: load the page until a trial's shows.
        deadline, page = time.monotonic() + 180, ""
        while time.monotonic() < deadline and not any(f"ray::{n}" in page for n in names):
            page = headless_chromium("--dump-dom", f"{url}/#/cluster", profile=profile).stdout
        assert any(f"ray::{n}" in page for n in names), re.findall(r"ray::[\w.]+", page)
        headless_chromium(f"--screenshot={shot}", f"{url}/#/cluster", profile=profile)
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    finally:
        os.killpg(sweep.pid, signal.SIGINT)
        try:
            sweep.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(sweep.pid, signal.SIGKILL)


def test_command_trials_with_no_epoch_total_show_epoch_k_and_an_eta_from_finished_trials():
    """A command trial's config has no `epochs`: `epoch k`, never `k/k` or `0/0`; the planned epochs
    come from the trials that finished, and no `0:00:00` while trials still run past that."""

    def command_trial(name: str, status: str, epoch: int = 0) -> FakeTrial:  # epochs of 10 s after 5 s of start-up
        result = {"epoch": epoch, "time_total_s": 5.0 + 10.0 * epoch, "time_this_iter_s": 10.0} if epoch else {}
        return FakeTrial(name=name, status=status, config={}, last_result=result, metric_analysis={})

    running, pending = command_trial("r", "RUNNING", 3), command_trial("p", "PENDING")
    none_done = sweep_status([running, pending], total_trials=2)
    assert none_done["epochs_planned"] is None
    line = format_progress(none_done, 30.0)
    assert line[0].endswith("epochs 3 | ETA ?") and line[1].split()[:3] == ["r", "epoch", "3"]
    done = command_trial("d", "TERMINATED", 4)
    s = sweep_status([running, pending, done], total_trials=4)
    assert s["epochs_planned"] == 4 + 4 + 4 + 4  # each unfinished or not created trial runs what d ran
    # on the one slot running now: r's last epoch (10 s), then p and the one not created, 5 + 4 x 10 s each
    assert format_progress(s, 70.0)[0].endswith("epochs 7/16 | ETA 0:01:40")
    longer = command_trial("r", "RUNNING", 6)
    past = sweep_status([longer, done], total_trials=2)
    assert format_progress(past, 70.0)[0].endswith("epochs 10/10 | ETA ?")  # r runs past the estimate


def test_progress_block_and_final_line_name_the_sweeps_metric():
    out = io.StringIO()
    progress = SweepProgress(interval_s=0.0, stream=out, objective=Objective("val_accuracy", "max"))
    progress.setup(total_num_samples=1)
    trial = FakeTrial(
        name="lr0.1",
        status="RUNNING",
        config={},
        last_result={"epoch": 2, "val_accuracy": 0.7},
        metric_analysis={"val_accuracy": {"max": 0.7}},
        error_file=None,
        path="/runs/lr0.1",
    )
    progress.on_step_end(iteration=1, trials=[trial])
    trial.status = "TERMINATED"  # as Tune leaves every trial at the experiment's end
    progress.on_experiment_end(trials=[trial])
    blocks = [line for line in out.getvalue().splitlines() if " trials: " in line]
    assert len(blocks) == 2 and all("best val_accuracy 70.00% (lr0.1)" in line for line in blocks)
    assert "epochs 2 | ETA ?" in blocks[0] and "  lr0.1  epoch 2  val_accuracy 70.00%  CPU" in out.getvalue()
    assert "val/acc" not in out.getvalue()


def test_epochs_done_count_reports_not_the_step_a_script_logged():
    """imagenet counts epochs from 0 (2 epochs end at `epoch` 1), Lightning's `--step-key step` reports global
    steps: the counter counts the results each trial reported; a failure's last mark is no epoch."""
    from_zero = FakeTrial(name="a", status="TERMINATED", config={}, metric_analysis={},
                          last_result={"epoch": 1, "training_iteration": 2})  # fmt: skip
    steps = FakeTrial(name="b", status="TERMINATED", config={}, metric_analysis={},
                      last_result={"epoch": 400, "step": 400, "training_iteration": 2})  # fmt: skip
    failed = FakeTrial(name="c", status="ERROR", config={}, metric_analysis={},
                       last_result={"command/no_retry": 1, "training_iteration": 3})  # fmt: skip
    joined = FakeTrial(name="d", status="TERMINATED", config={}, metric_analysis={},  # a final block: epoch 2 again
                       last_result={"epoch": 2, "command/joins_step": 1, "training_iteration": 3})  # fmt: skip
    s = sweep_status([from_zero, steps, failed, joined], total_trials=4)
    assert (s["epochs_done"], s["epochs_planned"]) == (2 + 2 + 2 + 2, 8)
    assert format_progress(s, 10.0)[0].split(" | ")[2] == "epochs 8/8"
