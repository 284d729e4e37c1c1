"""How a trial and a sweep end, and how they are counted: a command without its metric is never done, an
interrupted sweep says so and exits 130, its printed resume command runs as printed, and the final line,
`--status`, `--status --json`, `python -m analysis --json` and the report count alike."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.helpers.analysis_fixtures import trial_spec, write_experiment
from tests.helpers.processes import wait_until
from trainables.experiment import outcome as words
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import trial_outcome

PY = sys.executable
RESULT = {"trial_id": "t", "training_iteration": 2, "epoch": 2, "val_acc": 0.7}  # a trial that reported
NOT_YET = {"trial_id": "t", "date": "2026-11-25_20-00-00", "pid": 1, "config": {}}  # what Tune fills in before a report


# --- the pieces, without Ray -----------------------------------------------------------------------


def test_a_trial_is_finished_only_when_it_ended_by_itself_with_a_report():
    marked = {**RESULT, words.FAILED_METRIC: 1}
    assert trial_outcome("TERMINATED", RESULT) == "finished"
    assert trial_outcome("TERMINATED", RESULT, stop_at=1, planned=4) == "finished"  # it logged past the STOP
    assert trial_outcome("TERMINATED", RESULT, stop_at=2, planned=4) == "pruned"  # ASHA stopped it at a rung
    assert trial_outcome("TERMINATED", NOT_YET) == "not run"  # a trial stopped before it started is no result
    assert trial_outcome("TERMINATED", marked) == "errored"  # the gate's stop ended it before Tune saw its error
    assert trial_outcome("ERROR", {**marked, words.NO_METRIC_METRIC: 1}) == "no metric"
    assert trial_outcome("ERROR", words.failure_marks("not started")) == "not run"  # the gate never let it start
    assert trial_outcome("TERMINATED", {**RESULT, "diverged": True}) == "diverged"
    assert trial_outcome("TERMINATED", RESULT, stopped=True) == "interrupted"  # a time budget ended it
    assert [trial_outcome(s, NOT_YET) for s in ("RUNNING", "PENDING", "PAUSED")] == ["running", "pending", "pending"]
    assert [trial_outcome(s, RESULT, over=True) for s in ("RUNNING", "PENDING")] == ["interrupted", "not run"]
    assert words.count_outcomes(["finished", "no metric", "errored", "interrupted"], not_created=2, over=True) == {
        **{"running": 0, "pending": 0, "finished": 1, "pruned": 0, "errored": 2, "diverged": 0},
        **{"no_metric": 1, "interrupted": 1, "not_run": 2},
    }


def test_a_command_that_exits_0_without_the_metric_fails_as_no_metric_naming_the_keys_it_held(tmp_path, monkeypatch):
    from trainables.command import failure
    from trainables.command.failure_gate import EARLY_FAILURE_METRIC, FAILURE_SIGNATURE_METRIC
    from trainables.command.process import Reading
    from trainables.command.runner import StepReporter
    from trainables.experiment import records
    from trainables.experiment.objective import Objective

    reported = []
    monkeypatch.setattr(failure.tune, "report", reported.append)
    output = SimpleNamespace(events=None, tails={"OUT": ["epoch=2 loss=0.50 v_num=0"], "ERR": []})
    objective = Objective("val_acc", test_metric=None)
    reading = Reading("epoch", [], objective, "output", tmp_path / "metrics.jsonl", tmp_path / "work")
    reporter = StepReporter("epoch", tmp_path)
    gate = reporter.ticket = SimpleNamespace(calls=[], call=lambda *args: gate.calls.append(args))
    assert reporter.report_new([]) is False and reporter.seen == {}
    reporter.parsed, reporter.last_step, reporter.seen = 2, 2, dict.fromkeys(("epoch", "loss", "v_num"))  # no val_acc
    with pytest.raises(failure.CommandFailed, match=r"command exited 0 but reported no val_acc: its results held loss"):
        failure.verdict(0, ["python", "x.py"], reporter, output, reading, None)
    why = "0: command exited 0 but reported no val_acc"  # the same in every trial: the sweep's gate counts it
    assert gate.calls == [("failed_early", why, True)]
    assert reported == [
        {words.FAILED_METRIC: 1, words.NO_METRIC_METRIC: 1, "command/no_retry": 1}
        | {EARLY_FAILURE_METRIC: 1, FAILURE_SIGNATURE_METRIC: why}
    ]
    record = records.read_failure(tmp_path)
    assert (record.kind, record.exit_code, record.source, record.tail) == (
        "no metric",
        0,
        "stdout",
        tuple(output.tails["OUT"]),
    )
    assert "loss, v_num" in record.detail and record.not_retried and record.early  # never the sweep's metric
    reporter.seen["val_acc"] = None
    failure.verdict(0, ["python", "x.py"], reporter, output, reading, None)  # its metric: no error
    earlier = StepReporter("epoch", tmp_path, parsed=1, last_step=3, seen={"epoch": None}, reported_before=True)
    failure.verdict(
        0, ["python", "x.py"], earlier, output, reading, None
    )  # a restart: the first attempt may have had it


def test_a_cell_with_no_usable_value_says_why():
    from analysis.tables.paper_format import empty_cell

    def cell(n=0, failed=0, diverged=0, no_metric=0, interrupted=0, not_run=0):
        return pd.Series(
            {"n": n, "n_failed": failed, "n_diverged": diverged, "n_no_metric": no_metric}
            | {"n_interrupted": interrupted, "n_not_run": not_run}
        )

    assert empty_cell(cell(n=2, failed=1)) is None
    assert empty_cell(cell(failed=2, no_metric=2)) == "no metric"
    assert empty_cell(cell(failed=2)) == "errored" and empty_cell(cell(failed=2, diverged=2)) == "diverged"
    assert empty_cell(cell(failed=2, diverged=1)) == "failed"
    assert empty_cell(cell(interrupted=1, not_run=2)) == "interrupted" and empty_cell(cell(not_run=2)) == "not run"
    assert empty_cell(cell()) == "no metric"  # it ended without a value of this metric: never a bare dash


def test_the_progress_line_counts_by_outcome_and_ranks_no_stopped_trial():
    from analysis.progress import describe_counts, sweep_status

    class Trial(SimpleNamespace):
        def __str__(self):
            return self.trial_id

    def trial(name, status, result, best=None):
        analysis = {"val_acc": {"max": best}} if best is not None else {}
        return Trial(trial_id=name, status=status, config={}, last_result=result, metric_analysis=analysis)

    trials = [
        trial("done", "TERMINATED", RESULT, 0.7),
        trial("cut", "TERMINATED", RESULT, 0.9),  # stopped by a time budget: its value is not a result
        trial("quiet", "ERROR", {**RESULT, words.FAILED_METRIC: 1, words.NO_METRIC_METRIC: 1}),
        trial("waiting", "PENDING", NOT_YET),
    ]
    status = sweep_status(trials, 5, Objective("val_acc", test_metric=None), over=True, stopped={"cut"})
    assert {k: status[k] for k in words.COUNTS} == {
        **{"running": 0, "pending": 0, "finished": 1, "pruned": 0, "errored": 1, "diverged": 0},
        **{"no_metric": 1, "interrupted": 1, "not_run": 2},
    }
    assert status["best"][1] == "done"
    assert describe_counts(status) == (
        "0 running, 0 pending, 1 finished, 1 errored (1 no metric), 0 diverged, 1 interrupted, 2 not run"
    )
    assert (
        describe_counts(status, shown=("errored", "diverged"))
        == "1 finished, 1 errored (1 no metric), 0 diverged, 1 interrupted, 2 not run"
    )


def test_sweep_ending_tells_stopped_trials_from_ended_ones_and_routes_sigterm_to_tunes_stop(
    capsys, monkeypatch, tmp_path
):
    from sweeps.engine.run import sweep_end

    monkeypatch.setattr(sweep_end, "trial_folder_uri", lambda trial: str(tmp_path / trial.trial_id))

    tune_stops = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: tune_stops.append(signum))  # as Tune's handler
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        ending_callback = sweep_end.SweepEnding()
        sweep_end.FITS.clear()
        ending_callback.setup(total_num_samples=4)
        trials = {
            name: SimpleNamespace(trial_id=name, status=status, last_result=result, path=f"/runs/x/{name}")
            for name, status, result in (
                ("a", "TERMINATED", RESULT),
                ("b", "TERMINATED", RESULT),
                ("c", "PENDING", NOT_YET),
            )
        }
        for name in "ab":
            ending_callback.on_trial_start(0, [], trials[name])
        ending_callback.on_trial_complete(0, [], trials["a"])
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's SIGTERM: Tune's resumable stop, not death
        wait_until(lambda: tune_stops, 10, every_s=0.01)
        assert tune_stops == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second SIGTERM ends the driver at once
        ending_callback.on_experiment_end(list(trials.values()))
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    [ending] = sweep_end.FITS
    assert (ending.signal, ending.stopped, ending.counts()["finished"], ending.unfinished()) == ("SIGTERM", {"b"}, 1, 3)
    assert (ending.ended_by, ending.why) == ("SIGTERM", "SIGTERM")
    assert ending.outcomes == {"/runs/x/a": "finished", "/runs/x/b": "interrupted", "/runs/x/c": "not run"}
    monkeypatch.setattr(sys, "argv", ["sweeps/run_command.py", "--axis", "lr=1,2", "--", "python", "t.py", "{lr}"])
    sweep_end.say_interrupted(ending, reused=1)
    assert capsys.readouterr().out == (
        f"interrupted: 2 of 5 trials finished, 1 interrupted, 2 not run (SIGTERM); continue with: {PY} "
        "sweeps/run_command.py --axis lr=1,2 --resume -- python t.py {lr}\n"
    )
    assert sweep_end.EXIT_CODES == {"Ctrl-C": 130, "SIGTERM": 143}
    # Tune's end of trial a is in its folder at once (`trial_end.json`): read without any saved state
    assert sorted(p.parent.name for p in tmp_path.glob("*/trial_end.json")) == ["a"]


def test_status_counts_the_trials_a_finished_driver_stopped_and_a_relaunch_says_what_reruns(tmp_path, capsys):
    from analysis.status import format_status, read_status
    from sweeps.engine.run import resume

    specs = [
        trial_spec("done", {"lr": 0.1}, [{"epoch": 1, "val/acc": 0.5}], trial_id="d"),
        trial_spec("cut", {"lr": 0.2}, [{"epoch": 1, "val/acc": 0.9}], trial_id="c"),  # a time budget stopped it
        trial_spec("left", {"lr": 0.3}, [], status="PENDING", trial_id="p"),
    ]
    experiment = write_experiment(tmp_path, "budget", specs)
    (experiment / "tuner.pkl").write_bytes(b"")
    driver = {"host": "elsewhere", "pid": 1, "since": "then", "heartbeat": 1.0, "ended": 2.0, "exit_code": 0}
    (experiment / "driver.json").write_text(json.dumps({**driver, "stopped": ["c"], "ended_by": "Ctrl-C"}))
    (experiment / "raysweep.json").write_text(json.dumps({"argv": ["sweeps/x.py", "--name", "budget"], "python": PY}))
    report = read_status(experiment)
    assert {k: report["status"][k] for k in ("finished", "interrupted", "not_run")} == {
        "finished": 1,
        "interrupted": 1,
        "not_run": 1,
    }
    assert report["status"]["best"][1] == "done" and report["left"] == 2
    assert format_status(report)[-1] == f"  2 trial(s) left: continue with: `{PY} sweeps/x.py --name budget --resume`"
    import analysis

    trials = analysis.load_trials(experiment)
    assert dict(zip(trials["trial_name"], trials["outcome"])) == {
        "done": "finished",
        "cut": "interrupted",
        "left": "not run",
    }
    # the same sweep ended by its time budget: Tune ended those trials, a --resume runs none of them
    (experiment / "driver.json").write_text(
        json.dumps({**driver, "stopped": ["c"], "ended_by": "time budget", "why": "--time-budget-s 20 reached"})
    )
    report = read_status(experiment)
    assert format_status(report)[-1] == (
        "  2 trial(s) left: the time budget ended the sweep (--time-budget-s 20 reached); "
        "--resume would run none of them"
    )
    assert "--resume" not in "".join(format_status(report)[:-1])
    cells = [{"lr": lr} for lr in (0.1, 0.2, 0.3)]
    todo, reused = resume.plan_cells(cells, experiment, True, hash_fn=resume.command_hash, relaunch=True)
    assert [c["lr"] for c in todo] == [0.2, 0.3] and len(reused) == 1
    out = capsys.readouterr().out
    assert "holds this sweep already: 2 of its cells did not finish there" in out
    assert "add --resume" in out and "new --name" in out and "new folders beside the old ones" in out


def epochs(trial: Path) -> list:
    lines = (trial / "result.json").read_text().splitlines() if (trial / "result.json").exists() else []
    return [json.loads(line).get("epoch") for line in lines if line.strip()]


def reported(experiment: Path) -> int:
    return sum(len(epochs(t)) for t in experiment.glob("seed*"))


def test_the_driver_record_keeps_the_trials_an_earlier_run_stopped_until_they_end(tmp_path):
    from sweeps.engine.sweep_records import driver_lock

    folder = tmp_path / "exp"
    folder.mkdir()
    earlier = {
        "host": "h",
        "pid": 1,
        "since": "s",
        "heartbeat": 1.0,
        "ended": 2.0,
        "exit_code": 1,
        "stopped": ["a", "b"],
    }
    (folder / "driver.json").write_text(json.dumps(earlier))
    held = driver_lock.hold(str(folder))
    ending = SimpleNamespace(
        stopped={"c"},
        ended={"a"},
        scheduler_stops={},
        ended_by="Ctrl-C",
        why="Ctrl-C",
        ended_at=None,
        not_created=lambda: 2,
    )
    held.record_end(130, ending)  # a resumed `a` ended; `b` was not run again
    assert json.loads((folder / "driver.json").read_text())["stopped"] == ["b", "c"]
    held.release(130)
    record = json.loads((folder / "driver.json").read_text())
    assert (record["exit_code"], record["stopped"], record["not_created"]) == (130, ["b", "c"], 2)
