"""One count and one reason on every ending (issue 45): how each trial ended and why the sweep ended are
computed once (`SweepEnding`, `trial_outcome`) and the final line, `--status` (text and JSON), the `--notify`
message and the continue command say the same; a command's program is the launch's on every resume; the
estimate reads a command's `--epochs N`; `--json` always prints its document. Without Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.reading.driver_record import continue_advice, continue_command
from sweeps.engine.flags import UsageError
from sweeps.engine.run import notify, sweep_end
from tests.helpers.analysis_fixtures import trial_spec, write_driver_end, write_experiment
from trainables.experiment import outcome, records, scheduler_stops
from trainables.experiment.objective import Objective

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
RESULT = {"training_iteration": 2, "epoch": 2, "val_acc": 0.7}
LAUNCH = {"argv": ["/venv/bin/raysweep", "search", "--num-samples", "4", "--", "python", "t.py", "--lr", "{lr}"]}


def fit(trials: list, *, budget_s=None, stopper=None, fail_fast=False, results=(), started=(), ended=()):
    """Run a `SweepEnding` through one fit of `trials` (`SimpleNamespace`s shaped as Tune's `Trial`), Tune's
    results (trial id, result) handed to it on the way; returns its `Ending`."""
    callback = sweep_end.SweepEnding(stopper, fail_fast)
    sweep_end.FITS.clear()
    callback.setup(time_budget_s=budget_s, total_num_samples=len(trials) + 1)
    by_id = {t.trial_id: t for t in trials}
    for trial_id in started:
        callback.on_trial_start(0, trials, by_id[trial_id])
    for trial_id, result in results:
        callback.on_trial_result(0, trials, by_id[trial_id], result)
    for trial_id in ended:
        callback.on_trial_complete(0, trials, by_id[trial_id])
    if budget_s:
        sweep_end.FITS[-1].began -= budget_s  # the budget has run out
    callback.on_experiment_end(trials)
    return sweep_end.FITS[-1]


def trial(trial_id, status="TERMINATED", result=RESULT, epochs=4, folder="/runs/x"):
    storage = SimpleNamespace(
        storage_filesystem=SimpleNamespace(type_name="local"), trial_fs_path=f"{folder}/{trial_id}"
    )
    return SimpleNamespace(
        trial_id=trial_id,
        status=status,
        last_result=result,
        config={"epochs": epochs},
        path=f"{folder}/{trial_id}",
        storage=storage,
    )


def test_a_stop_by_the_scheduler_before_the_last_epoch_is_pruned_and_a_time_budget_says_so(capsys, monkeypatch):
    trials = [
        trial("a", result={**RESULT, "training_iteration": 4}),  # ran its 4 epochs
        trial("b"),  # ASHA said STOP at its epoch 2
        trial("c", result={**RESULT, "training_iteration": 4}),  # ASHA's STOP at max_t: all its epochs
        trial("d"),  # the budget stopped it
        trial("e", status="PENDING", result={}),
    ]
    stops = [("b", {"done": True, "training_iteration": 2}), ("c", {"done": True, "training_iteration": 4})]
    record = {"scheduler_stops": {}}  # the driver's record: its heartbeat writes what it holds (--status reads it)
    sweep_end.watch_driver(SimpleNamespace(record=record, previous={}))
    ending = fit(trials, budget_s=20, results=stops, started="abcd", ended="abc")
    assert ending.scheduler_stops == record["scheduler_stops"] == {"b": 2, "c": 4}
    assert [ending.outcomes[t.path] for t in trials] == ["finished", "pruned", "finished", "interrupted", "not run"]
    assert (ending.ended_by, ending.why) == ("time budget", "--time-budget-s 20 reached")
    counts = ending.counts(reused=1)
    assert (counts["finished"], counts["pruned"], counts["interrupted"], counts["not_run"]) == (3, 1, 1, 2)
    monkeypatch.setattr(sys, "argv", LAUNCH["argv"])
    sweep_end.say_interrupted(ending, reused=1)
    assert capsys.readouterr().out == (  # no resume advice: a resume would train nothing
        "stopped by its time budget: 3 of 7 trials finished, 1 pruned, 1 interrupted, 2 not run "
        "(--time-budget-s 20 reached)\n"
    )
    # --resume of it anyway: Tune ended that trial, it does not run again; still interrupted, by the budget
    sweep_end.watch_driver(
        SimpleNamespace(record={}, previous={"stopped": ["d"], "ended_by": "time budget", "why": ending.why})
    )
    again = fit(trials[:4], results=(), started="", ended="")
    sweep_end._DRIVER.clear()
    assert (again.outcomes["/runs/x/d"], again.ended_by, again.why) == ("interrupted", "time budget", ending.why)


def test_the_failure_gate_and_fail_fast_name_their_stop_and_the_gate_continues_with_retry_errored(capsys, monkeypatch):
    failed = {**RESULT, outcome.FAILED_METRIC: 1}
    gate = SimpleNamespace(stop_all=lambda: True, why="its first 3 trial attempts failed before reporting any metric")
    trials = [trial(i, "ERROR", failed) for i in "abc"] + [trial("d", "ERROR", outcome.failure_marks("not started"))]
    ending = fit(trials, stopper=gate, started="abcd", ended="abcd")
    assert ending.ended_by == "failure gate" and ending.counts()["errored"] == 3 and ending.counts()["not_run"] == 2
    monkeypatch.setattr(sys, "argv", LAUNCH["argv"])  # a new launch: its hint says to fix the script, then
    sweep_end.say_interrupted(ending, reused=0)  # run the same command; --resume would keep the launch's code
    line = capsys.readouterr().out
    assert line == "interrupted: 0 of 5 trials finished, 3 errored, 2 not run (its first 3 trial attempts failed " \
        "before reporting any metric)\n"  # fmt: skip
    argv = LAUNCH["argv"]
    monkeypatch.setattr(sys, "argv", [*argv[:4], "--resume", *argv[4:]])  # a resume that failed (its python)
    sweep_end.say_interrupted(ending, reused=0)
    assert capsys.readouterr().out.endswith(
        "; once the cause is fixed, continue with: /venv/bin/raysweep search --num-samples 4 --resume "
        "--retry-errored -- python t.py --lr {lr}\n"
    )
    fast = fit([trial("a", "ERROR", failed), trial("b")], fail_fast=True, started="ab", ended="a")
    assert (fast.ended_by, fast.outcomes["/runs/x/b"]) == ("fail-fast", "interrupted")
    assert fit([trial("a")], started="a", ended="a").ended_by == "finished"


def test_what_continues_a_sweep_names_retry_errored_where_a_plain_resume_would_run_nothing():
    counts = dict.fromkeys(outcome.COUNTS, 0)
    command = "/venv/bin/raysweep search --num-samples 4 --resume{} -- python t.py --lr {{lr}}"
    assert continue_command(LAUNCH, counts | {"finished": 4}, "finished") is None  # nothing left
    assert continue_command(LAUNCH, counts | {"interrupted": 1}, "time budget") is None
    assert continue_command(LAUNCH, counts | {"interrupted": 1}, "Ctrl-C") == command.format("")
    assert continue_command(LAUNCH, counts | {"errored": 2}, "finished") == command.format(" --retry-errored")
    assert continue_advice(LAUNCH, counts | {"errored": 2}, None).startswith("2 trial(s) errored; to run them again: ")
    advice = continue_advice(LAUNCH, counts | {"errored": 3, "not_run": 1}, "Ctrl-C")
    assert (
        advice == f"continue with: {command.format('')} (add --retry-errored to run its 3 errored trial(s) again too)"
    )


def test_the_notify_message_counts_as_the_final_line_and_carries_the_interruption_and_first_error(
    tmp_path,
    receiver,  # noqa: F811
):
    folders = {name: tmp_path / name for name in "abcd"}
    for folder in folders.values():
        folder.mkdir()
    crash = outcome.TrialFailure(
        kind="crashed", signature="1|boom", exit_code=1, exception="RuntimeError: boom at start",
        missing_path=None, tail=("Traceback ...", "RuntimeError: boom at start"), source="stderr",
        summary="command exited with code 1", early=True,
    )  # fmt: skip
    for name in "abc":
        records.write_failure(folders[name], crash)
    failed = {**RESULT, outcome.FAILED_METRIC: 1}
    trials = [SimpleNamespace(**vars(trial(n, "ERROR", failed)) | {"path": str(folders[n])}) for n in "abc"]
    trials.append(SimpleNamespace(**vars(trial("d", "PENDING", {})) | {"path": str(folders["d"])}))
    ending = fit(trials, started="abc", ended="abc")
    ending.signal = "Ctrl-C"
    ending.ended_by, ending.why = sweep_end._why(ending)

    class Grid(list):
        def get_best_result(self, *args, **kwargs):
            raise RuntimeError("no trial reported val_acc")

    results = Grid(SimpleNamespace(path=t.path, error=None, metrics={}) for t in trials)
    notify.watch((receiver.url,), "command")
    notify.sweep_ended(130, ending, [results], Objective("val_acc", test_metric=None))
    [message] = receiver.messages
    assert message["title"] == "sweep command interrupted (Ctrl-C, exit code 130)"
    lines = message["message"].splitlines()
    assert lines[0] == "0 finished, 3 errored, 2 not run"  # as the final line counts them (one never created)
    assert "stopped early: Ctrl-C" in lines and "first error: trial a: RuntimeError: boom at start" in lines


def test_a_trial_whose_command_ran_on_to_its_end_after_the_stop_is_finished_in_every_count(tmp_path):
    """ASHA's STOP at epoch 1 reached a command that had printed all 3 epochs and exited (`late_rows.json`, not
    cut): the final line, `--status` and the closing table (the history with its late rows) all say finished; one
    the stop cut mid-run, or whose late rows stop at its last report, is pruned (issue 53: the final line and
    --status said pruned, --json and the table finished)."""
    from analysis.reading.load import load_trials
    from analysis.reading.trial_outcomes import trial_counts
    from analysis.status import read_status

    config = {"epochs": 3, "lr": 0.1}
    specs = [trial_spec(name, config, [{"epoch": 1, "val/acc": 0.5}], trial_id=name) for name in "abcd"]
    experiment = write_experiment(tmp_path, "search", specs)
    (experiment / "tuner.pkl").write_bytes(b"")
    folders = {p.name.split("_")[1]: p for p in experiment.iterdir() if p.name.startswith("train_")}
    late = {"a": ([2, 3], False), "b": ([2], True), "c": ([1], False)}  # d: no record
    for name, (epochs, cut) in late.items():
        rows = [{"epoch": e, "val/acc": 0.6, "training_iteration": e} for e in epochs]
        records.write_late_rows(str(folders[name]), rows, cut)
    assert scheduler_stops.ran_on_after_stop(str(experiment / "nowhere"), 1) is False
    kept = scheduler_stops.pruning_stops({n: 1 for n in "abz"}, {n: (str(folders[n]), 1) for n in "ab"})
    assert kept == {"b": 1, "z": 1}  # a ran on; b was cut; z has no folder given, so its stop stays
    stops = dict.fromkeys("abcd", 1)
    write_driver_end(
        experiment, started=1000.0, ended=1010.0, elapsed_s=10.0, ended_by="finished", scheduler_stops=stops
    )
    trials = [trial(n, result={"training_iteration": 1, "epoch": 1, "done": True}, epochs=3) for n in "abcd"]
    for t in trials:
        t.storage.trial_fs_path = t.path = str(folders[t.trial_id])
    ending = fit(trials, results=[(n, {"done": True, "training_iteration": 1}) for n in "abcd"], started="abcd",
                 ended="abcd")  # fmt: skip
    assert [ending.outcomes[t.path] for t in trials] == ["finished", "pruned", "pruned", "pruned"]
    assert ending.scheduler_stops == {"b": 1, "c": 1, "d": 1}
    state = read_status(experiment)["status"]
    assert (state["finished"], state["pruned"]) == (1, 3)
    counts = trial_counts(load_trials(str(experiment)))
    assert (counts["finished"], counts["pruned"]) == (1, 3)


def test_status_says_the_drivers_clock_its_scheduler_stops_and_why_it_ended(tmp_path):
    from analysis.status import format_status, read_status
    from analysis.tables.json_output import schema, status_document

    config = {"epochs": 4, "lr": 0.1}
    specs = [
        trial_spec("a", config, [{"epoch": e, "val/acc": 0.5} for e in (1, 2, 3, 4)], trial_id="a"),
        trial_spec("b", config | {"lr": 0.2}, [{"epoch": 1, "val/acc": 0.4}], trial_id="b"),
    ]
    experiment = write_experiment(tmp_path, "search", specs)
    (experiment / "tuner.pkl").write_bytes(b"")
    write_driver_end(
        experiment, started=1000.0, ended=1033.4, elapsed_s=33.0, ended_by="finished", scheduler_stops={"b": 1}
    )
    state = read_status(experiment)
    assert (state["status"]["finished"], state["status"]["pruned"], state["elapsed_s"]) == (1, 1, 33.0)
    lines = format_status(state)
    assert lines[0].startswith("[0:00:33] 2 trials: 0 running, 0 pending, 1 finished, 1 pruned, 0 errored")
    assert lines[-1].startswith("driver: finished at")  # nothing left: no command
    document = status_document(state)
    import jsonschema

    jsonschema.Draft202012Validator(schema(document["schema"])).validate(document)
    assert (document["ended_by"], document["resume_command"], document["counts"]["pruned"]) == ("finished", None, 1)


def test_a_commands_program_is_resolved_at_launch_and_kept_on_every_resume(tmp_path, monkeypatch, capsys):
    from sweeps.engine.command_sweep.programs import resolve_program

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(PY)
    experiment = tmp_path / "runs" / "command"
    experiment.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")
    template, program = resolve_program(["python", "train.py", "{lr}"], str(experiment), resume=False)
    assert template == [str(venv / "python"), "train.py", "{lr}"]  # the venv's, its symlink kept
    assert program == {"name": "python", "path": str(venv / "python")}
    records.write_settings(str(experiment), {"settings": {"program": program}})
    monkeypatch.setenv("PATH", "/nowhere")  # a new shell, without the venv (and without any python)
    assert resolve_program(["python", "train.py"], str(experiment), resume=True)[0][0] == str(venv / "python")
    assert (
        capsys.readouterr().out
        == f"the command's python is {venv / 'python'}, as at launch (this shell's PATH finds none)\n"
    )
    assert resolve_program(["./run.sh", "{lr}"], str(experiment), resume=True) == (["./run.sh", "{lr}"], None)
    (venv / "python").unlink()  # its venv removed
    with pytest.raises(UsageError, match="the command's python at launch, .* is gone"):
        resolve_program(["python", "train.py"], str(experiment), resume=True)


def test_the_estimate_reads_the_commands_epochs_as_asha_does():
    from sweeps.engine.estimate.prediction import trial_epochs

    cells = [{"lr": 0.1}, {"lr": 0.01}]
    template = ("python", "train.py", "--lr", "{lr}", "--epochs", "5")
    assert trial_epochs(cells, "command", None, template) == ([5, 5], "the command's --epochs")
    assert trial_epochs(cells, "command", None, ("python", "train.py")) == ([None, None], "")  # timed to its end
    ran = SimpleNamespace(epochs_total=None, exit_code=0, epoch_ends=[1.0, 2.0, 3.0])
    assert trial_epochs(cells, "command", ran, ("python", "train.py"))[0] == [3, 3]


def test_pbt_with_a_command_says_pbt_trains_the_built_in_trainable_and_points_to_search():
    proc = subprocess.run(
        [PY, str(ROOT / "sweeps" / "pbt.py"), "--num-samples", "2", "--", "python", "train.py"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "PBT trains the built-in trainable" in proc.stderr and "python sweeps/lr_search.py" in proc.stderr
