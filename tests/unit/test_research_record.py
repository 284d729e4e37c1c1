"""The research record (docs/research-record.md): provenance per run, --notify messages, --dry-run's estimate."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reading import provenance
from analysis.reading.provenance import changed_files, format_provenance
from sweeps.engine.flags import UsageError, check_notify_urls
from sweeps.engine.run import notify
from sweeps.engine.sweep_records import provenance_capture
from tests.helpers.research_record import SCRIPT, closed_port_url, git_repo
from trainables.experiment import release

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# --- fast: provenance and notifications without Ray -------------------------------------------


def test_collect_records_commit_branch_diff_and_untracked_files_of_the_scripts_repo(tmp_path):
    repo = git_repo(tmp_path / "repo")
    assert provenance_capture.code_folder({"data": None}) == str(ROOT)  # a built-in sweep: this project
    folder = provenance_capture.code_folder({"template": [PY, "train.py", "--seed", "{seed}"], "cwd": str(repo)})
    record, patch = provenance_capture.collect(folder)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert record["code"]["commit"] == head and record["code"]["branch"] == "main"
    assert list(record["code"]["diff_files"]) == ["train.py"] and record["code"]["untracked"] == ["notes.py"]
    assert "+# lr warm-up tried" in patch
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["packages"]["ray"] == record["versions"]["ray"]
    assert record["command"].startswith(PY)
    assert record["nodes"][0]["host"] == socket.gethostname()


def test_record_run_writes_a_record_and_patch_that_provenance_prints(tmp_path, capsys):
    repo, experiment = git_repo(tmp_path / "repo"), str(tmp_path / "runs" / "exp")
    params = {"template": [PY, "train.py"], "cwd": str(repo)}
    provenance_capture.record_run(experiment, params)
    (repo / "train.py").write_text(SCRIPT)  # the change undone: train.py differs from the first run
    second = provenance_capture.record_run(experiment, params)
    assert "code changed since the previous run: train.py" in capsys.readouterr().out
    assert second["code"]["diff_files"] == {}
    text = format_provenance(experiment)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert text.count(f"commit {head} (branch main)") == 2 and text.count("+# lr warm-up tried") == 1
    assert "code changed since the previous run: train.py" in text
    assert text.count(f"ran by: {release.label(release.release())}") == 2  # raysweep's version and commit
    assert provenance.releases(experiment) == [release.release()] * 2


def test_the_record_lists_code_not_outputs_and_the_changed_line_is_one_line_with_a_count(tmp_path, capsys):
    repo, experiment = git_repo(tmp_path / "repo"), tmp_path / "repo" / "runs" / "command"  # runs/ not ignored
    params = {"template": [PY, "train.py"], "cwd": str(repo)}
    provenance_capture.record_run(str(experiment), params)
    for trial in range(40):  # trial folders with files and links to every entry of the folders around
        (experiment / f"seed{trial}" / "work_tree").mkdir(parents=True)
        (experiment / f"seed{trial}" / "params.json").write_text("{}")
        (experiment / f"seed{trial}" / "work_tree" / "other_users_tmp").symlink_to(tmp_path)
    (repo / "runs" / "command_oom_gpu0.5").mkdir()
    (repo / "runs" / "command_oom_gpu0.5" / "result.json").write_text("{}")
    (repo / "wandb").mkdir()
    (repo / "wandb" / "run.py").write_text("")  # a tracker's output, as the snapshot leaves it out
    (repo / "data").mkdir()
    (repo / "data" / "labels.csv").write_text("0,1\n")  # data: linked by the snapshot, not code
    (repo / "best.ckpt").write_text("weights")
    (repo / "link.py").symlink_to(repo / "train.py")
    (repo / "models").mkdir()
    for i in range(300):
        (repo / "models" / f"m{i:03d}.py").write_text("")  # new untracked code: named up to the cap, then counted
    second = provenance_capture.record_run(str(experiment), params)
    untracked = second["code"]["untracked"]
    assert untracked[:2] == ["models/m000.py", "models/m001.py"]  # sorted: notes.py is among the counted
    assert len(untracked) == provenance_capture.MAX_UNTRACKED and second["code"]["untracked_more"] == 101
    assert all(f.startswith("models/m") for f in untracked), untracked
    written = sorted((experiment / "provenance").glob("run-*.json"))[-1]
    assert written.stat().st_size < 50_000, written.stat().st_size
    out = capsys.readouterr().out
    assert out.count("code changed since the previous run") == 1, out
    assert re.fullmatch(  # the names within the cap are compared: the rest only counted
        rf"code changed since the previous run: models/m000.py, models/m001.py and \d+ more: "
        rf"python -m analysis {re.escape(str(experiment))} --provenance\n",
        out,
    ), out


def test_the_changed_line_quotes_the_experiment_folder_for_the_shell():
    """A folder with a space or a quote in its name is one shell word in the printed command."""
    folder = "/data/Drive's runs/command"
    command = provenance_capture.changed_line(["train.py"], folder).split(": ", 2)[2]
    assert shlex.split(command) == ["python", "-m", "analysis", folder, "--provenance"], command


def test_a_process_start_time_is_read_to_a_clock_tick_not_to_the_whole_second_of_the_boot_time():
    """The start a new process reads of itself lies between the parent's clock before and after it ran: psutil's
    create_time (boot time in whole seconds) read 0.98 s early on a machine that booted at .98 of a second."""
    import time

    code = "from sweeps.engine.sweep_records.provenance_capture import process_start_time; print(process_start_time())"
    before = time.time()
    out = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    after = time.time()
    assert before - 0.02 <= float(out) <= after  # one clock tick (10 ms) of rounding, and some slack for it


def test_changed_files_names_the_files_whose_diff_or_commit_changed():
    before = {"code": {"diff_files": {"a.py": "1", "b.py": "2"}, "untracked": ["n.py"]}}
    after = {"code": {"diff_files": {"a.py": "1", "b.py": "3"}, "untracked": [], "since_previous": ["c.py"]}}
    assert changed_files(before, after) == ["b.py", "c.py", "n.py"]
    assert changed_files(before, before) == []


def test_notify_urls_are_recorded_and_said_by_scheme_and_host_only_and_the_continue_command_leaves_them_out():
    from analysis.reading.driver_record import continue_advice
    from analysis.status import _quoted_command
    from trainables.experiment.redaction import redact_url, redacted_argv

    assert redact_url("json://someone:pa55@hooks.example.com:8080/x?token=t0k") == "json://hooks.example.com"
    assert redact_url("json://u:p@127.0.0.1:9/") == "json://127.0.0.1"
    assert redact_url("slack://T0k3nA/T0k3nB/T0k3nC") == "slack://<redacted>"  # the first token is no host
    assert redact_url("ntfy://my-private-topic") == "ntfy://<redacted>"
    assert redact_url("not a url") == "<redacted>"
    argv = ["/v/raysweep", "run", "--notify", "json://u:pa55@h.io/", "--notify=mailto://u:pa55@gmail.com", "--"]
    argv += ["python", "t.py", "--notify", "x://u:keep@h.io"]  # the command's own words stay
    assert redacted_argv(argv) == [
        *["/v/raysweep", "run", "--notify", "json://h.io", "--notify=mailto://gmail.com", "--"],
        *["python", "t.py", "--notify", "x://u:keep@h.io"],
    ]
    counts = {"interrupted": 1}
    advice = continue_advice({"argv": redacted_argv(argv)}, counts, "Ctrl-C")
    assert "gmail" not in advice and "h.io/" not in advice and "x://u:keep@h.io" in advice
    assert advice.endswith(" (add your --notify URLs again, which are not recorded)")
    assert _quoted_command(advice) == (
        "continue with: `/v/raysweep run --resume -- python t.py --notify x://u:keep@h.io` "
        "(add your --notify URLs again, which are not recorded)"
    )


def test_a_bad_notify_url_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="'slackk://x'"):
        check_notify_urls(["json://127.0.0.1:9/", "slackk://x"])


def test_a_driver_crash_sends_one_stop_message_naming_the_exception(receiver, monkeypatch):
    from sweeps.engine.run import process_exit

    def crash(argv):
        raise RuntimeError("the head node went away")

    notify.watch((receiver.url,), "noise_grid")
    monkeypatch.setattr(sys, "argv", ["sweep"])
    with pytest.raises(RuntimeError):
        process_exit.run_main(crash)  # re-raised after the message: Python's traceback, exit code 1
    notify.sweep_stopped(RuntimeError("again"))  # told once only
    assert len(receiver.messages) == 1
    assert receiver.messages[0]["title"] == "sweep noise_grid stopped"
    assert "RuntimeError: the head node went away" in receiver.messages[0]["message"]


def test_undeliverable_notification_is_one_warning_line(capsys):
    notify.watch((closed_port_url(),), "s")
    assert notify.send("t", "b", "info") is False
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("warning: --notify")


def test_estimate_scales_seconds_per_step_by_epochs_and_places_trials_longest_first():
    from sweeps.engine.estimate.history_estimate import makespan, trial_seconds

    per_step = {(("lr", 0.1),): 2.0, None: 1.0, "steps": 3.0}
    epochs = lambda cell: cell.get("epochs", 30)  # noqa: E731
    assert trial_seconds({"lr": 0.1, "epochs": 5}, per_step, epochs) == 10.0  # same config, other epochs
    assert trial_seconds({"lr": 0.5, "epochs": 5}, per_step, epochs) == 5.0  # unseen config: the mean
    assert trial_seconds({"lr": 0.5}, per_step) == 3.0  # a command: the history's mean steps
    assert makespan([2, 3, 2, 3, 2], 2) == 7.0  # LPT: 3|3, 2|2, then 2 on one slot
    assert makespan([4.0], 8) == 4.0
