"""Trial names in process titles: `ps` / `htop` / the dashboard show `ray::<trial name>` (issue 21)."""

from __future__ import annotations

import json
import sys
import threading

import psutil
import pytest

from tests.helpers.processes import title_of, wait_until
from trainables.experiment.objective import Objective

WAITING_SCRIPT = """
import json, os, sys, time
out = sys.argv[1]
open(os.path.join(out, "pid"), "w").write(str(os.getpid()))
print("epoch=1 val_acc=0.5", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(out, "release")) and time.monotonic() < deadline:
    time.sleep(0.05)
print("epoch=2 val_acc=0.6", flush=True)
"""


@pytest.mark.slow
def test_command_trial_worker_is_titled_with_its_name_and_the_command_gets_it_in_its_environment(ray_gpus, tmp_path):
    from ray import tune
    from ray.tune import RunConfig, TuneConfig, Tuner

    from trainables.command.runner import train_command

    script = tmp_path / "wait.py"
    script.write_text(WAITING_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    name = "asym_0.375_seed1"
    trainable = tune.with_parameters(
        train_command,
        template=[sys.executable, str(script), str(out)],
        grace_period_s=2.0,
        objective=Objective("val_acc", test_metric=None),
    )  # epoch 1 is reported at once, not when epoch 2 starts
    tuner = Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space={"seed": 1},
        tune_config=TuneConfig(trial_name_creator=lambda trial: name, trial_dirname_creator=lambda trial: name),
        run_config=RunConfig(storage_path=str(tmp_path), name="titles", verbose=0),
    )
    results = []
    sweep = threading.Thread(target=lambda: results.append(tuner.fit()), daemon=True)
    sweep.start()
    try:
        result_file = tmp_path / "titles" / name / "result.json"
        assert wait_until(
            lambda: (out / "pid").exists() and result_file.exists() and result_file.read_text().strip(), 120
        ), "the trial did not report its first epoch in time"
        command = psutil.Process(int((out / "pid").read_text()))
        assert command.environ()["RAYSWEEP_TRIAL_NAME"] == name
        worker = command.parent().parent()  # the command's parent is the shim (trainables/command/shim.py)
        # After the first report (Ray retitled the worker around it) the name is back.
        assert wait_until(lambda: title_of(worker.pid) == f"ray::{name}", 10), title_of(worker.pid)
    finally:
        (out / "release").touch()
        sweep.join(120)
    assert results and not results[0].errors
    assert [json.loads(line)["epoch"] for line in result_file.read_text().splitlines()] == [1, 2]
    # The trial is over: its worker (gone, or idle and reusable) no longer carries its name.
    assert wait_until(lambda: title_of(worker.pid) != f"ray::{name}", 30), title_of(worker.pid)
