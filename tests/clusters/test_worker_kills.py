"""A trial's worker SIGKILLed at each moment of its life costs the trial one retry, never the trial.

The moments (issue J5): while its actor is being started, reset for reuse (`reuse_actors=True`),
restored, running, or saving a checkpoint. Each test runs a small grid of the built-in trainable
in-process (the session's Ray, actors reused) whose trial function, pickled by value into the
workers, kills its own worker once at that moment and records its process title there (Ray titles
`ray::ImplicitFunc.<task>`, a running trial `ray::<trial name>`: `trainables/proctitle.py`).
Every sweep must end with exit 0, every trial's full history with no row twice, and Tune charging
the killed trial one failure per kill (`error.txt`'s `Failure #` lines).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from sweeps import noise_grid
from tests.helpers.trial_results import results_of

EPOCHS = 2
RATES = ("0.1", "0.2", "0.3")  # 3 trials on 2 CPUs: the first actor to be free is reused for the third
# moment -> (kills, what the title at the kill shows)
MOMENTS = {
    "start": (1, "ray::IDLE"),  # a worker turned into a trial's actor, loading its class: no task title yet
    "reset": (1, "ray::ImplicitFunc.reset"),  # the case: a cached actor handed its next trial
    "restore": (2, "ray::ImplicitFunc.train"),  # killed running, then again as its retry loads the checkpoint
    "running": (1, "ray::ImplicitFunc.train"),  # mid-epoch 2, its epoch-1 row maybe not yet with the driver
    "saving": (1, "ray::sym_"),  # epoch 2's checkpoint stored, its row never sent
}


def killing_trial_function(moment: str, folder: Path):
    """The built-in trainable, with a SIGKILL of its own worker at `moment` (once per sweep; `restore`:
    twice, the second in the retry). Each kill writes `folder/kill<n>.json`: pid, trial, process title."""
    from ray import tune

    from trainables import ray_private, train_classifier

    driver = os.getpid()

    def kill(n: int, **evidence) -> None:
        try:
            fd = os.open(folder / f"kill{n}.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # this kill happened already
        title = ray_private.proctitle_functions()[1]()
        os.write(fd, json.dumps({"pid": os.getpid(), "title": title, **evidence}).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    class KillOnLoad:  # unpickled by each process that loads the trial function: the first worker dies
        def __reduce__(self):
            return (kill_if_worker, ())

    def kill_if_worker():  # in an actor's creation task, as it loads its class; the driver loads it too
        if os.getpid() != driver:
            kill(1)
        return KillOnLoad()  # the hook survives the driver's copy, which Ray pickles again for the workers

    on_load = KillOnLoad() if moment == "start" else None

    def trial(config, data=None, _on_load=on_load):  # a default argument: pickled with the function
        name = tune.get_context().get_trial_name()
        if moment == "restore" and tune.get_checkpoint() is not None:
            kill(2, trial=name)  # the retry, before it loads its checkpoint
        if moment in ("running", "restore"):
            real_report = tune.report

            def report(metrics, checkpoint=None):
                real_report(metrics, checkpoint=checkpoint)
                if metrics["epoch"] == 1:
                    kill(1, trial=name)

            tune.report = report
        if moment == "saving":
            context = ray_private.storage_context_class()
            persist = context.persist_current_checkpoint

            def persist_then_die(self, checkpoint):
                stored = persist(self, checkpoint)
                if self.current_checkpoint_index == 1:  # epoch 2's checkpoint is on storage
                    kill(1, trial=name)
                return stored

            context.persist_current_checkpoint = persist_then_die
        train_classifier(config, data)
        if moment == "reset":  # Tune's `reset` of this actor for its next trial stores its files first: die there
            context = ray_private.storage_context_class()
            persist_artifacts = context.persist_artifacts

            def persist_artifacts_or_die(self, force=False):
                if force and ray_private.proctitle_functions()[1]().endswith(".reset"):
                    kill(1, ended=name)
                return persist_artifacts(self, force=force)

            context.persist_artifacts = persist_artifacts_or_die

    return trial


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_worker_killed_at_each_moment_costs_one_retry(moment, ray_gpus, tmp_path, monkeypatch, capsys):
    kills, title = MOMENTS[moment]
    monkeypatch.setattr("trainables.trial.train_classifier", killing_trial_function(moment, tmp_path))
    argv = ["--noise-types", "sym", "--noise-rates", ",".join(RATES), "--epochs", str(EPOCHS)]
    code = noise_grid.main(
        [*argv, "--gpus-per-trial", "0", "--no-report", "--storage-path", str(tmp_path), "--name", "kills"]
    )
    out = capsys.readouterr().out
    evidence = [json.loads((tmp_path / f"kill{n}.json").read_text()) for n in range(1, kills + 1)]
    assert code == 0, out[-3000:]
    assert all(e["title"].startswith(title) for e in evidence), evidence  # the kill hit that moment
    experiment = tmp_path / "kills"
    for rate in RATES:
        rows = results_of(experiment / f"sym_{rate}_seed0")
        assert [r["epoch"] for r in rows] == list(range(1, EPOCHS + 1)), (rate, rows)  # full history, once each
    failures = {
        p.parent.name: p.read_text().count("Failure # ") for p in experiment.glob("*/error.txt") if p.parent.is_dir()
    }
    assert sum(failures.values()) == kills, failures  # one failure per death, whichever trial it hit
    if "trial" in evidence[0]:
        assert failures == {evidence[0]["trial"]: kills}
