"""The cost of a sweep (issue 41): the wall-time model, `--estimate` (its timing of the first cell, its
prediction, its JSON, its bad input), the estimate kept at launch and set against the run, the
failure gate's survival window, and the sweep efficiency of each run of an experiment."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from analysis.tables.json_output import ESTIMATE_SCHEMA, schema
from analysis.wall_time import TrialCost, makespan, sweep_seconds
from analysis.writeup import efficiency_lines
from sweeps.engine.estimate import estimate_record, history_estimate, prediction
from sweeps.engine.estimate.first_cell import CellTiming
from trainables.command import failure_gate
from trainables.command.failure_gate import FailureGate
from trainables.experiment.objective import Objective

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# --- the model -------------------------------------------------------------------------------------------


def test_makespan_places_the_longest_trials_first_and_waits_for_running_ones():
    assert makespan([3, 3, 2, 2, 2], 2) == 7  # LPT: 3+2+2 | 3+2 (in grid order 3+2+2 | 3+2 too; 6 | 6 is best)
    assert makespan([5, 1, 1, 1, 1, 1], 2) == 5  # the long trial first: the short ones fill the other slot
    assert makespan([4], 2, busy=[10, 1]) == 10  # the waiting trial takes the slot that frees first
    assert makespan([], 3, busy=[2, 7]) == 7
    assert sweep_seconds([10.0] * 4, 2, fixed_s=30.0, per_trial_s=1.0) == 30.0 + 2 * 11.0


def test_trial_cost_splits_the_start_up_from_the_epochs():
    cost = TrialCost.from_stamps(2.6, [2.6, 4.1, 5.6])  # start-up 1.1 s, then epochs of 1.5 s
    assert cost.epoch_s == pytest.approx(1.5) and cost.startup_s == pytest.approx(1.1)
    assert cost.seconds(8) == pytest.approx(1.1 + 12)
    alone = TrialCost.from_stamps(40.0, [40.0])  # one epoch: the two cannot be told apart
    assert (alone.startup_s, alone.epoch_s) == (0.0, 40.0)
    assert TrialCost.from_stamps(1.0, []) is None


# --- the prediction ----------------------------------------------------------------------------------------


def timing(ends, total=None, code=None, fill_s=0.0) -> CellTiming:
    return CellTiming(list(ends), ends[-1] if ends else 5.0, 0.0, fill_s, total, code)


def test_estimate_of_known_epoch_times_and_where_each_trials_epochs_come_from():
    cells = [{"seed": s} for s in range(8)]
    plan = prediction.Plan(cells, "command", gpus=0.0)
    first = timing([2.5, 4.0, 5.5], total=8)  # start-up 1 s, epochs of 1.5 s, `epoch 3/8` printed
    made = prediction.estimate_from_timing(plan, first, 2, "2 CPUs / 1", probe_s=2.0, ray_s=1.0, measured_s=0.0)
    fixed = made.basis["fixed_s"]
    per_trial = prediction.FIXED_COSTS["command"]["per_trial"] * 2.0
    assert made.wall_s == pytest.approx(fixed + 4 * (1.0 + 12.0 + per_trial))  # 8 trials of 13 s on 2 slots
    assert (made.trials, made.epochs, made.slots, made.gpu_hours) == (8, 64, 2, 0.0)
    assert made.basis["epochs_from"] == "the 8 epochs the command printed"
    assert made.basis["ray"] == "joined"  # the join was timed: no local start-up in the fixed costs
    local = prediction.estimate_from_timing(plan, first, 2, "", probe_s=2.0, ray_s=None, measured_s=0.0)
    assert local.basis["fixed_s"] - fixed == pytest.approx(prediction.RAY_START_UNITS * 2.0 - 1.0)

    # an epochs axis: each trial its own {epochs}, longest first
    axis = [{"epochs": e, "seed": s} for e in (2, 4, 8) for s in (0, 1)]
    made = prediction.estimate_from_timing(prediction.Plan(axis, "command"), first, 2, "", 1.0, 0.0, 0.0)
    assert made.epochs == 28 and made.basis["epochs_from"] == "each trial's {epochs}"
    trials = [1.0 + 1.5 * e + made.basis["per_trial_s"] for e in (8, 8, 4, 4, 2, 2)]
    assert made.wall_s == pytest.approx(made.basis["fixed_s"] + makespan(trials, 2))

    # the command ran to its end: its epochs are what it ran; stopped without a total: it cannot tell
    ended = prediction.estimate_from_timing(plan, timing([2.5, 4.0], code=0), 2, "", 1.0, 0.0, 0.0)
    assert ended.epochs == 16 and "the 2 epochs the first cell ran" in ended.basis["epochs_from"]
    unknown = prediction.estimate_from_timing(plan, timing([2.5, 4.0, 5.5]), 2, "", 1.0, 0.0, 0.0)
    assert unknown.wall_s is None and "the trials' epochs are unknown" in unknown.basis["cannot"]
    crashed = prediction.estimate_from_timing(plan, timing([], code=1), 2, "", 1.0, 0.0, 0.0)
    assert (
        crashed.wall_s is None
        and "exited with code 1 before its first epoch ended: run --check" in (crashed.basis["cannot"])
    )
    assert prediction.format_estimate(crashed)[0].startswith("no estimate of the wall time: the first cell exited")


def test_seeds_auto_gives_a_range_and_asha_an_upper_bound_and_the_document_validates():
    cells = [{"method": m, "seed": s} for m in ("a", "b") for s in range(10)]
    minimum = [c for c in cells if c["seed"] < 3]
    plan = prediction.Plan(cells, "builtin", gpus=0.25, minimum=minimum, upper_bound="ASHA stops trials early")
    made = prediction.estimate_from_timing(plan, timing([3.0, 5.0, 7.0]), 4, "4 GPUs / 0.25", 1.0, None, 0.0)
    low, high = made.basis["range_s"]
    assert low < high == made.wall_s  # 6 trials at least, 20 at the cap
    assert made.gpu_hours == pytest.approx(20 * (1.0 + 30 * 2.0) * 0.25 / 3600)  # TrainConfig's 30 epochs
    lines = prediction.format_estimate(made)
    assert " to " in lines[0] and "at most (an upper bound: ASHA stops trials early)" in lines[0]
    assert lines[1].startswith("basis: first cell: start-up 1.0 s, epoch 2.0 s (2 timed)")
    document = json.loads(json.dumps(made.to_json()))
    jsonschema.Draft202012Validator(schema(ESTIMATE_SCHEMA)).validate(document)
    assert document["estimate"]["wall_s"] == pytest.approx(made.wall_s) and document["estimate"]["finish"]
    with pytest.raises(jsonschema.ValidationError):  # the schema refuses what it does not describe
        jsonschema.Draft202012Validator(schema(ESTIMATE_SCHEMA)).validate({**document, "estimate": {"wall_s": "1h"}})


def test_cost_axes_are_named_and_scaled_when_timed():
    cells = [
        {"model": m, "batch_size": b, "lr": lr, "seed": 0} for m in ("mlp", "cnn") for b in (32, 64) for lr in (1, 2)
    ]
    assert prediction.cost_axes(cells) == {"model": ["mlp", "cnn"], "batch_size": [32, 64]}  # not lr, not seed
    plan = prediction.Plan(cells, "builtin", epochs=[10] * 8)
    scaled = prediction.scale_by_axes(plan, {"model": {"mlp": 1.0, "cnn": 12.0}, "batch_size": {32: 1.0, 64: 0.5}})
    assert scaled.epochs == [10, 10, 5, 5, 120, 120, 60, 60]


def test_run_estimate_times_each_value_of_a_cost_axis_with_estimate_cells_all(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prediction.slots, "cluster_slots", lambda *flags: (2, "2 CPUs / 1, this machine", None, 0.0))
    monkeypatch.setattr("sweeps.engine.estimate.first_cell.speed_probe", lambda: 1.0)
    monkeypatch.setattr(sys, "argv", ["noise_grid.py", "--model", "mlp,cnn", "--estimate"])
    cells = [{"model": m, "seed": s, "epochs": 10} for m in ("mlp", "cnn") for s in (0, 1)]
    one_epoch = {"mlp": 1.0, "cnn": 5.0}  # seconds of an epoch; start-up 2 s each
    flags = dict(estimate_epochs=2, estimate_cells="all", json=False, storage_path=tmp_path, name="noise_grid")
    args = types.SimpleNamespace(**flags, cpus_per_trial=1.0, gpus_per_trial=0.0, max_concurrent=None, address=None)

    def first(epochs, limit_s, gpus):
        return timing([2.0 + one_epoch["mlp"] * e for e in range(1, epochs + 2)], code=None)

    timed = []
    code = prediction.run_estimate(
        args,
        prediction.Plan(cells, "builtin"),
        first,
        lambda cell, gpus: timed.append(cell) or timing([2.0 + one_epoch[cell["model"]]]),
    )
    out = capsys.readouterr().out
    assert code == 0 and timed == [{"model": "cnn", "seed": 0, "epochs": 10}]  # one epoch of the other model
    kept = json.loads((tmp_path / ".noise_grid.estimate.json").read_text())
    assert kept["argv"] == ["noise_grid.py", "--model", "mlp,cnn"]
    wall, fixed = kept["estimate"]["wall_s"], kept["estimate"]["basis"]["fixed_s"]
    per_trial = kept["estimate"]["basis"]["per_trial_s"]
    assert wall == pytest.approx(fixed + (2 + 50 + per_trial) + (2 + 10 + per_trial))  # a cnn trial, an mlp one a slot
    assert "one epoch of each model timed" in out and "cannot see through" not in out
    args.estimate_cells = "first"  # without it: the axis is named, its cells costed as the first
    prediction.run_estimate(args, prediction.Plan(cells, "builtin"), first, None)
    assert "the estimate cannot see through the model axis (mlp, cnn)" in capsys.readouterr().out


def test_launch_argv_leaves_out_what_changes_no_cost_and_keeps_the_commands_own_words():
    argv = ["run_command.py", "--estimate", "--estimate-epochs", "3", "--quiet", "--axis", "a=1", "--notify=x://y"]
    argv += ["--json", "--no-report", "--progress-every", "5", "--", "python", "t.py", "--json", "--quiet"]
    assert estimate_record.launch_argv(argv) == [
        "run_command.py",
        "--axis",
        "a=1",
        "--",
        "python",
        "t.py",
        "--json",
        "--quiet",
    ]


def test_the_estimate_is_kept_beside_the_experiment_and_taken_at_launch(tmp_path, monkeypatch):
    made = prediction.estimate_from_timing(
        prediction.Plan([{"seed": 0}], "command"), timing([1.0, 2.0], total=4), 1, "", 1.0, 0.0, 0.0
    )
    monkeypatch.setattr(sys, "argv", ["run_command.py", "--estimate", "--axis", "seed=0", "--", "x"])
    path = estimate_record.records.write_pending_estimate(
        str(tmp_path), "command", estimate_record.pending_record(made.to_json())
    )
    assert Path(path).parent == tmp_path and not (tmp_path / "command").exists()  # not in the experiment
    monkeypatch.setattr(sys, "argv", ["run_command.py", "--axis", "seed=0,1", "--", "x"])  # another sweep
    assert estimate_record.take_pending_estimate(str(tmp_path), "command") is None and not Path(path).exists()
    monkeypatch.setattr(sys, "argv", ["run_command.py", "--estimate", "--json", "--axis", "seed=0", "--", "x"])
    estimate_record.records.write_pending_estimate(
        str(tmp_path), "command", estimate_record.pending_record(made.to_json())
    )
    monkeypatch.setattr(sys, "argv", ["run_command.py", "--axis", "seed=0", "--quiet", "--", "x"])
    kept = estimate_record.take_pending_estimate(str(tmp_path), "command")
    assert kept["wall_s"] == pytest.approx(made.wall_s)
    assert (
        estimate_record.estimate_vs_actual(kept | {"wall_s": 110.0}, 100.0)
        == "wall time 0:01:40, estimated 0:01:50 (+10 %)"
    )
    assert estimate_record.estimate_vs_actual(None, 100.0) == "wall time 0:01:40"


def test_dry_run_estimate_learns_from_a_finished_experiment_and_prints_the_same_document(tmp_path, capsys):
    from tests.helpers.analysis_fixtures import trial_spec, write_experiment

    rows = [{"epoch": e, "val/acc": 0.5} for e in (1, 2, 3, 4)]
    specs = [trial_spec(f"t{s}", {"seed": s, "epochs": 4}, rows, start=4.0 * s, step_s=2.0) for s in range(2)]
    experiment = write_experiment(tmp_path, "pilot", specs)
    cells = [{"seed": s, "epochs": 10} for s in range(4)]
    flags = dict(estimate_from=str(experiment), cpus_per_trial=1.0, gpus_per_trial=0.0, max_concurrent=2, address=None)
    made = history_estimate.history_estimate(cells, str(tmp_path / "new"), **flags, epochs_of=lambda c: c["epochs"])
    assert (made.trials, made.epochs, made.slots) == (4, 40, 2)
    assert made.wall_s == pytest.approx(made.basis["fixed_s"] + 2 * 10 * 2.0)  # 2 s per epoch, 2 trials a slot
    args = types.SimpleNamespace(json=True, template=None, **flags)
    history_estimate.dry_run_estimate(args, cells, str(tmp_path / "new"))
    document = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema(ESTIMATE_SCHEMA)).validate(document)
    assert document["estimate"]["basis"]["history"] == str(experiment)
    missing = history_estimate.history_estimate(cells, str(tmp_path / "none"), **{**flags, "estimate_from": None})
    assert missing.startswith("no finished experiment at")


# --- timing the first cell, and bad input ----------------------------------------------------------------

TIMED = """
import sys, time
time.sleep(0.3)
for epoch in range(1, 9):
    time.sleep(0.4)
    print(f"epoch {epoch}/8 val_acc={epoch / 10}", flush=True)
"""


def test_time_command_stops_after_the_epochs_timed_and_reads_the_total(tmp_path, monkeypatch):
    from sweeps.engine.command_sweep.command_check import time_command

    (tmp_path / "timed.py").write_text(TIMED)
    monkeypatch.chdir(tmp_path)
    args = types.SimpleNamespace(
        template=[PY, "timed.py", "{seed}"], cells=[{"seed": 0}], objective=Objective("val_acc", test_metric=None),
        metric_pattern=[], step_key="epoch", metrics_from="output", in_place=False, storage_path=str(tmp_path / "runs"),
    )  # fmt: skip
    timed = time_command(args, {"seed": 0}, 2, 120.0)
    assert len(timed.epoch_ends) == 3 and timed.epochs_timed == 2  # stopped: 2 epochs after the first
    assert timed.exit_code is None and timed.epochs_total == 8
    assert timed.epoch_ends[0] >= 0.7 and timed.epoch_ends[-1] >= 1.5  # read after printed: sleeps bound them
    assert not (tmp_path / "runs").exists()  # nothing written where the sweep would write
    whole = time_command(args, {"seed": 0}, 20, 120.0)  # it ends first: all 8 epochs, exit code 0
    assert len(whole.epoch_ends) == 8 and whole.exit_code == 0
    # its epochs unknown before it runs (epochs=None): once it printed its total, --estimate-epochs of them; a
    # command that never prints one is timed to its end, its epochs counted
    args.estimate_epochs = 2
    assert len(time_command(args, {"seed": 0}, None, 120.0).epoch_ends) == 3
    (tmp_path / "timed.py").write_text(
        TIMED.replace("epoch {epoch}/8", "epoch={epoch}").replace("range(1, 9)", "range(1, 5)")
    )
    untold = time_command(args, {"seed": 0}, None, 120.0)
    assert len(untold.epoch_ends) == 4 and untold.exit_code == 0 and untold.epochs_total is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweeps/run_command.py", "--estimate", "--check", "--", PY, "x.py"], "--estimate times the first cell"),
        (["sweeps/noise_grid.py", "--estimate", "--estimate-epochs", "0"], "--estimate-epochs=0 must be"),
        (["sweeps/pbt.py", "--estimate", "--resume"], "--estimate predicts a new sweep"),
        (["sweeps/lr_search.py", "--json"], "--json applies to --estimate only"),
    ],
)
def test_bad_estimate_flags_get_one_line_and_exit_2(argv, message):
    proc = subprocess.run([PY, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and message in proc.stderr


# --- the failure gate's survival window -------------------------------------------------------------------


def test_the_gate_opens_when_a_first_command_survives_the_window_or_reports(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(failure_gate.time, "monotonic", lambda: now[0])
    gate = FailureGate(limit=3, survival_s=15.0)
    turns = [gate.enter(f"a{i}") for i in range(8)]
    assert turns == ["go"] * 3 + ["wait"] * 5  # 8 slots: 3 commands first
    now[0] += 60.0
    assert gate.enter("a3") == "wait"  # the window runs from the command's start, not the gate's go
    gate.started("a0")
    now[0] += 14.0
    assert gate.enter("a3") == "wait"
    now[0] += 1.0
    assert [gate.enter(f"a{i}") for i in range(3, 8)] == ["go"] * 5  # a0 ran 15 s: every slot starts
    assert gate.failed_early("a0", "1: Boom") == (False, False)  # a failure after the window is not a stop
    assert gate.failed_early("a1", "1: Boom") == (True, False)  # ... but the same error is not retried

    reported = FailureGate(limit=3, survival_s=15.0)
    assert [reported.enter(f"b{i}") for i in range(4)] == ["go", "go", "go", "wait"]
    reported.started("b0")
    reported.reported("b0")  # a metric before the window ends opens it too
    assert reported.enter("b3") == "go"


def test_a_command_crashing_at_start_on_eight_slots_starts_three_times_and_stops_the_sweep(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(failure_gate.time, "monotonic", lambda: now[0])
    gate, starts = FailureGate(limit=3, survival_s=15.0), 0
    for _ in range(4):  # 8 trials ask, over and over; each command crashes 2 s after its start
        for trial in range(8):
            if gate.enter(f"t{trial}") == "go":
                starts += 1
                gate.started(f"t{trial}")
                now[0] += 2.0
                gate.failed_early(f"t{trial}", "1: FileNotFoundError: ../data")
    assert starts == 3 and gate.stopping() and gate.enter("t7") == "stop"


# --- sweep efficiency per run ------------------------------------------------------------------------------

T0 = 1_780_000_000


def timed_trials(spans) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trial_id": [str(i) for i in range(len(spans))],
            "trial_name": [f"t{i}" for i in range(len(spans))],
            "status": "TERMINATED",
            "diverged": False,
            "start_time": pd.to_datetime([T0 + a for a, _ in spans], unit="s", utc=True),
            "end_time": pd.to_datetime([T0 + b for _, b in spans], unit="s", utc=True),
        }
    )


def test_an_experiment_extended_after_a_pause_reports_each_runs_efficiency():
    from analysis.figures.plots import plot_timeline

    # launch: 2 slots busy for 100 s; 90 minutes later the extension: 100 s and 50 s on its 2 slots
    trials = timed_trials([(0, 100), (0, 100), (5510, 5610), (5510, 5560)])
    runs = [(T0 - 20.0, "launch"), (T0 + 5490.0, "extension")]
    lines = efficiency_lines(trials, runs)
    assert lines[0].startswith("- sweep efficiency: 88% over 2 runs, the 1:30:10 between them left out")
    assert "run 1 (launch, " in lines[1] and lines[1].endswith("2 trials, 0:01:40, efficiency 100%")
    assert "run 2 (extension, " in lines[2] and "after a gap of 1:30:10" in lines[2]
    assert lines[2].endswith("2 trials, 0:01:40, efficiency 75%")
    assert efficiency_lines(trials, runs[:1]) == ["- sweep efficiency: 3% (busy slot-time / (slots × makespan))"]
    figure = plot_timeline(trials, runs=[start for start, _ in runs])
    ax = figure.axes[0]
    assert "88%" in ax.get_title() and "2 runs, gaps left out" in ax.get_title()
    assert any("1:30:10 left out" in text.get_text() for text in ax.texts)
    assert max(p.get_x() + p.get_width() for p in ax.patches) == pytest.approx(200 / 60)  # minutes, the gap cut
