"""Command trials in their own working folders (`trainables/command/workdir.py`,
`sweeps/engine/command_sweep/code_snapshot.py`)
and the `{gpu}` placeholder: run from a repo-like folder under tmp_path, never the project root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.engine.command_sweep.command_template import gpu_warnings, render
from tests.helpers.repos import make_repo, tree
from trainables.command.workdir import SnapshotTooLarge, fill_work_dir, snapshot_code
from trainables.experiment.records import CODE_MANIFEST as MANIFEST

ROOT = Path(__file__).resolve().parents[2]


# --- the snapshot and the trial folders, without Ray -----------------------------------------------


def test_snapshot_copies_code_links_data_and_leaves_out_caches(tmp_path):
    repo = make_repo(tmp_path / "repo")
    manifest = snapshot_code(repo, tmp_path / "code")
    code = tmp_path / "code"
    assert (code / "main.py").read_bytes() == (repo / "main.py").read_bytes() and not (code / "main.py").is_symlink()
    assert (code / "config" / "x.json").is_file() and not (code / "config").is_symlink()
    assert (code / "data" / "__init__.py").read_text() == "VERSION = 1\n"  # a package named data is code
    assert sorted(p.name for p in (code / "data").iterdir()) == ["__init__.py"]  # only copied files travel
    assert not (code / "pretrained.bin").exists()
    assert not (code / ".git").exists() and not (code / "__pycache__").exists()
    assert not (code / "checkpoint.pth.tar").exists() and not (code / "runs").exists()  # earlier runs' outputs
    assert sorted(manifest["linked"]) == ["data/labels.csv", "data/train", "pretrained.bin"]
    assert manifest["files"] == 5 and manifest["source"] == str(repo.resolve())
    assert json.loads((code / MANIFEST).read_text())["bytes"] == manifest["bytes"] > 0
    work = fill_work_dir(code, tmp_path / "trial" / "work")  # the links are made in each trial's folder
    assert os.readlink(work / "data" / "train") == str(repo.resolve() / "data" / "train")
    assert (work / "data" / "labels.csv").is_symlink() and (work / "pretrained.bin").is_symlink()
    assert not (work / "data" / "__init__.py").is_symlink()


def test_trial_writes_land_in_its_own_folder_and_reach_no_one_else(tmp_path):
    repo = make_repo(tmp_path / "repo")
    snapshot_code(repo, tmp_path / "code")
    before_repo, before_code = tree(repo), tree(tmp_path / "code")
    a, b = tmp_path / "a" / "work", tmp_path / "b" / "work"
    for work in (a, b):
        fill_work_dir(tmp_path / "code", work)
    with open(a / "experiment" / "log.txt", "a") as f:  # an existing file of the repo, appended to
        f.write("trial a\n")
    (a / "config" / "x.json").write_text('{"scale": 2.0}')  # an existing file, overwritten
    (a / "experiment" / "new.txt").write_text("a")  # a new file in an existing folder
    (a / "checkpoint.pth.tar").write_bytes(b"a")
    assert tree(repo) == before_repo and tree(tmp_path / "code") == before_code
    assert (b / "experiment" / "log.txt").read_text() == "earlier run\n"
    assert not (b / "experiment" / "new.txt").exists() and not (b / "checkpoint.pth.tar").exists()
    assert (a / "data" / "train" / "0.txt").read_text() == "sample"  # reads of data go to the original
    assert not (a / MANIFEST).exists()


def test_a_retried_trial_keeps_its_own_files_and_an_edit_after_launch_reaches_no_trial(tmp_path):
    repo = make_repo(tmp_path / "repo")
    snapshot_code(repo, tmp_path / "code")
    (repo / "sibling.py").write_text("VERSION = 2\n")  # edited after launch
    (repo / "data" / "__init__.py").write_text("VERSION = 2\n")  # a package named data, edited after launch
    work = tmp_path / "t" / "work"
    fill_work_dir(tmp_path / "code", work)
    assert "from data import VERSION" in (work / "sibling.py").read_text()
    assert (work / "data" / "__init__.py").read_text() == "VERSION = 1\n"
    (work / "checkpoint.pth.tar").write_bytes(b"epoch 2")
    (work / "config" / "x.json").write_text('{"scale": 3.0}')
    (work / "main.py").unlink()
    fill_work_dir(tmp_path / "code", work)  # the retry
    assert (work / "checkpoint.pth.tar").read_bytes() == b"epoch 2"
    assert (work / "config" / "x.json").read_text() == '{"scale": 3.0}'
    assert (work / "main.py").read_bytes() == (tmp_path / "code" / "main.py").read_bytes()


def test_python_source_is_copied_whatever_its_folder_is_called_and_data_stays_linked(tmp_path):
    """timm's `timm/data/` package, a `datasets/` holding one `prepare.py` beside a large file, data
    folders with no code, an image folder: each .py copied, the rest of a data folder linked, a data
    folder with no Python source one link, a folder of over 1000 entries one link, not looked into."""
    repo = tmp_path / "repo"
    files = ["train.py", "timm/__init__.py", "timm/data/__init__.py", "timm/data/transforms.py"]
    files += ["timm/data/_info/synsets.txt", "datasets/prepare.py", "datasets/raw/0.png", "data/cifar/batch_1"]
    files += [f"images/{i}.png" for i in range(1001)] + ["images/loader.py"]
    for name in files:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(f"# {name}\n")
    with open(repo / "datasets" / "train.bin", "wb") as f:
        f.truncate(50 * 2**20)  # sparse: 50 MiB of data beside prepare.py
    manifest = snapshot_code(repo, tmp_path / "code")
    assert sorted(tree(tmp_path / "code")) == sorted(
        [MANIFEST, "datasets/prepare.py", "timm/__init__.py", "timm/data/__init__.py", "timm/data/transforms.py"]
        + ["train.py"]
    )
    assert manifest["linked"] == ["data", "datasets/raw", "datasets/train.bin", "images", "timm/data/_info"]
    assert manifest["bytes"] < 1000
    work = fill_work_dir(tmp_path / "code", tmp_path / "trial" / "work")
    assert (work / "datasets" / "prepare.py").read_text() == "# datasets/prepare.py\n"
    assert not (work / "datasets").is_symlink() and (work / "datasets" / "train.bin").is_symlink()
    assert (work / "timm" / "data" / "_info" / "synsets.txt").read_text() == "# timm/data/_info/synsets.txt\n"


def test_a_code_folder_too_large_to_copy_is_refused_and_leaves_nothing(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "notes").mkdir()
    for i in range(3):
        (repo / "notes" / f"{i}.txt").write_bytes(b"n" * 1000)
    with pytest.raises(SnapshotTooLarge, match=r"largest: notes.*--in-place"):
        snapshot_code(repo, tmp_path / "code", limit=2500)
    assert not (tmp_path / "code").exists() and not (tmp_path / "code.partial").exists()


def test_the_sweeps_storage_inside_the_repo_is_not_snapshotted(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    (repo / "runs" / "command" / "old_trial").mkdir(parents=True)
    (repo / "runs" / "command" / "old_trial" / "result.json").write_text("{}")
    from sweeps.engine.command_sweep.code_snapshot import take_snapshot

    cwd = os.getcwd()
    try:
        os.chdir(repo)
        first = take_snapshot(str(repo / "runs" / "command"), in_place=False, resume=False)
        kept = take_snapshot(str(repo / "runs" / "command"), in_place=False, resume=True)
    finally:
        os.chdir(cwd)
    assert kept["path"] == first["path"] and Path(first["path"]).parent == repo / "runs" / "command" / "code"
    assert not (Path(first["path"]) / "runs").exists()
    out = capsys.readouterr().out
    assert f"own copy of {repo.resolve()} (5 files" in out
    assert "rule: Python source is copied, data linked: files over 1 MiB, folders of over 1000 entries, all but " in out
    assert take_snapshot(str(repo / "runs" / "command"), in_place=True, resume=False) is None
    assert capsys.readouterr().out.startswith("--in-place: every trial runs in the launch folder itself")


# --- {gpu} -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, warned",
    [
        (["python", "main.py", "--gpu", "0"], "(--gpu 0)"),
        (["python", "main.py", "--gpu=1"], "(--gpu=1)"),
        (["python", "main.py", "--gpu-id", "2"], "(--gpu-id 2)"),
        (["env", "CUDA_VISIBLE_DEVICES=0", "python", "main.py"], "CUDA_VISIBLE_DEVICES=0"),
        (["bash", "-c", "CUDA_VISIBLE_DEVICES=1 python main.py"], "CUDA_VISIBLE_DEVICES=1"),
        (["python", "main.py", "--gpu", "{gpu}"], None),
        (["python", "main.py", "--gpus-per-node", "2", "--lr", "{lr}"], None),
        (["python", "train.py", "--gpus", "1"], None),  # Lightning's count of GPUs, not an id
        (["env", "CUDA_VISIBLE_DEVICES={gpu}", "python", "main.py"], None),
    ],
)
def test_a_template_that_picks_its_gpu_is_warned_about(template, warned):
    lines = gpu_warnings(template)
    assert [warned in line for line in lines] == ([True] if warned else [])


def test_gpu_placeholder_renders_the_assigned_ids():
    assert render(["x", "--gpu", "{gpu}"], {}, "/t", "n", gpu="2,3") == ["x", "--gpu", "2,3"]
    assert render(["x", "--gpu={gpu}"], {}, "/t", "n") == ["x", "--gpu="]


def test_dry_run_warns_once_about_a_hard_coded_gpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "sweeps" / "run_command.py"), "--dry-run", "--seeds", "2"]
        + ["--storage-path", str(tmp_path / "out"), "--", sys.executable, "main.py", "--gpu", "0", "--seed", "{seed}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("warning: the command picks its GPU itself (--gpu 0)") == 1


@pytest.mark.parametrize("gpus, shown", [("0", "--gpu ''"), ("1", "--gpu GPU_IDS")])
def test_dry_run_fills_the_gpu_placeholder_with_what_the_trial_gets(tmp_path, capsys, gpus, shown):
    from sweeps import run_command

    argv = ["--dry-run", "--seeds", "1", "--gpus-per-trial", gpus, "--storage-path", str(tmp_path / "out")]
    assert run_command.main(argv + ["--", "python", "main.py", "--gpu", "{gpu}", "--seed", "{seed}"]) == 0
    out = capsys.readouterr().out
    assert f"main.py {shown} --seed 0" in out and "{gpu}" not in out
    assert ("GPU_IDS: the ids of the GPUs Ray assigns" in out) == (gpus != "0")


def test_the_sweep_itself_warns_about_a_hard_coded_gpu(tmp_path, capsys, monkeypatch):
    from sweeps import run_command
    from sweeps.engine.flags import UsageError

    (tmp_path / "main.py").write_text("")
    monkeypatch.chdir(tmp_path)  # the script exists: only --resume is refused
    argv = ["--resume", "--seeds", "1", "--storage-path", str(tmp_path / "out")]  # refused after the warning
    with pytest.raises(UsageError):
        run_command.main(argv + ["--", "python", "main.py", "--gpu", "0", "--seed", "{seed}"])
    assert "warning: the command picks its GPU itself (--gpu 0)" in capsys.readouterr().err
