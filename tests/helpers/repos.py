"""Users' repositories laid out under tmp_path, as the command sweeps meet them: a research repo with its own
checkpoints and data (`make_repo`), a launch folder reading through `..` (`make_layout`), a repo whose packages
are named like ours (`clashing_repo`); `tree` snapshots a folder's files to compare before and after."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

# reads through `..` as pytorch/examples mnist does (`../data`), a config beside the launch folder, a module
# one level up, a data set beside the repository; trains 2 "epochs" and saves its own checkpoint
LAYOUT_MAIN = """
import argparse, json, os, sys
sys.path.insert(0, '..')
import helper
p = argparse.ArgumentParser(); p.add_argument('--lr', type=float); p.add_argument('--seed', type=int)
a = p.parse_args()
images = open('../data/MNIST/raw/train.txt').read().split()
scale = float(open('../configs/x.yaml').read().split(':')[1])
extra = len(os.listdir('../../datasets/noisy'))
for epoch in (1, 2):
    print(f"epoch={epoch} val_acc={helper.acc(a.lr, a.seed, epoch) * scale + len(images) + extra}", flush=True)
json.dump({'lr': a.lr, 'seed': a.seed}, open('checkpoint.json', 'w'))
"""


def make_layout(base: Path) -> Path:
    """`base/repo` (a git repository, committed) with data/, configs/, helper.py and the launch folder
    `mnist/`, and `base/datasets/noisy` beside it; returns the launch folder."""
    repo = base / "repo"
    (repo / "data" / "MNIST" / "raw").mkdir(parents=True)
    (repo / "data" / "MNIST" / "raw" / "train.txt").write_text("a b c")
    (repo / "configs").mkdir()
    (repo / "configs" / "x.yaml").write_text("scale: 1.0\n")
    (repo / "helper.py").write_text("def acc(lr, seed, epoch):\n    return lr + seed / 100 + epoch / 1000\n")
    (repo / "mnist").mkdir()
    (repo / "mnist" / "main.py").write_text(LAYOUT_MAIN)
    (repo / ".gitignore").write_text("runs/\n")
    (base / "datasets" / "noisy").mkdir(parents=True)
    (base / "datasets" / "noisy" / "0.txt").write_text("x")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(git[:5] + ["init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    return repo / "mnist"


def make_repo(folder: Path) -> Path:
    """A research repo as users have it: main.py, a sibling module, config/x.json, a `data` folder that is
    both a package (`data/__init__.py`, as timm's `timm/data/`) and data, a large weights file, an
    `experiment/` folder with a log from an earlier run, .git and __pycache__."""
    folder.mkdir(parents=True)
    shutil.copy(SCRIPTS / "imagenet_style.py", folder / "main.py")
    (folder / "sibling.py").write_text(
        "from data import VERSION\n\n\ndef accuracy(lr, seed, epoch):\n"
        "    return round(0.5 + lr + seed / 100 + epoch / 1000, 6)\n"
    )
    (folder / "config").mkdir()
    (folder / "config" / "x.json").write_text('{"scale": 1.0}')
    (folder / "data" / "train").mkdir(parents=True)
    (folder / "data" / "train" / "0.txt").write_text("sample")
    (folder / "data" / "__init__.py").write_text("VERSION = 1\n")
    (folder / "data" / "labels.csv").write_text("0,cat\n")
    (folder / "pretrained.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    (folder / "experiment").mkdir()
    (folder / "experiment" / "log.txt").write_text("earlier run\n")
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "sibling.cpython-311.pyc").write_bytes(b"x")
    (folder / "checkpoint.pth.tar").write_bytes(b"an earlier run's, in the repo")
    (folder / "runs" / "Nov23").mkdir(parents=True)
    (folder / "runs" / "Nov23" / "events.out.tfevents.1.host").write_bytes(b"earlier events")
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder` (links not followed) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(q.is_symlink() for q in [p, *p.parents])
    }


def clashing_repo(folder: Path) -> Path:
    """A user's repository with packages named like ours: its `sweeps` and `trainables` fail to import."""
    for package, body in {
        "sweeps": 'raise ImportError("the repo\'s own sweeps package")',
        "trainables": 'raise ImportError("the repo\'s own trainables package")',
        "analysis": "OWNER = 'the repo'",
    }.items():
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(body + "\n")
    return folder
