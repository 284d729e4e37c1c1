"""Real training scripts as they are (tests/scripts/*): each shape of output and input, through
`python sweeps/run_command.py` as a subprocess, as a user types it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis.reading.load import load_history
from tests.helpers.command_sweeps import PY, ROOT, SWEEP_TIMEOUT_S, run_sweep
from tests.helpers.processes import wait_until
from tests.helpers.trial_results import history, trials

# --- sweeps --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dassl_script_with_linked_and_path_axes_final_block_and_test_metric(tmp_path, sweep_env):
    """Seed 001/004's shapes: a config-file path axis (with a space), (dataset, classes) pairs, per-batch
    `epoch [3/5]` lines and a `* accuracy: 97.0%` block at the end, selected at the best val_acc epoch."""
    proc = run_sweep(
        tmp_path,
        "--axis",
        "config=configs/fast.yaml,my configs/fast.yaml",
        "--axis",
        "dataset,num_classes=caltech101:100,oxford_pets:37",
        "--test-metric",
        "accuracy",
        "--",
        PY,
        "tests/scripts/dassl_style.py",
        "--config",
        "{config}",
        "--dataset",
        "{dataset}",
        "--num-classes",
        "{num_classes}",
        "--epochs",
        "3",
        env=sweep_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    experiment = tmp_path / "runs" / "command"
    found = trials(experiment)
    assert len(found) == 4 and not any(" " in name for name in found)
    for name, trial in found.items():
        rows = history(trial)
        # `epoch [3/3]` names the last epoch: its row (complete once `* accuracy` joins its val_acc) waits for
        # the command's exit and takes the rest of the final block (`* error: 27.0%`): one row, no joined copy
        assert rows["epoch"].tolist() == [1, 2, 3]
        assert rows["accuracy"].notna().tolist() == [False, False, True]
        assert rows["error"].notna().tolist() == [False, False, True]
        assert "command/joins_step" not in rows.columns
        assert pd.read_csv(trial / "progress.csv")["epoch"].tolist() == [1, 2, 3]
        config = json.loads((trial / "params.json").read_text())
        assert f"config {config['config']}" in (trial / "command_stdout.txt").read_text()  # the path, verbatim
    loaded = load_history(experiment)  # the tables' history: one row per epoch, the joined one kept
    assert loaded.groupby("trial_id")["epoch"].apply(list).map(lambda e: e == [1, 2, 3]).all()
    assert "command/joins_step" not in loaded.columns and loaded.groupby("trial_id")["error"].last().notna().all()
    out = proc.stdout
    assert "accuracy: accuracy at the epoch of best val_acc (ties: earliest)" in out
    header = next(line for line in out.splitlines() if line.startswith("config "))
    assert header.split() == ["config", "dataset", "num_classes", "accuracy"]
    assert re.search(
        r"^my configs/fast\.yaml\s+oxford_pets\s+37\s+82\.7000 \(1\)$", out, re.M
    )  # 50 + 37/10 + len(config) + 3 * 3
    assert re.search(
        r"^best configuration by best val_acc over epochs: config=my configs/fast.yaml, dataset=caltech101, "
        r"num_classes=100: val_acc .*, accuracy ",
        out,
        re.M,
    )


@pytest.mark.slow
def test_task_file_crossed_with_seeds_and_two_metric_patterns(tmp_path, sweep_env):
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("- {dataset: cifar10, num_classes: 10}\n- {dataset: cifar100, num_classes: 100}\n")
    proc = run_sweep(
        tmp_path,
        "--tasks",
        str(tasks),
        "--seeds",
        "2",
        "--step-key",
        "iter",
        "--metric",
        "top1",
        "--metric-pattern",
        r"^Iter (?P<iter>\d+)/\d+ .*loss (?P<loss>[\d.]+)",
        "--metric-pattern",
        r"^Eval @ (?P<iter>\d+) :: top1 (?P<top1>[\d.]+%) top5 (?P<top5>[\d.]+%)",
        "--",
        PY,
        "tests/scripts/pattern_style.py",
        "--dataset",
        "{dataset}",
        "--num-classes",
        "{num_classes}",
        "--seed",
        "{seed}",
        env=sweep_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command")
    assert sorted(found) == sorted(
        f"{d}_numclasses{k}_seed{s}" for d, k in (("cifar10", 10), ("cifar100", 100)) for s in (0, 1)
    )
    rows = history(found["cifar100_numclasses100_seed1"])
    assert rows["iter"].tolist() == [50, 100, 150, 200, 250, 300]
    assert rows["top1"].dropna().tolist() == [46.0, 51.0, 56.0] and rows["loss"].tolist()[:2] == [6.0, 3.0]
    assert rows["top5"].dropna().tolist() == [66.0, 71.0, 76.0]
    assert re.search(r"^cifar100\s+100\s+55\.5000 ± 0\.7071 \(2\)$", proc.stdout, re.M)


@pytest.mark.slow
def test_tensorboard_only_script(tmp_path, sweep_env):
    proc = run_sweep(
        tmp_path,
        "--metrics-from",
        "tensorboard",
        "--step-key",
        "step",  # no `epoch` scalar: its steps are not epochs (issue 54)
        "--metric",
        "val/accuracy",
        "--axis",
        "lr=0.1,0.2",
        "--",
        PY,
        "tests/scripts/tb_only.py",
        "--logdir",
        "{trial_dir}/tb",
        "--lr",
        "{lr}",
        "--steps",
        "4",
        env=sweep_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command")
    rows = history(found["lr0.2"])
    assert rows["step"].tolist() == [1, 2, 3, 4]
    assert rows["val/accuracy"].round(4).tolist() == [0.52, 0.54, 0.56, 0.58]
    assert rows["train/loss"].round(4).tolist() == [1.0, 0.5, 0.3333, 0.25]
    assert "best configuration by best val/accuracy over epochs: lr=0.2" in proc.stdout


@pytest.mark.slow
def test_script_shapes_and_failures_that_are_not_retried(tmp_path, sweep_env):
    """One sweep, the script itself an axis: Keras-style `Epoch 3/5` then a metrics line, a script with
    no step (its result once, at step 0), a usage error (exit 2) and a script printing no metric:
    the last two fail once, with the stderr tail / the lines the parser saw in the error line."""
    scripts = ",".join(f"tests/scripts/{s}.py" for s in ("keras_style", "final_only", "strict_args", "quiet"))
    proc = run_sweep(
        tmp_path,
        "--axis",
        f"script={scripts}",
        "--metric",
        "val_accuracy",
        "--max-failures",
        "2",
        "--",
        PY,
        "{script}",
        "--lr",
        "0.1",
        env=sweep_env,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command")
    assert history(found["keras_style.py"])["val_accuracy"].tolist() == [0.50, 0.51, 0.52]
    final = history(found["final_only.py"])
    assert final[["epoch", "val_accuracy", "test_accuracy"]].values.tolist() == [[0, 0.89, 88.4]]  # `Test accuracy:`
    out = proc.stdout
    assert re.search(
        r"^error: 1 trial\(s\) failed before reporting any metric, with the same error: strict_args\.py: error: "
        r"the following arguments are required: --learning-rate\n  command exited with exit code 2 before",
        out,
        re.M,
    ), out
    assert "hint: exit code 2 is argparse's usage error: the script refused the arguments" in out, out
    assert re.search(
        r"^error: 1 trial\(s\) ended without the sweep's metric: command exited 0 but reported no metric$", out, re.M
    )
    assert "    Training with learning rate 0.1\n    Model saved to ./model.pt\n" in out, out  # its last stdout lines
    for name in ("strict_args.py", "quiet.py"):  # one attempt each, though --max-failures 2
        assert (found[name] / "command_stdout.txt").read_text().count("# raysweep: command started") == 1
        assert (found[name] / "error.txt").read_text().count("Failure #") == 1


@pytest.mark.slow
def test_rows_printed_but_never_reported_are_recovered_on_restart(tmp_path, sweep_env):
    """The script prints epochs 1-6 and kills its trial's worker, once the trial read epoch 6's line
    (at_once=0) or right after printing it (at_once=1: the worker has likely not read it: the line is only
    in the command's output file); one sweep, the two moments its axis. Tune retries each trial from its
    last recorded step; the rows after it are reported first, and the script, resumed from its own
    checkpoint (epoch 6), adds 7-8: every epoch once."""
    proc = run_sweep(
        tmp_path,
        "--axis",
        "epochs=8",
        "--axis",
        "at_once=0,1",
        "--max-failures",
        "1",
        "--",
        PY,
        "tests/scripts/resumable.py",
        "--out",
        "{trial_dir}",
        "--epochs",
        "{epochs}",
        "--kill-parent-after",
        "6",
        "--kill-at-once",
        "{at_once}",
        env=sweep_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command").values()
    assert sorted(str(json.loads((t / "params.json").read_text())["at_once"]) for t in found) == ["0", "1"]
    for trial in found:
        log = (trial / "command_stdout.txt").read_text()
        assert log.count("# raysweep: command started") == 2 and "resuming from epoch 7" in log, trial.name
        assert history(trial)["epoch"].tolist() == list(range(1, 9)), trial.name
        assert re.search(
            r"reporting \d row\(s\) written before the restart but never reported \(steps \d\.\.6,",
            (trial / "stdout").read_text(),
        ), trial.name


@pytest.mark.slow
def test_driver_killed_then_resume_reports_the_rows_printed_meanwhile(tmp_path, sweep_env):
    """The driver is SIGKILLed mid-run; the script's rows printed after Tune's last record are in the
    trial's stdout file; `--resume` reports them before the script (resumed from its own checkpoint)
    goes on: the history holds every epoch, each once."""
    argv = [
        "--axis",
        "epochs=12",
        "--",
        PY,
        "tests/scripts/resumable.py",
        "--out",
        "{trial_dir}",
        "--epochs",
        "{epochs}",
        "--sleep",
        "0.5",
    ]
    flags = ["--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--quiet"]
    flags += ["--no-report"]
    env = sweep_env  # the session's shared Ray: the killed driver's trials end with its job
    driver = subprocess.Popen(
        [PY, "sweeps/run_command.py", *flags, *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    experiment = tmp_path / "runs" / "command"
    logs = lambda: list(experiment.glob("*/command_stdout.txt"))  # noqa: E731
    # killed once Tune recorded 4 rows: a step checkpoint each, so num_to_keep=2 has deleted some, maybe
    # the one Tune's experiment state names (sweeps/engine/run/checkpoint_repair.py restores from a later one then)
    recorded = lambda: max([_epochs(p.with_name("result.json")) for p in logs()] or [[]], key=len)  # noqa: E731
    wait_until(lambda: len(recorded()) >= 4 or driver.poll() is not None, 300, every_s=0.02)
    assert driver.poll() is None, "the sweep ended before it could be killed"
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    (log,) = logs()
    # the worker and the script outlive the driver for a moment and may print epochs Tune never records
    printed = lambda: [int(e) for e in re.findall(r"^epoch (\d+)/", log.read_text(), re.M)]  # noqa: E731
    wait_until(lambda: max(printed()) > max(recorded()), 10, every_s=0.05)
    unreported = max(printed()) > max(recorded())
    proc = subprocess.run(
        [PY, "sweeps/run_command.py", *flags, "--resume", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trial = log.parent
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
    epochs = [r["epoch"] for r in rows]
    assert sorted(set(epochs)) == list(range(1, 13)) and len(epochs) == len(set(epochs)) == 12, (
        epochs,
        log.read_text(),
    )
    if unreported:  # the rows printed after the kill came from the stdout file, not from the script again
        assert "written before the restart but never reported" in (trial / "stdout").read_text()


def _epochs(result_file: Path) -> list[int]:
    """The `epoch` of each row of a trial's `result.json` so far ([] before it exists)."""
    if not result_file.exists():
        return []
    return [json.loads(line)["epoch"] for line in result_file.read_text().splitlines() if line.strip().endswith("}")]
