"""A command trial's working folder is the launch folder's copy in the launch folder's place
(`trainables/command/workdir.py`): relative paths through `..` read and write what they would from the
launch folder, inside the repository and beside it. Repo-like layouts under tmp_path."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.repos import make_layout
from trainables.command.workdir import MIRROR, MissingOnNode, fill_work_dir, keep_new_paths, mirror_top, snapshot_code


def test_the_mirror_reaches_up_to_the_repos_parent_and_at_least_two_levels(tmp_path):
    launch = make_layout(tmp_path)
    assert mirror_top(launch.resolve()) == tmp_path.resolve()  # repo's parent = 2 levels up
    (launch / "deep" / "er").mkdir(parents=True)
    assert mirror_top((launch / "deep" / "er").resolve()) == tmp_path.resolve()  # 4 levels up: the repo's parent
    assert mirror_top(tmp_path.resolve()) == tmp_path.resolve().parents[1]  # no repository: 2 levels


def test_relative_paths_resolve_as_from_the_launch_folder_and_writes_through_dotdot_land_there(tmp_path):
    launch = make_layout(tmp_path / "home")
    snapshot_code(launch, tmp_path / "code")
    work = fill_work_dir(tmp_path / "code", tmp_path / "trial" / "work")
    assert work == tmp_path / "trial" / MIRROR / "repo" / "mnist" and (tmp_path / "trial" / "work").resolve() == work
    for relative in ("../data/MNIST/raw/train.txt", "../configs/x.yaml", "../helper.py", "../../datasets/noisy/0.txt"):
        assert (work / relative).read_bytes() == (launch / relative).read_bytes(), relative
    (work / "../data/MNIST/raw/t10k.txt").write_text("downloaded")  # a download through `..`: the real folder
    assert (launch / "../data/MNIST/raw/t10k.txt").read_text() == "downloaded"
    (work / "main.py").write_text("edited")  # a write in the working folder: the trial's own
    (work / "checkpoint.json").write_text("{}")
    assert "edited" not in (launch / "main.py").read_text() and not (launch / "checkpoint.json").exists()
    again = fill_work_dir(tmp_path / "code", tmp_path / "trial" / "work")  # a retry keeps what the trial wrote
    assert again == work and (work / "main.py").read_text() == "edited"


def test_a_path_the_trial_does_not_read_cannot_fail_it(tmp_path, monkeypatch, capsys):
    launch = make_layout(tmp_path)
    (launch / "data").mkdir()
    (launch / "data" / "train.txt").write_text("a b")  # linked: a folder named like data, no Python in it
    manifest = snapshot_code(launch, tmp_path / "code")
    assert manifest["linked"] == ["data"]
    assert manifest["around"] == {".": [], "repo": ["configs", "data"]}  # names inside the repository only
    (tmp_path / "datasets" / "noisy" / "0.txt").unlink()
    (tmp_path / "datasets" / "noisy").rmdir()
    (tmp_path / "datasets").rmdir()  # a folder beside the repository, gone after launch
    (tmp_path / "repo" / "configs" / "x.yaml").unlink()
    (tmp_path / "repo" / "configs").rmdir()  # and one beside the launch folder
    shutil.rmtree(launch / "data")  # and the linked data, which this command does not name
    command = ["python", "main.py", "--lr", "0.1"]
    work = fill_work_dir(tmp_path / "code", tmp_path / "a" / "work", command)  # the launching node: no check
    assert (work / "main.py").exists() and capsys.readouterr().err == ""
    monkeypatch.setattr("trainables.command.workdir.socket.gethostname", lambda: "node2")
    fill_work_dir(tmp_path / "code", tmp_path / "b" / "work", command)  # another node: a warning in its log
    warning = capsys.readouterr().err
    assert warning.startswith(f"warning: {tmp_path.resolve() / 'repo' / 'configs'}, {launch.resolve() / 'data'}")
    assert "missing on node node2 (present on " in warning
    with pytest.raises(MissingOnNode, match=rf"^{launch.resolve() / 'data'}: missing on node node2 .*names it"):
        fill_work_dir(tmp_path / "code", tmp_path / "c" / "work", [*command, "--data=data/train.txt"])
    shutil.rmtree(tmp_path / "repo")  # the whole repository: still only a warning, naming the folder above
    fill_work_dir(tmp_path / "code", tmp_path / "d" / "work", command)
    assert capsys.readouterr().err.startswith(f"warning: {tmp_path.resolve() / 'repo'}, {launch.resolve() / 'data'}:")


def test_what_a_trial_creates_through_dotdot_is_moved_where_the_shell_would_put_it(tmp_path):
    launch = make_layout(tmp_path)
    snapshot_code(launch, tmp_path / "code")
    work = fill_work_dir(tmp_path / "code", tmp_path / "a" / "work")
    (work / "../cache/MNIST").mkdir(parents=True)  # `../cache` did not exist: made in the trial's mirror
    (work / "../cache/MNIST/train.bin").write_text("downloaded")
    (work / "../../new.txt").write_text("beside the repo")
    other = fill_work_dir(tmp_path / "code", tmp_path / "b" / "work")  # started before the first one ended
    (other / "../cache").mkdir()
    moved = keep_new_paths(tmp_path / "code", tmp_path / "a" / "work")
    assert sorted(moved) == sorted([tmp_path.resolve() / "new.txt", tmp_path.resolve() / "repo" / "cache"])
    assert (launch / "../cache/MNIST/train.bin").read_text() == "downloaded"
    assert (work / "../cache/MNIST/train.bin").read_text() == "downloaded"  # still there, through a link
    assert keep_new_paths(tmp_path / "code", tmp_path / "b" / "work") == []  # the real one is there now: kept apart
    later = fill_work_dir(tmp_path / "code", tmp_path / "c" / "work")
    assert (later / "../cache/MNIST/train.bin").read_text() == "downloaded"


def test_check_fetches_data_through_dotdot_once_for_the_sweep(tmp_path, monkeypatch, capsys):
    from sweeps import run_command

    launch = make_layout(tmp_path)
    (launch / "fetch.py").write_text(
        "import os\nos.makedirs('../mnist_data', exist_ok=True)\n"
        "open('../mnist_data/train.bin', 'w').write('x')\nprint('epoch=1 val_acc=0.5')\n"
    )
    monkeypatch.chdir(launch)
    argv = ["--check", "--seeds", "1", "--storage-path", str(tmp_path / "out")]
    assert run_command.main(argv + ["--", sys.executable, "fetch.py", "--seed", "{seed}"]) == 0
    assert (tmp_path / "repo" / "mnist_data" / "train.bin").read_text() == "x"
    assert (
        f"--check: {tmp_path.resolve() / 'repo' / 'mnist_data'} (created through `..`) kept" in capsys.readouterr().out
    )


@pytest.mark.parametrize("storage, shared_fs", [("s3://bucket/runs/command", True), ("LOCAL", False)])
def test_without_a_shared_folder_the_snapshot_is_the_jobs_runtime_env_working_dir(
    tmp_path, monkeypatch, storage, shared_fs
):
    from sweeps.engine.command_sweep.code_snapshot import take_snapshot
    from sweeps.run_command import command_trial_function, parse_args
    from trainables.command.workdir import RUNTIME_ENV_CODE, code_folder
    from trainables.experiment.records import CODE_MANIFEST as MANIFEST

    launch = make_layout(tmp_path)
    monkeypatch.chdir(launch)
    experiment = str(tmp_path / "out" / "command") if storage == "LOCAL" else storage
    snapshot = take_snapshot(experiment, in_place=False, resume=False, shared_fs=shared_fs)
    folder = Path(snapshot["runtime_env"]["working_dir"])
    assert folder == Path(snapshot["path"]) and not str(folder).startswith(str(tmp_path / "out"))
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MANIFEST, "main.py"]
    )  # no links to zip: made on each node
    args = parse_args(["--seeds", "1", "--no-shared-fs", "--", "python", "main.py", "--seed", "{seed}"])
    function = command_trial_function(args, snapshot)
    assert function.runtime_env == {"working_dir": str(folder)} and function.params["code_dir"] == RUNTIME_ENV_CODE
    monkeypatch.setenv("TUNE_ORIG_WORKING_DIR", str(folder))  # a worker started in Ray's copy of it
    work = fill_work_dir(code_folder(RUNTIME_ENV_CODE), tmp_path / "trial" / "work")
    assert (work / "../configs/x.yaml").read_text() == "scale: 1.0\n"
