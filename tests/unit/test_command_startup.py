"""A command trial between its turn at the failure gate and its command's start
(`trainables/command/startup.py`): each step that fails ends the gate's ticket and the trial, the watchdog
ends a stuck one, and the driver releases the ticket of a worker that died. The runner's own steps
(`runner._prepare_command`), driven directly with an in-process gate, no Ray."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainables.command import runner
from trainables.command.failure import CommandFailed
from trainables.command.failure_gate import EARLY_FAILURE_METRIC, WORKER_ENDED, FailureGate
from trainables.command.gpu_sharing import GpuSharing
from trainables.command.parse import NO_RETRY_METRIC
from trainables.command.startup import FAULT_ENV, STEPS, before_command
from trainables.command.workdir import RUNTIME_ENV_CODE, snapshot_code
from trainables.experiment import records
from trainables.experiment.outcome import SET_UP

TEMPLATE = ["python", "train.py", "--seed", "{seed}", "--out", "{trial_dir}"]


class Ticket:
    """A `GateTicket` whose gate is a `FailureGate` in this process."""

    def __init__(self, gate: FailureGate, trial_id: str):
        self.gate, self.attempt = gate, f"{trial_id}/1"
        assert gate.enter(self.attempt) == "go"

    def call(self, method: str, *args):
        return getattr(self.gate, method)(self.attempt, *args)


@pytest.fixture
def reports(monkeypatch) -> list[dict]:
    """What the trial reports to Tune (the marks before its error); no GPU ids without Ray."""
    reported = []
    monkeypatch.setattr("trainables.command.failure.tune.report", reported.append)
    monkeypatch.setattr("trainables.command.runner.ray.get_gpu_ids", lambda: [])
    return reported


def start(trial: Path, gate: FailureGate, code_dir: str) -> None:
    """The runner's steps from its turn to its command's start, as `train_command` runs them."""
    reporter = SimpleNamespace(ticket=Ticket(gate, trial.name), trial_folder=trial)
    files = (records.work_dir(trial), trial / runner.METRICS_FILE)
    with before_command(reporter, trial.name) as startup:
        runner._prepare_command(
            TEMPLATE, {"seed": 0}, trial.name, files, code_dir, None, "output", GpuSharing(), startup
        )
        startup.enter("program")  # where `_start_and_watch` starts it
        raise AssertionError("the command would start here")


@pytest.fixture
def snapshot(tmp_path) -> str:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "train.py").write_text("print('epoch=1 val_acc=0.5')\n")
    snapshot_code(tmp_path / "repo", tmp_path / "code")
    return str(tmp_path / "code")


@pytest.mark.parametrize("step", STEPS)
def test_a_step_failing_before_the_command_ends_the_ticket_and_the_trial_with_its_cause(
    step, tmp_path, snapshot, reports, monkeypatch
):
    monkeypatch.setenv(FAULT_ENV, f"{step}:fail")
    gate = FailureGate(3)
    started = time.monotonic()
    for trial in ("t0", "t1", "t2"):
        with pytest.raises(CommandFailed, match=rf"failed before its command started, at its {step}"):
            start(tmp_path / "runs" / trial, gate, snapshot)
    assert time.monotonic() - started < 5
    assert gate.running == {} and len(gate.failures.crashes) == 3 and gate.stopping()  # each counts as a start
    assert gate.enter("t3/1") == "stop"  # the waiting trials are told, not left waiting
    failure = records.read_failure(tmp_path / "runs" / "t1")
    assert failure.kind == SET_UP and failure.early and f"{FAULT_ENV}={step}:fail" in failure.exception
    assert failure.not_retried == "an earlier trial failed the same way before its command started"
    assert "t1" not in failure.signature  # the same failure in every trial is one
    assert [bool(r.get(EARLY_FAILURE_METRIC)) for r in reports] == [True] * 3  # the driver counts each
    assert reports[-1][NO_RETRY_METRIC] and not reports[0].get(NO_RETRY_METRIC)  # the first one is retried


def test_a_real_failure_is_recorded_with_its_step_and_exception(tmp_path, reports, monkeypatch):
    monkeypatch.delenv("TUNE_ORIG_WORKING_DIR", raising=False)
    monkeypatch.delenv(FAULT_ENV, raising=False)
    gate = FailureGate(3)
    with pytest.raises(CommandFailed, match="no code snapshot"):  # a worker without the job's working_dir
        start(tmp_path / "runs" / "t0", gate, RUNTIME_ENV_CODE)
    failure = records.read_failure(tmp_path / "runs" / "t0")
    assert failure.summary == "failed before its command started, at its snapshot"
    assert failure.exception.startswith("FileNotFoundError: no code snapshot")
    assert gate.running == {} and gate.failures.crashes == [failure.signature]


def test_the_watchdog_ends_a_trial_stuck_before_its_command_and_the_driver_releases_its_ticket(tmp_path, monkeypatch):
    ended = threading.Event()
    monkeypatch.setattr("trainables.command.startup.os._exit", lambda code: ended.set())  # the worker would end
    gate, trial = FailureGate(3), tmp_path / "runs" / "t0"
    reporter = SimpleNamespace(ticket=Ticket(gate, "trial0"), trial_folder=trial)
    with before_command(reporter, "t0", limit_s=0.3) as startup:
        startup.enter("work folder")
        assert ended.wait(10)  # a call that never returns, until the watchdog ends the worker
    failure = records.read_failure(trial)
    assert failure.kind == SET_UP and failure.early
    assert "no command started 0.3 s after the trial's turn: stuck at its work folder" in failure.exception
    assert gate.running == {"trial0/1": None}  # a dead worker ends no ticket: the driver does
    assert gate.forget("trial0", count=True) == 1 and gate.running == {} and gate.failures.crashes == [WORKER_ENDED]


def test_the_driver_releases_a_dead_workers_ticket_counts_it_and_records_why(tmp_path, monkeypatch):
    from trainables.command import initial_failures
    from trainables.command.initial_failures import InitialFailures

    gate = FailureGate(3)
    for attempt in ("a/1", "a/2", "b/1"):
        gate.enter(attempt)
    gate.started("b/1")
    actor = SimpleNamespace(forget=SimpleNamespace(remote=gate.forget))  # the gate actor's handle, called in place
    monkeypatch.setattr(initial_failures.ray, "get", lambda value: value)
    monkeypatch.setattr(initial_failures.ray_private, "trial_folder_uri", lambda trial: str(tmp_path / trial.trial_id))
    stopper = InitialFailures(3)
    stopper._gate = actor
    stopper.on_trial_error(0, [], SimpleNamespace(trial_id="a", last_result={}))  # its workers died holding tickets
    assert stopper.failures.count() == 1 and list(gate.running) == ["b/1"]
    assert gate.failures.crashes == [WORKER_ENDED] * 2
    failure = records.read_failure(tmp_path / "a")
    assert failure.kind == SET_UP and failure.early and WORKER_ENDED in failure.summary
    stopper.on_trial_complete(0, [], SimpleNamespace(trial_id="b", last_result={}))  # a command that started
    assert gate.running == {} and len(gate.failures.crashes) == 2 and not records.read_failure(tmp_path / "b")
