"""Whole histories (issue 45): every row a trial logged is written, kept and read; a PBT member is not one
configuration. No Ray is started: Tune's loggers are driven with a stand-in trial, experiments are written
as Tune writes them (tests/helpers/analysis_fixtures.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.fs
import pytest

import analysis
from analysis.figures.packing import timeline
from analysis.reading.pbt_members import BEST_EPOCH, MEMBER
from analysis.tables.formatting import short_value
from tests.helpers.analysis_fixtures import pbt_experiment, trial_spec, write_experiment
from trainables import ray_private
from trainables.command.parse import StepContext, read_line
from trainables.experiment.objective import Objective
from trainables.experiment.records import JOINS_STEP_METRIC


class StandInTrial:
    """What Tune's JSON and CSV loggers read of a trial: its staging folder, its storage folder, its checkpoint."""

    def __init__(self, tmp_path: Path):
        self.local_path, self.checkpoint, self.config = str(tmp_path / "staging"), None, {"lr": 0.1}
        self.storage = SimpleNamespace(
            trial_fs_path=str(tmp_path / "storage"), storage_filesystem=pyarrow.fs.LocalFileSystem()
        )
        self.init_local_path()

    def init_local_path(self):
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


def iterations(path: Path) -> list[int]:
    return [json.loads(line)["training_iteration"] for line in path.read_text().splitlines()]


def test_a_restart_from_a_checkpoint_keeps_the_rows_logged_since_the_last_copy_to_storage(tmp_path):
    """Tune's JSON logger copies the storage file over the staging one at every start with a checkpoint
    (PBT's exploit): the rows logged since the last copy were lost. Ours keep the staging file."""
    trial = StandInTrial(tmp_path)
    json_logger, csv_logger = ray_private.history_keeping_loggers(JOINS_STEP_METRIC)
    for i in (1, 2, 3):
        for logger in (json_logger, csv_logger):
            logger.on_trial_result(0, [], trial, {"training_iteration": i, "val_acc": 0.1 * i})
    staged = Path(trial.local_path, "result.json")
    Path(trial.storage.trial_fs_path).mkdir()
    stale = "".join(line + "\n" for line in staged.read_text().splitlines()[:1])  # copied to storage at row 1
    Path(trial.storage.trial_fs_path, "result.json").write_text(stale)
    trial.checkpoint = object()  # PBT restores the member from another member's checkpoint
    json_logger.on_trial_start(0, [], trial)
    json_logger.on_trial_result(0, [], trial, {"training_iteration": 3, "val_acc": 0.9})
    assert iterations(staged) == [1, 2, 3, 3]
    # a new driver session (--resume) has no staging file yet: the storage copy is taken, as Tune does
    Path(trial.storage.trial_fs_path, "result.json").write_text(stale)
    fresh = StandInTrial(tmp_path / "resumed")
    fresh.storage = trial.storage
    fresh.checkpoint = object()
    json_logger.on_trial_start(0, [], fresh)
    assert iterations(Path(fresh.local_path, "result.json")) == [1]


def test_a_trial_started_again_in_the_session_finds_every_row_logged_so_far_on_its_storage(tmp_path):
    """A retried trial reads its history on storage (`StepReporter.after_restart`) to tell the rows logged
    before from those it reports again; Tune copies the staging file there only every few seconds, so the
    JSON logger copies it when the trial starts again, before the trial runs. A first start copies nothing."""
    trial = StandInTrial(tmp_path)
    json_logger, _ = ray_private.history_keeping_loggers(JOINS_STEP_METRIC)
    stored = Path(trial.storage.trial_fs_path, "result.json")
    json_logger.on_trial_start(0, [], trial)
    assert not stored.exists()
    json_logger.on_trial_result(0, [], trial, {"training_iteration": 1, "epoch": 1, "val_acc": 0.5})
    json_logger.on_trial_error(0, [], trial)  # its worker died: Tune retries it, from scratch
    json_logger.on_trial_start(0, [], trial)
    assert iterations(stored) == [1]
    json_logger.on_trial_result(0, [], trial, {"training_iteration": 1, "epoch": 2, "val_acc": 0.6})
    stored.write_text(stored.read_text()[:-9])  # a copy Tune's own copying tore: rewritten whole at the next start
    trial.checkpoint = object()  # PBT's exploit, or a retry from a checkpoint
    json_logger.on_trial_start(0, [], trial)
    assert iterations(stored) == [1, 1] and stored.read_bytes() == Path(trial.local_path, "result.json").read_bytes()


def test_a_final_block_joined_to_the_last_step_replaces_its_row_in_progress_csv(tmp_path):
    trial = StandInTrial(tmp_path)
    _, csv_logger = ray_private.history_keeping_loggers(JOINS_STEP_METRIC)
    for epoch in (1, 2):
        csv_logger.on_trial_result(0, [], trial, {"training_iteration": epoch, "epoch": epoch, "val_acc": 0.5})
    joined = {"training_iteration": 3, "epoch": 2, "val_acc": 0.6, "test_acc": 0.7, JOINS_STEP_METRIC: 1}
    csv_logger.on_trial_result(0, [], trial, joined)
    csv_logger.on_trial_result(0, [], trial, {"training_iteration": 4, "epoch": 3, "val_acc": 0.8})
    table = pd.read_csv(Path(trial.local_path, "progress.csv"))
    assert list(table["epoch"]) == [1, 2, 3] and list(table["val_acc"]) == [0.5, 0.6, 0.8]


def pbt_member_rows(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A PBT experiment whose member 0 restarted after iteration 4 from member 1's checkpoint of iteration 2
    (its iterations 3, 4 trained again); member 0's result.json lost rows 3-5, its progress.csv has all."""
    base = {"noise_type": "sym", "noise_rate": 0.5, "epochs": 6}
    own, copied = {**base, "lr": 0.01}, {**base, "lr": 0.02}
    iterations_ = [1, 2, 3, 4, 3, 4, 5, 6]
    accs = [0.5, 0.6, 0.95, 0.7, 0.8, 0.85, 0.9, 0.92]  # its best, 0.95, at iteration 3 of its own run
    rows = [
        {"epoch": it, "val/acc": acc, "config": own if n < 4 else copied}
        for n, (it, acc) in enumerate(zip(iterations_, accs))
    ]
    other = [{"epoch": e, "val/acc": 0.5 + 0.05 * e} for e in range(1, 7)]
    specs = [
        trial_spec("pbt_00000", copied, rows, trial_id="pbt_00000", logged_done=False),
        trial_spec("pbt_00001", copied, other, trial_id="pbt_00001", logged_done=False),
    ]
    experiment = write_experiment(
        tmp_path, "pbt", specs, record={"searcher": None, "scheduler": "PopulationBasedTraining"}
    )
    folder = next(experiment.glob("train_pbt_00000_*"))
    logged = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
    for n, row in enumerate(logged):  # as Tune logs them: the training iteration restarts with the checkpoint
        row["training_iteration"], row["iterations_since_restore"] = (
            iterations_[n],
            1 if n == 4 else n + 1 - 4 * (n > 4),
        )
    flat = [{k: v for k, v in row.items() if k != "config"} for row in logged]
    pd.DataFrame(flat).to_csv(folder / "progress.csv", index=False)
    (folder / "result.json").write_text(
        "".join(json.dumps(r) + "\n" for n, r in enumerate(logged) if n not in (2, 3, 4))
    )
    return experiment, flat


def test_a_pbt_members_history_is_every_row_of_progress_csv_when_result_json_lost_rows(tmp_path):
    experiment, logged = pbt_member_rows(tmp_path)
    with pytest.warns(UserWarning, match="result.json of .*pbt_00000.* lacks rows that progress.csv holds"):
        trials, history = analysis.load_experiment(experiment)
    member = history[history["trial_id"] == "pbt_00000"]
    assert list(member["training_iteration"]) == [r["training_iteration"] for r in logged]  # row for row
    assert list(member["val/acc"]) == [r["val/acc"] for r in logged]
    row = trials.set_index("trial_id").loc["pbt_00000"]
    assert row["best/val/acc"] == 0.95 and row[BEST_EPOCH] == 3
    # its lr at that epoch: the rows of progress.csv alone take their run's config (its rows before the restart)
    assert row["config/lr"] == 0.01 and row[MEMBER] == "pbt_00000"


def test_a_pbt_table_has_one_row_per_member_with_the_config_at_its_best_epoch(tmp_path):
    experiment = pbt_experiment(tmp_path, epochs=4)
    trials, history = analysis.load_experiment(experiment)
    member = trials.set_index("trial_id").loc["pbt42_00000"]
    assert member[BEST_EPOCH] == 4 and member["config/lr"] == 0.12  # its best came after the exploit
    assert trials.attrs["pbt"]["params"] == ["lr", "weight_decay"]
    text = analysis.sweep_summary(experiment, analysis.Objective(test_metric=None))
    assert "member" in text.splitlines()[1] and "PBT: one row per member" in text
    best = text.splitlines()[-1]
    assert best.startswith("best configuration by best val/acc over epochs: member=pbt_00003,")
    assert best.endswith("its best val/acc at epoch 4")


def test_pbt_learning_curves_draw_each_row_and_break_where_a_member_restarted(tmp_path):
    experiment, _ = pbt_member_rows(tmp_path)
    with pytest.warns(UserWarning):
        trials, history = analysis.load_experiment(experiment)
    fig = analysis.plot_learning_curves(history, trials, analysis.Objective())
    line = next(li for li in fig.axes[0].lines if li.get_label() == "pbt_00000")
    xs = list(line.get_xdata())
    assert [x for x in xs if not math.isnan(x)] == [1, 2, 3, 4, 3, 4, 5, 6]
    assert math.isnan(xs[4])  # no straight line from epoch 4 back to epoch 3


def test_a_paused_pbt_member_holds_no_timeline_slot(tmp_path):
    """Two CPU slots, three members taking turns: the timeline packs their stretches into two slots."""
    base = {"noise_type": "sym", "noise_rate": 0.5, "epochs": 4}
    specs = [
        trial_spec(f"pbt_{k:05d}", {**base, "lr": 0.1 * (k + 1)}, [{"val/acc": 0.5}] * 4, trial_id=f"pbt_{k:05d}")
        for k in range(3)
    ]
    experiment = write_experiment(tmp_path, "pbt", specs, record={"scheduler": "PopulationBasedTraining"})
    # member 2 ran while member 0 was paused (after its second epoch): rewrite their times so they interleave
    for k, gaps in ((0, [0, 0, 20, 0]), (2, [10, 0, 0, 0])):
        folder = next(experiment.glob(f"train_pbt_{k:05d}_*"))
        rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        clock = rows[0]["timestamp"] - 1
        for row, gap in zip(rows, gaps):
            clock += gap + 1
            row["timestamp"] = clock
        (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trials = analysis.load_trials(experiment)
    rows = timeline(trials)
    assert rows["slot"].nunique() == 2  # not one slot per member
    assert list(rows["trial_id"].value_counts().sort_index()) == [2, 1, 1]  # member 0 ran in two stretches


def test_picture_titles_show_short_values():
    assert [short_value(v) for v in (8.7e-4, 1e-5, 0.5, 0.0137949, "sym", 3)] == [
        "8.7e-4",
        "1e-5",
        "0.5",
        "0.014",
        "sym",
        "3",
    ]
    assert short_value(np.float64(0.784538)) == "0.78"


def test_transformers_5_trainer_console_dicts_give_one_result_per_epoch_without_trainer_state():
    """save_strategy="no": no trainer_state.json, only what the Trainer prints (values quoted in transformers 5)."""
    printed = [
        "{'loss': '0.6931', 'grad_norm': '1.234', 'learning_rate': '4.5e-05', 'epoch': '1.0'}",
        "{'eval_loss': '0.3431', 'eval_accuracy': '0.874', 'eval_runtime': '1.2', 'epoch': '1.0'}",
        "{'loss': '0.5', 'grad_norm': '1.1', 'learning_rate': '2e-05', 'epoch': '2.0'}",
        "{'eval_loss': '0.2865', 'eval_accuracy': '0.9', 'eval_runtime': '1.1', 'epoch': '2.0'}",
        "{'train_runtime': '12.3', 'train_samples_per_second': '100.5', 'train_loss': '0.55', 'epoch': '2.0'}",
    ]
    context = StepContext("epoch", objective=Objective("eval_accuracy", test_metric=None))
    results = [r for line in printed for r in context.feed(line)] + context.close()
    assert [(r["epoch"], r["eval_accuracy"]) for r in results[:2]] == [(1.0, 0.874), (2.0, 0.9)]
    assert results[2]["train_loss"] == 0.55 and results[2]["epoch"] == 2.0  # the run's summary: its final block
    assert read_line("{'lr': 0.1, 'data_path': '../datasets'}", "epoch")[0] == {}  # a configuration


def test_rows_a_command_logged_after_tune_stopped_it_join_its_history(tmp_path):
    """ASHA stopped the trial on its epoch-1 result; its command had run epochs 2 and 3 and a final test block
    (joined to epoch 3): `late_rows.json` holds its last rows, the history adds those after epoch 1."""
    rows = [{"epoch": 1, "val_acc": 0.5}]
    experiment = write_experiment(tmp_path, "asha", [trial_spec("t0", {"lr": 0.1}, rows)], metric="val_acc")
    folder = next(experiment.glob("train_*"))
    late = [{"epoch": e, "val_acc": 0.5 + e / 10, "timestamp": 1} for e in (1, 2, 3)]
    late.append({"epoch": 3, "val_acc": 0.8, "test_acc": 0.7, JOINS_STEP_METRIC: 1, "timestamp": 1})
    (folder / "late_rows.json").write_text(json.dumps({"rows": late}))
    trials, history = analysis.load_experiment(experiment)
    assert list(history["epoch"]) == [1, 2, 3] and list(history["training_iteration"]) == [1, 2, 4]
    assert list(history["val_acc"]) == [0.5, 0.7, 0.8] and history["test_acc"].iloc[-1] == 0.7
    assert trials["iterations"].iloc[0] == 4 and trials["last/val_acc"].iloc[0] == 0.8


def test_a_command_trial_keeps_its_last_rows_once_tune_stops_it(tmp_path, monkeypatch):
    """Tune stops the trial while it reports epoch 2 (its report raises SystemExit): epochs 2 and 3, which the
    command already wrote, go to late_rows.json with epoch 1, in one write before `report_new` returns (Tune's
    stop waits for that, then removes the worker), and nothing more is sent to Tune."""
    from trainables.command import runner, step_reporter

    sent, writes = [], []

    def report(metrics, checkpoint):
        if metrics["epoch"] == 2:
            raise SystemExit(0)  # as Tune's report does once the trial is stopped
        sent.append(metrics["epoch"])

    monkeypatch.setattr(runner.tune, "report", report)
    write_late_rows = step_reporter.records.write_late_rows
    monkeypatch.setattr(step_reporter.records, "write_late_rows", lambda *a: writes.append(a) or write_late_rows(*a))
    reporter = runner.StepReporter("epoch", tmp_path)
    assert not reporter.report_new([{"epoch": e, "val_acc": 0.5 + e / 10} for e in (1, 2, 3)])
    assert sent == [1] and reporter.stopped and len(writes) == 1
    late = json.loads((tmp_path / "late_rows.json").read_text())["rows"]
    assert [(r["epoch"], r["val_acc"]) for r in late] == [(1, 0.6), (2, 0.7), (3, 0.8)]


def test_tunes_stop_of_a_command_trial_waits_for_an_exited_commands_last_rows_not_a_running_ones(tmp_path, monkeypatch):
    """`holding_stop` installs Tune's stop wait (at most LATE_ROWS_WAIT_S in all): for the batch being reported, and
    once the command has exited, until the block is left (its last rows read); a running command is not waited
    for after the batch (it is ended; the worker goes); nothing holds once the block is left, by SystemExit too.
    Each stop runs in a thread, as Tune's does on the actor's main thread; `join` deadlines, no timed sleeps."""
    import threading

    from trainables.command import step_reporter

    held = {}
    monkeypatch.setattr(step_reporter.ray_private, "wait_in_trial_stop", lambda wait, s: held.update(wait=wait, s=s))
    reporter = step_reporter.StepReporter("epoch", tmp_path)
    exited = threading.Event()
    reporter.command_exited = exited.is_set

    def stop() -> threading.Thread:
        thread = threading.Thread(target=held["wait"], args=(60.0,), daemon=True)
        thread.start()
        return thread

    with pytest.raises(SystemExit):
        with reporter.holding_stop():
            assert held["s"] == step_reporter.LATE_ROWS_WAIT_S
            running = stop()  # the command runs, no batch is being reported: no wait
            running.join(30)
            assert not running.is_alive()
            reporter.idle.clear()  # a batch is being reported: the stop waits for it
            during_batch = stop()
            during_batch.join(0.3)
            assert during_batch.is_alive()
            exited.set()  # ... and the command has exited meanwhile: then for its last rows too
            reporter.idle.set()
            during_batch.join(0.3)
            assert during_batch.is_alive()
            raise SystemExit(0)  # as train_command ends a stopped trial, leaving the block
    during_batch.join(30)
    assert not during_batch.is_alive()
    after = stop()
    after.join(30)
    assert not after.is_alive()


def test_a_stopped_commands_late_rows_make_it_finished_only_when_it_ended_by_itself():
    """ASHA stopped the trial at its first epoch; its command logged 2 more rows (late_rows.json). Had it exited by
    itself (the rows read at its end), it ran its whole course: finished. Ended mid-run by the stop (`cut`): pruned."""
    from analysis.reading.trial_outcomes import _ran
    from trainables.experiment.outcome import trial_outcome

    trial = {"tail": {"training_iteration": 1, "val_acc": 0.5}, "nonfinite": False, "late": 2}
    ended_by_itself, cut = _ran({**trial, "late_cut": False}), _ran({**trial, "late_cut": True})
    assert ended_by_itself["training_iteration"] == 3 and cut["training_iteration"] == 1
    assert trial_outcome("TERMINATED", ended_by_itself, stop_at=1) == "finished"
    assert trial_outcome("TERMINATED", cut, stop_at=1) == "pruned"


def test_a_torn_result_json_is_read_to_its_last_whole_line_and_the_rest_from_progress_csv(tmp_path):
    """A result.json cut mid-line (a torn copy, a full disk) lost its best epoch: its best read 0.61 instead of
    0.81 (issue 55). Its whole lines are read, the rows after them from progress.csv, with a warning naming it."""
    accs = [0.5, 0.61, 0.7, 0.81, 0.75]
    rows = [{"epoch": n + 1, "val/acc": acc} for n, acc in enumerate(accs)]
    experiment = write_experiment(tmp_path, "grid", [trial_spec("a", {"lr": 0.1, "epochs": 5}, rows)])
    folder = next(p for p in experiment.iterdir() if (p / "result.json").exists())
    logged = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
    pd.DataFrame([{k: v for k, v in r.items() if k != "config"} for r in logged]).to_csv(
        folder / "progress.csv", index=False
    )
    text = (folder / "result.json").read_text()
    cut = text.index("\n", text.index("\n") + 1) + 40  # two whole lines, then 40 bytes of the third
    (folder / "result.json").write_text(text[:cut])
    with pytest.warns(UserWarning, match=f"result.json of {folder.name} is cut short"):
        trials, history = analysis.load_experiment(experiment)
    assert list(history["val/acc"]) == accs and history["val/acc"].max() == 0.81
    assert list(history["epoch"]) == [1, 2, 3, 4, 5]
