"""Monitoring: console progress, per-trial log lines, sweeps as Ray jobs, the dashboard in a browser."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import time
from types import SimpleNamespace

import pytest

from sweeps import noise_grid
from sweeps.engine.flags import UsageError
from sweeps.engine.run.monitoring import SweepProgress, format_duration, format_progress, sweep_status
from trainables.experiment.objective import Objective
from trainables.logs import log_epoch, trial_logger


class FakeTrial(SimpleNamespace):
    """What SweepProgress reads from a Tune Trial: status, config, last_result, metric_analysis, str(), and
    its resources (none: a CPU trial, whose line says `CPU` without a look at its `placement.json`)."""

    placement_group_factory = SimpleNamespace(required_resources={"CPU": 1.0})
    storage = SimpleNamespace(storage_filesystem=None, trial_fs_path=None)  # not local: no record read

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
    assert (s["running"], s["pending"], s["finished"], s["errored"], s["diverged"], s["total"]) == (2, 3, 1, 1, 1, 8)
    assert s["best"] == (0.90, "b")  # the best value any trial reached, not the latest
    assert s["epochs_done"] == 4 + 2 + 10 + 3 + 1
    # running and pending trials plan their 10 epochs, finished ones what they ran, 2 not created 10 each
    assert s["epochs_planned"] == 10 + 10 + 10 + 3 + 1 + 10 + 2 * 10
    assert [name for name, _, _ in s["running_trials"]] == ["b", "a"]  # best val/acc first


def test_a_tie_for_best_is_the_earliest_trial_in_any_listing_order():
    from types import SimpleNamespace

    trials = trials_of(*[((f"i{i}", "TERMINATED", 10), {"val_acc": 0.5}) for i in range(1, 301)])
    for i, trial in enumerate(trials):  # i1 started first
        trial.run_metadata = SimpleNamespace(start_time=1000.0 + i)
    assert sweep_status(trials, 300)["best"] == (0.5, "i1")
    assert sweep_status(sorted(trials, key=str), 300)["best"] == (0.5, "i1")  # status lists i1, i10, i100, ...
    assert sweep_status(trials[::-1], 300)["best"] == (0.5, "i1")
    from analysis.status import TrialRecord

    records = [
        TrialRecord(str(t), "TERMINATED", {}, t.last_result, t.metric_analysis, start=1000.0 + i)
        for i, t in enumerate(trials)
    ]
    assert sweep_status(records[::-1], 300)["best"] == (0.5, "i1")  # `status`'s trials read from Tune's snapshot


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
        "[0:01:00] 12 trials: 11 running, 0 pending, 1 finished, 0 errored, 0 diverged | "
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
    assert "sweep finished: 2 trials: 0 running, 0 pending, 1 finished, 1 errored" in lines[1]

    # a searcher that finished early (--seeds auto): the final line counts the trials that ran, not the plan
    early = SweepProgress(interval_s=0.0, quiet=True, stream=io.StringIO())
    early.setup(total_num_samples=32)
    early.on_experiment_end(trials=trials)
    line = early.stream.getvalue().splitlines()[-1]
    assert "sweep finished: 2 trials: 0 running, 0 pending, 1 finished, 1 errored" in line
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


def test_epochs_after_a_retry_are_counted_once_and_the_final_line_says_how_many_ran_again():
    """A lost node's trial restored from its epoch-1 checkpoint reports `training_iteration` 1, 2, 2, 3 (issue 55):
    3 epochs done, as planned, and the final line says 1 epoch ran again."""
    out = io.StringIO()
    progress = SweepProgress(interval_s=0.0, quiet=True, stream=out)
    trial = fake_trial("a", "RUNNING", epochs=3)
    trial.trial_id = "a1"
    for step in (1, 2, 2, 3):  # the second 2: after the retry
        trial.last_result = {"epoch": step, "training_iteration": step, "val/acc": 0.5}
        progress.on_trial_result(0, [trial], trial, trial.last_result)
    progress.on_trial_result(0, [trial], trial, {"training_iteration": 3, "command/no_retry": 1})  # a mark, no epoch
    trial.status = "TERMINATED"
    progress.on_experiment_end(trials=[trial])
    assert "epochs 3/3 (and 1 run again after retries) | ETA" in out.getvalue()
