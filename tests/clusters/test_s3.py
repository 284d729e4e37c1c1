"""Object storage like a local folder: sweeps on `s3://` against moto's S3 server on 127.0.0.1,
started once per test session (`tests/conftest.py`'s `s3_server`). pyarrow (and so Ray Tune) reaches it
through AWS_ENDPOINT_URL with dummy credentials; a sweep joins a Ray head started with them (`s3_ray`) or
the session's two-raylet cluster (`two_raylets`), whose workers get them too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.engine.sweep_records import driver_lock
from tests.helpers.processes import wait_for
from tests.helpers.s3_server import aws_env
from trainables.experiment import storage

pytest.importorskip("moto.server", reason="needs moto[server] (the dev extra)")

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "raysweep-test"


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server with one empty bucket; yields the environment that points pyarrow at it."""
    env = aws_env(s3_server)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import boto3

    bucket = boto3.resource("s3", endpoint_url=s3_server).Bucket(BUCKET)
    if bucket.creation_date:  # an earlier test's: emptied, so each test starts from nothing
        bucket.objects.all().delete()
    else:
        bucket.create()
    yield {**os.environ, **env, "PYTHONUNBUFFERED": "1"}


def sweep(name: str, *extra: str, address: str, rates: str = "0.1,0.2", epochs: int = 2) -> list[str]:
    return [
        sys.executable,
        "sweeps/noise_grid.py",
        "--noise-types",
        "sym",
        "--noise-rates",
        rates,
        "--epochs",
        str(epochs),
        "--gpus-per-trial",
        "0",
        "--storage-path",
        f"s3://{BUCKET}/runs",
        "--name",
        name,
        "--address",
        address,
        "--quiet",
        *extra,
    ]


def trial_folders(experiment: str) -> dict[str, str]:
    """name -> URI of the trial folders (those with a result.json) of an experiment on s3."""
    import pyarrow.fs as pafs

    fs, inner, prefix = storage.filesystem_of(experiment)
    entries = fs.get_file_info(pafs.FileSelector(inner))
    return {
        e.base_name: prefix + e.path
        for e in entries
        if e.type == pafs.FileType.Directory and storage.exists(prefix + e.path + "/result.json")
    }


def epochs_of(trial: str) -> list[int]:
    return [
        json.loads(line)["epoch"] for line in storage.read_bytes(trial + "/result.json").decode().splitlines() if line
    ]


def cells(output: str) -> list[str]:
    """The `(n)` of each row of the final table."""
    table = output[output.index("test/acc (%)") : output.index("best configuration")].splitlines()[2:]
    return [line.split()[-1] for line in table if line.strip() and not line.startswith(("failed", "duplicates"))]


@pytest.mark.slow
def test_grid_killed_resumed_extended_rerun_and_analysed_on_s3(s3, s3_ray, tmp_path):
    """One experiment on s3, grown as a user grows it: its first driver is SIGKILLed mid-run and `--resume` takes
    it over (each cell done once); a second seed extends the finished grid (only the new cells run);
    `--no-skip-existing` runs a cell again in a new folder; the analysis reads it all from s3."""
    experiment = f"s3://{BUCKET}/runs/grid"
    epochs = 12  # long enough to kill the first driver mid-run
    every = ("--checkpoint-every", "4")  # a checkpoint is several requests to the S3 server (its CPU): 3 a trial
    address = s3_ray["RAY_ADDRESS"]
    s3 = {**s3, **{k: s3_ray[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}}
    log = tmp_path / "first.log"
    driver = subprocess.Popen(
        sweep("grid", *every, epochs=epochs, address=address),
        cwd=ROOT,
        env=s3,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:

        def some_progress():
            trials = trial_folders(experiment) if storage.exists(experiment) else {}
            return any(len(epochs_of(t)) >= 2 for t in trials.values())

        wait_for(lambda: driver.poll() is not None or some_progress(), 300, "a trial's results on s3")
        assert driver.poll() is None, "the sweep ended before it could be killed"
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=60)
    assert "2 to run, 0 reused" in log.read_text(), log.read_text()[-3000:]
    assert driver_lock.read_holder(experiment)["ended"] is None  # killed: no end recorded

    resumed = subprocess.run(
        sweep("grid", "--resume", *every, epochs=epochs, address=address),
        cwd=ROOT,
        env=s3,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"taking over {experiment}: its last driver" in resumed.stdout
    trials = trial_folders(experiment)
    assert sorted(trials) == ["sym_0.1_seed0", "sym_0.2_seed0"]  # one folder per cell
    for name, uri in trials.items():
        done = epochs_of(uri)
        assert done[-1] == epochs and done.count(epochs) == 1, (name, done)
    assert cells(resumed.stdout) == ["(1)", "(1)"]
    assert driver_lock.read_holder(experiment)["exit_code"] == 0
    before = {name: storage.read_bytes(uri + "/result.json") for name, uri in trials.items()}

    # Extend with a second seed: only the two new cells run; the finished ones are found on s3 and kept.
    extend = subprocess.run(
        sweep("grid", "--seeds", "2", *every, epochs=epochs, address=address),
        cwd=ROOT,
        env=s3,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert extend.returncode == 0, extend.stdout[-3000:] + extend.stderr[-3000:]
    assert "2 to run, 2 reused" in extend.stdout and "2 finished trial(s) reused" in extend.stdout
    assert cells(extend.stdout) == ["(2)", "(2)"]
    after = trial_folders(experiment)
    assert sorted(after) == ["sym_0.1_seed0", "sym_0.1_seed1", "sym_0.2_seed0", "sym_0.2_seed1"]
    assert all(storage.read_bytes(after[name] + "/result.json") == data for name, data in before.items())  # not rerun

    # `--no-skip-existing`: new folder names next to the old ones, never overwritten.
    again = subprocess.run(
        sweep("grid", "--no-skip-existing", *every, rates="0.1", epochs=epochs, address=address),
        cwd=ROOT,
        env=s3,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    renamed = sorted(set(trial_folders(experiment)) - set(after))
    assert len(renamed) == 1 and re.fullmatch(r"sym_0\.1_seed0_\w+", renamed[0]), renamed
    assert storage.read_bytes(after["sym_0.1_seed0"] + "/result.json") == before["sym_0.1_seed0"]

    # The analysis reads the experiment on s3; the rerun cell is a duplicate of the old one: counted once.
    report = subprocess.run(
        [sys.executable, "-m", "analysis", experiment, "--out", str(tmp_path / "report")],
        cwd=ROOT,
        env=s3,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    assert cells(report.stdout) == ["(2)", "(2)"] and "duplicates left out: 1 trial(s)" in report.stdout
    assert (tmp_path / "report" / "report.md").exists()


@pytest.mark.slow
def test_driver_lock_on_s3_refuses_a_live_holder_and_takes_over_a_stale_one(s3, capsys):
    experiment = f"s3://{BUCKET}/runs/locked"
    record = {
        "host": "gpu-node-7",
        "pid": 1234,
        "since": "2026-01-01 10:00:00",
        "heartbeat": time.time(),
        "ended": None,
        "exit_code": None,
    }
    storage.write_bytes(experiment + "/driver.json", json.dumps(record).encode())
    with pytest.raises(driver_lock.ExperimentHeld, match=r"in use by another driver: host gpu-node-7, pid 1234"):
        driver_lock.hold(experiment, settle_s=0.1)
    storage.write_bytes(experiment + "/driver.json", json.dumps({**record, "heartbeat": time.time() - 120}).encode())
    held = driver_lock.hold(experiment, settle_s=0.1)
    assert "taking over s3://" in capsys.readouterr().out
    assert driver_lock.read_holder(experiment)["pid"] == os.getpid()
    held.release(1)
    assert driver_lock.read_holder(experiment)["exit_code"] == 1


@pytest.mark.slow
def test_two_raylets_without_a_shared_folder_run_the_launch_time_code_after_the_launch_folder_is_gone(
    s3, two_raylets, tmp_path
):
    """No shared folder: the code snapshot travels as Ray's runtime_env working_dir. The launch folder is
    removed once the sweep has started; 4 trials on two raylets still run the launch-time code, read
    `../data` and `../../datasets` at the same absolute paths, and report to s3."""
    import shutil

    from tests.helpers.repos import make_layout

    launch = make_layout(tmp_path / "home")
    (tmp_path / "home" / "meeting").mkdir()  # the first two trials wait for each other there: one on each node
    meet = (
        "import time\nopen(f'../../meeting/{a.lr}_{a.seed}', 'w').close()\ndeadline = time.time() + 120\n"
        "while len(os.listdir('../../meeting')) < 2 and time.time() < deadline:\n    time.sleep(0.2)\n"
    )
    (launch / "main.py").write_text(
        (launch / "main.py").read_text().replace("for epoch in (1, 2):", meet + "for epoch in (1, 2):")
    )
    env, worker_ip, experiment = two_raylets.env, two_raylets.worker_ip, f"s3://{BUCKET}/runs/nofs"
    address = two_raylets.address
    argv = [sys.executable, str(ROOT / "sweeps" / "run_command.py"), "--address", address, "--name", "nofs"]
    argv += ["--storage-path", f"s3://{BUCKET}/runs", "--axis", "lr=0.1,0.2", "--seeds", "2", "--metric", "val_acc"]
    argv += ["--gpus-per-trial", "0", "--cpus-per-trial", "1", "--quiet"]
    argv += ["--", sys.executable, "main.py", "--lr", "{lr}", "--seed", "{seed}"]
    log = tmp_path / "sweep.out"
    driver = subprocess.Popen(argv, cwd=launch, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "starting nofs" in log.read_text() or driver.poll() is not None, 300, "the sweep's start")
        shutil.rmtree(launch)  # the code now lives in Ray's runtime_env package only
        assert driver.wait(timeout=400) == 0, log.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    output = log.read_text()
    assert "travels to every node as Ray's runtime_env working_dir" in output
    trials = trial_folders(experiment)
    assert len(trials) == 4, output[-3000:]
    nodes_used = set()
    for uri in trials.values():
        rows = [json.loads(line) for line in storage.read_bytes(uri + "/result.json").decode().splitlines() if line]
        config = json.loads(storage.read_bytes(uri + "/params.json"))
        expected = config["lr"] + config["seed"] / 100 + 2 / 1000 + 3 + 1  # read ../data and ../../datasets
        assert [r["epoch"] for r in rows] == [1, 2] and rows[-1]["val_acc"] == pytest.approx(expected)
        nodes_used |= {r["node_ip"] for r in rows}
    assert worker_ip in nodes_used and len(nodes_used) == 2  # trials ran on both nodes
