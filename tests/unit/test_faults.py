"""Fault injection: killed workers and drivers, raising and diverging trials, torn and malicious
checkpoints, extending a finished grid, bad flags, and the dashboard's bind address."""

import json
import os
import shlex
from pathlib import Path

import pytest
import torch

from sweeps import noise_grid
from sweeps.engine.cluster.ray_start import secure_dashboard
from sweeps.engine.flags import UsageError
from sweeps.engine.run import resume, state_copy
from trainables import train_epochs
from trainables.checkpoints import load_latest_state
from trainables.config import TrialIdentity, config_hash
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import ran_to_end

DIVERGING = {"lr": 10.0, "grad_clip": 0.0, "momentum": 0.99}  # blows up within two epochs on digits


def save_state(folder: Path, epoch: int) -> None:
    folder.mkdir(parents=True)
    torch.save({"epoch": epoch, "model": {"w": torch.ones(2)}}, folder / "checkpoint.pt")


# --- divergence, without Ray -------------------------------------------------------------------


def test_diverging_run_stops_with_a_forensic_dump(tiny_config):
    history = list(train_epochs({**tiny_config, "epochs": 5, **DIVERGING}))
    metrics, dump = history[-1]
    assert metrics["diverged"] is True and "val/acc" not in metrics  # schedulers skip it
    assert len(history) < 5 + 1 and all(not m.get("diverged") for m, _ in history[:-1])
    assert dump["step"] >= 1 and dump["epoch"] == metrics["epoch"]
    assert isinstance(dump["last_finite_loss"], float)
    assert dump["gradients"], "the non-finite gradients are named"
    first = dump["gradients"][0]
    assert first["name"].endswith(("weight", "bias")) and first["nan"] + first["inf"] > 0
    json.dumps(dump)  # plain JSON, no NaN literals
    assert "NaN" not in json.dumps(dump)


# --- checkpoints: torn, missing, stale, malicious ---------------------------------------------


def test_torn_latest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    save_state(tmp_path / "checkpoint_000000", epoch=1)
    save_state(tmp_path / "checkpoint_000001", epoch=2)
    latest = tmp_path / "checkpoint_000001" / "checkpoint.pt"
    latest.write_bytes(latest.read_bytes()[:200])  # killed half-way through the copy
    with pytest.warns(UserWarning, match="resuming from epoch 1"):
        state = load_latest_state(tmp_path / "checkpoint_000001", tmp_path)
    assert state["epoch"] == 1


def test_missing_latest_checkpoint_falls_back_and_none_loadable_is_a_clear_error(tmp_path):
    save_state(tmp_path / "checkpoint_000000", epoch=1)
    with pytest.warns(UserWarning, match="checkpoint_000003"):
        assert load_latest_state(tmp_path / "checkpoint_000003", tmp_path)["epoch"] == 1
    (tmp_path / "checkpoint_000000" / "checkpoint.pt").write_bytes(b"PK\x03\x04 torn")
    with pytest.raises(RuntimeError, match=r"no checkpoint of this trial can be loaded.*checkpoint_000000"):
        load_latest_state(tmp_path / "checkpoint_000000", tmp_path)


def test_stale_experiment_state_resumes_from_the_newest_recorded_checkpoint(tmp_path):
    save_state(tmp_path / "checkpoint_000000", epoch=1)
    save_state(tmp_path / "checkpoint_000001", epoch=3)  # written after Tune last saved its state
    rows = [
        {"epoch": 1, "checkpoint_dir_name": "checkpoint_000000"},
        {"epoch": 3, "checkpoint_dir_name": "checkpoint_000001"},
    ]
    (tmp_path / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))  # the history has its row
    assert load_latest_state(tmp_path / "checkpoint_000000", tmp_path)["epoch"] == 3
    assert load_latest_state(None, tmp_path / "no_such_trial") is None


def test_a_checkpoint_whose_row_never_reached_the_history_is_not_resumed_from(tmp_path):
    """The worker stored checkpoint_000002 (epoch 3) and was killed before the driver logged its row:
    the retry resumes from epoch 2, so epoch 3 is trained and logged once, not lost."""
    for index in range(3):
        save_state(tmp_path / f"checkpoint_{index:06d}", epoch=index + 1)
    rows = [{"epoch": e, "checkpoint_dir_name": f"checkpoint_{e - 1:06d}"} for e in (1, 2)]
    (tmp_path / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_latest_state(tmp_path / "checkpoint_000001", tmp_path)["epoch"] == 2
    assert load_latest_state(None, tmp_path)["epoch"] == 2  # --resume with a snapshot older than every checkpoint
    (tmp_path / "result.json").unlink()
    assert load_latest_state(None, tmp_path) is None  # no row at all: the trial starts again


def test_a_pbt_exploit_loads_the_donors_checkpoint_not_the_members_newer_own(tmp_path):
    """PBT: the member at epoch 8 takes a better member's checkpoint of epoch 4; its own epoch-8 checkpoint
    (known to its history) must not win by its higher epoch, or the exploit copies nothing."""
    member, donor = tmp_path / "pbt_00001", tmp_path / "pbt_00002"
    save_state(member / "checkpoint_000001", epoch=8)
    (member / "result.json").write_text(json.dumps({"epoch": 8, "checkpoint_dir_name": "checkpoint_000001"}) + "\n")
    save_state(donor / "checkpoint_000000", epoch=4)
    assert load_latest_state(donor / "checkpoint_000000", member)["epoch"] == 4
    assert load_latest_state(member / "checkpoint_000001", member)["epoch"] == 8  # its own: unchanged


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_with_pickled_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "checkpoint_000000").mkdir()
    torch.save({"epoch": 9, "model": Evil(marker)}, tmp_path / "checkpoint_000000" / "checkpoint.pt")
    with pytest.raises(RuntimeError, match="UnpicklingError"):
        load_latest_state(tmp_path / "checkpoint_000000", tmp_path)
    assert not marker.exists()


# --- extend / skip existing, without Ray --------------------------------------------------------


def fake_trial(experiment: Path, name: str, config: dict, epochs_done: int, diverged=False) -> Path:
    trial = experiment / name
    trial.mkdir(parents=True)
    full = {"epochs": 3, **config}
    (trial / "params.json").write_text(json.dumps(full))
    (trial / "trial_config.json").write_text(json.dumps({"config_hash": config_hash(full), "config": full}))
    rows = [{"epoch": e, "val/acc": 0.5 + e / 10, "trial_id": name} for e in range(1, epochs_done + 1)]
    if diverged:
        rows.append({"epoch": epochs_done, "diverged": True})
    (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trial


def test_resume_of_a_finished_sweep_says_nothing_is_left(tmp_path, capsys, monkeypatch):
    from sweeps.engine.grid import plan

    monkeypatch.setattr(plan, "print_summary", lambda *a, **k: print("table"))
    cells = [{"epochs": 3, "noise_rate": r, "seed": 0} for r in (0.1, 0.2)]
    fake_trial(tmp_path, "sym_0.1_seed0", cells[0], 3)
    fake_trial(tmp_path, "sym_0.2_seed0", cells[1], 3)
    grid = plan.plan_grid(cells, {"noise_rate": [0.1, 0.2]}, str(tmp_path), skip_existing=True)
    assert plan.say_nothing_to_resume(grid, str(tmp_path), Objective(), TrialIdentity()) == 0
    assert f"nothing left to run: all 2 cells of {tmp_path} finished (--resume)" in capsys.readouterr().out

    fake_trial(tmp_path, "sym_0.3_seed0", {**cells[0], "noise_rate": 0.3}, 1)  # killed: --resume continues it
    grid = plan.plan_grid(cells, {"noise_rate": [0.1, 0.2]}, str(tmp_path), skip_existing=True)
    assert plan.say_nothing_to_resume(grid, str(tmp_path), Objective(), TrialIdentity()) is None
    grid = plan.plan_grid([*cells, {**cells[0], "noise_rate": 0.4}], {}, str(tmp_path), skip_existing=True)
    assert grid.todo and plan.say_nothing_to_resume(grid, str(tmp_path), Objective(), TrialIdentity()) is None


def test_no_report_prints_the_table_and_writes_no_report_folder_and_says_how_to_write_it(tmp_path, capsys):
    """--no-report (`RunOptions.report`): the sweep's table is printed, no report folder is written, and the
    last line names the command that writes it later; without the flag the same call writes report.md."""
    from sweeps.engine import run_flags
    from sweeps.engine.run.sweep_end import print_summary

    assert run_flags.run_options(noise_grid.parse_args([])).report is True
    assert run_flags.run_options(noise_grid.parse_args(["--no-report"])).report is False
    for rate in (0.1, 0.2):
        fake_trial(tmp_path, f"sym_{rate}_seed0", {"noise_type": "sym", "noise_rate": rate, "seed": 0}, 3)
    objective = Objective(test_metric=None)  # the fake trials report val/acc only
    print_summary(str(tmp_path), objective, report=False)
    out = capsys.readouterr().out
    assert "val/acc (%)" in out and "0.1" in out and "0.2" in out, out  # the table, one row per noise rate
    assert out.splitlines()[-1] == f"report: not written (--no-report); python -m analysis {tmp_path} writes it"
    assert not (tmp_path / "report").exists()
    spaced = tmp_path / "Drive's runs"  # the command is quoted for the shell: pasted, it names the folder
    fake_trial(spaced, "sym_0.1_seed0", {"noise_type": "sym", "noise_rate": 0.1, "seed": 0}, 3)
    print_summary(str(spaced), objective, report=False)
    command = capsys.readouterr().out.splitlines()[-1].split("; ")[1].removesuffix(" writes it")
    assert shlex.split(command) == ["python", "-m", "analysis", str(spaced)], command
    print_summary(str(tmp_path), objective)
    assert capsys.readouterr().out.splitlines()[-1] == f"report: {tmp_path / 'report' / 'report.md'}"
    assert (tmp_path / "report" / "report.md").is_file()


def test_plan_reuses_finished_cells_and_reruns_the_rest(tmp_path, capsys):
    cells = [{"epochs": 3, "noise_rate": r, "seed": 0} for r in (0.1, 0.2, 0.3, 0.4)]
    done = fake_trial(tmp_path, "sym_0.1_seed0", cells[0], 3)
    fake_trial(tmp_path, "sym_0.2_seed0", cells[1], 2)  # killed before the end: runs again
    fake_trial(tmp_path, "sym_0.3_seed0", cells[2], 1, diverged=True)  # would diverge again: reused
    todo, reused = resume.plan_cells(cells, tmp_path, skip_existing=True)
    assert [c["noise_rate"] for c in todo] == [0.2, 0.4]
    assert reused[config_hash(cells[0])] == str(done) and len(reused) == 2
    assert len(resume.plan_cells(cells, tmp_path, skip_existing=False)[0]) == 4
    assert config_hash({**cells[0], "checkpoint_every": 5}) == config_hash(cells[0])  # run-only key
    assert config_hash({**cells[0], "lr": 0.05}) == config_hash(cells[0])  # the default, spelled out
    assert resume.say_outcome(None, reused, "val/acc") == 1  # a diverged trial: exit code 1
    assert "diverged (not ranked): sym_0.3_seed0 at epoch 1" in capsys.readouterr().out
    del reused[config_hash(cells[2])]
    assert resume.say_outcome(None, reused, "val/acc") == 0
    assert resume.say_outcome(None, {}, "val/acc") == 1  # nothing reported val/acc


# --- bad input: refused before Ray starts, nothing written --------------------------------------


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--max-failures", "-1"], "--max-failures=-1 must be a whole number >= 0"),
        (["--fail-fast", "--max-failures", "3"], "--fail-fast stops at the first error"),
        (["--retry-errored"], "--retry-errored needs --resume"),
        (["--resume"], "--resume: no sweep to resume in"),
        (["--resume", "--no-skip-existing"], "--no-skip-existing .* contradicts"),
        (["--dashboard-host", "my-laptop"], "--dashboard-host='my-laptop' is not an IP address"),
        (["--name", "../elsewhere"], "--name='../elsewhere' must be a plain folder name"),
        (["--name", "x" * 5000], r"--name='x{40}'\.\.\. \(5000 characters\) is too long: at most 200 bytes"),
        (["--cpus-per-trial", "0"], "--cpus-per-trial=0.0 must be > 0"),
        (["--max-concurrent", "0"], "--max-concurrent=0 must be a whole number >= 1"),
        (["--noise-rates", "0.1,0.1"], "repeats a value"),
    ],
)
def test_bad_fault_flags_are_refused_before_ray_starts(argv, match, tmp_path):
    storage = tmp_path / "runs"
    with pytest.raises(UsageError, match=match):
        noise_grid.main([*argv, "--storage-path", str(storage)])
    assert not storage.exists()


def test_non_loopback_dashboard_warns_and_turns_on_token_auth(monkeypatch, capsys):
    # A plain dict, not the process environment: Ray's C++ side caches RAY_AUTH_MODE once read.
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    monkeypatch.setattr(os, "environ", env)
    secure_dashboard("127.0.0.1")
    assert "RAY_AUTH_MODE" not in env and capsys.readouterr().err == ""
    secure_dashboard("0.0.0.0")
    assert env["RAY_AUTH_MODE"] == "token"
    err = capsys.readouterr().err
    assert "anyone who can reach its port can run code" in err and "CVE-2023-48022" in err
    env["RAY_AUTH_MODE"] = "disabled"
    secure_dashboard("10.1.2.3")
    assert "RAY_AUTH_MODE=disabled was set" in capsys.readouterr().err


# --- a torn Tune experiment state (issue 55 item 4) ---------------------------------------------


def test_a_torn_experiment_state_is_put_back_from_its_last_whole_copy(tmp_path, capsys):
    state = tmp_path / "experiment_state-2026-11-28_09-40-43.json"
    whole = json.dumps({"trial_data": [["{}", "{}"]], "runner_data": {}, "stats": {}})
    state.write_text(whole)
    keeper = state_copy.KeepWholeState(str(tmp_path))
    keeper.keep()
    assert (tmp_path / (state.name + state_copy.WHOLE)).read_text() == whole
    state.write_text(whole[:20])  # a full disk cut Tune's next save mid-file
    keeper.keep()  # a torn save never replaces the whole copy
    assert (tmp_path / (state.name + state_copy.WHOLE)).read_text() == whole

    state_copy.restore_whole_state(str(tmp_path))
    assert state.read_text() == whole
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"warning: {state} is torn" in err and "last whole copy" in err
    state_copy.restore_whole_state(str(tmp_path))  # a whole state: nothing to say
    assert capsys.readouterr().err == ""


def test_a_torn_experiment_state_without_a_copy_is_one_line_naming_the_way_on(tmp_path):
    state = tmp_path / "experiment_state-2026-11-28_09-40-43.json"
    state.write_text('{"trial_data": [["{\\"trial_id\\": \\"x')
    with pytest.raises(UsageError, match=f"{state} is torn .* without --resume: finished trials are reused"):
        state_copy.restore_whole_state(str(tmp_path))


def test_a_trial_found_only_by_its_folder_finished_when_it_reached_its_epochs():
    assert ran_to_end({"training_iteration": 4}, {"epochs": 4})
    assert not ran_to_end({"training_iteration": 3}, {"epochs": 4})
    assert ran_to_end({"training_iteration": 3, "done": True}, {})  # Tune logged its end
    assert not ran_to_end({"training_iteration": 3}, {"command": "python train.py"})  # a script decides: unknown


def test_a_command_trial_in_no_state_reads_as_finished_when_the_driver_recorded_its_end(tmp_path):
    """A driver killed between Tune's saves leaves trials that ended in no experiment state; a command's history
    cannot say it ran to its end (no planned epochs), so `load_trials` called them interrupted, the summary left
    them out and a `--seeds auto` table counted fewer seeds (a loaded run of the kill test: 8 of 20 finished trials
    dropped, every cell at n = 1). The driver's `trial_end.json` (Tune's end, recorded at once) makes them finished
    for the tables and for `--status`; a trial without one stays interrupted."""
    from analysis import load_trials
    from analysis.status import read_status
    from trainables.experiment import records

    experiment = tmp_path / "auto"
    for seed in (0, 1):
        folder = experiment / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "params.json").write_text(json.dumps({"seed": seed}))
        row = {"val_acc": 80.0 + seed, "epoch": 1, "training_iteration": 1, "trial_id": f"t{seed}", "done": False}
        (folder / "result.json").write_text(json.dumps(row) + "\n")
    records.write_trial_end(str(experiment / "seed0"), "t0", 1795951540.0)
    trials = load_trials(str(experiment)).set_index("trial_id")
    assert trials.loc["t0", "status"] == "TERMINATED" and trials.loc["t0", "outcome"] == "finished"
    assert trials.loc["t1", "status"] == "RUNNING"
    records.write_settings(str(experiment), {"metric": "val_acc", "mode": "max", "total_trials": 2})
    counts = read_status(str(experiment))["status"]
    assert counts["finished"] == 1, counts  # seed1 is not: its end was never recorded


def test_a_restarted_trial_whose_end_the_driver_recorded_ends_at_once(tmp_path, monkeypatch, capsys):
    """`--resume` from a state saved before a trial ended restarts that trial: pytorch/examples'
    word_language_model trained all 4 epochs again after a kill, and a built-in trial on s3 (its newest
    checkpoint not the state's) logged epochs 9-12 twice. A restarted trial that finds its own `trial_end.json` in
    its folder on storage ends at once, saying so; another trial's record (same folder, other id) or none: it runs."""
    from types import SimpleNamespace

    from ray import tune

    from trainables.experiment import records, storage
    from trainables.experiment.trial_end import ended_before_restart

    folder = tmp_path / "seed2"
    folder.mkdir()
    monkeypatch.setattr(storage, "trial_storage_uri", lambda: str(folder))
    monkeypatch.setattr(tune, "get_context", lambda: SimpleNamespace(get_trial_id=lambda: "t2"))
    assert not ended_before_restart("seed2")  # no record: it runs
    records.write_trial_end(str(folder), "t9", 1795951540.0)
    assert not ended_before_restart("seed2")  # another trial's end
    records.write_trial_end(str(folder), "t2", 1795951540.0)
    assert ended_before_restart("seed2")
    assert capsys.readouterr().out == "seed2: ended before this restart (its trial_end.json): nothing is run again\n"
    monkeypatch.setattr(storage, "trial_storage_uri", lambda: None)  # outside a trial
    assert not ended_before_restart("seed2")


def test_a_restarted_trial_whose_history_holds_its_last_epochs_checkpoint_ends_at_once(tmp_path, monkeypatch, capsys):
    """A driver killed after a trial's last row was logged and before its `trial_end.json` (object storage: the
    trial's files are copied first): the resumed trial, given an older checkpoint, trained epochs 9-12 again (two
    fresh-clone CI runs, test_s3's killed grid). Its own row reporting the last epoch's checkpoint ends it at once;
    an earlier epoch's, another trial's row, or a row without a checkpoint does not."""
    import json
    from types import SimpleNamespace

    from ray import tune

    from trainables.experiment import storage
    from trainables.experiment.trial_end import final_epoch_recorded

    folder = tmp_path / "sym_0.1_seed0"
    folder.mkdir()
    monkeypatch.setattr(storage, "trial_storage_uri", lambda: str(folder))
    monkeypatch.setattr(tune, "get_context", lambda: SimpleNamespace(get_trial_id=lambda: "t1"))

    def history(*rows):
        (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    assert not final_epoch_recorded("sym_0.1_seed0", 12)  # no history
    row = lambda epoch, **k: {"epoch": epoch, "trial_id": "t1", "checkpoint_dir_name": f"checkpoint_{epoch:06d}", **k}  # noqa: E731
    history(row(4), row(8), {"epoch": 12, "trial_id": "t1", "checkpoint_dir_name": None})
    assert not final_epoch_recorded("sym_0.1_seed0", 12)  # epoch 12 logged without its checkpoint
    history(row(4), row(8), row(12, trial_id="t9"))
    assert not final_epoch_recorded("sym_0.1_seed0", 12)  # another trial's row
    assert capsys.readouterr().out == ""
    history(row(4), row(8), row(12))
    assert final_epoch_recorded("sym_0.1_seed0", 12)
    assert capsys.readouterr().out == (
        "sym_0.1_seed0: its history holds its last epoch's checkpoint (epoch 12): nothing is run again\n"
    )
    monkeypatch.setattr(storage, "trial_storage_uri", lambda: None)  # outside a trial
    assert not final_epoch_recorded("sym_0.1_seed0", 12)
