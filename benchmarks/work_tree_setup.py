"""How long does a command trial's working folder take to make? `fill_work_dir` per trial, by the size of
the launch folder and of the folders around it.

Run:
    python benchmarks/work_tree_setup.py            # 1,000 and 5,000 code files, small and large surroundings
    python benchmarks/work_tree_setup.py --quick    # 1,000 files; small and large surroundings; 5 trials (CI)
    python benchmarks/work_tree_setup.py --json out.json

Layout (under a temporary folder): `outer/repo/` (a git repository) holding the launch folder
`repo/launch/` with N small code files (3 KiB, in 20 folders), `repo/data/`, and `outer/datasets/`
beside the repository. "small" surroundings: 10 entries per folder around the launch folder and 10
files in each data folder; "large": 200 entries per folder and 5,000 files in each data folder.
Measured: `snapshot_code` once, then `fill_work_dir` for each trial (its own copy of the launch folder
in a mirror of the folders around it, links to everything outside); median and max per trial.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainables.command.workdir import fill_work_dir, snapshot_code  # noqa: E402


def make_layout(base: Path, files: int, entries: int, data_files: int) -> Path:
    """The layout of the module docstring under `base`; returns the launch folder."""
    launch = base / "outer" / "repo" / "launch"
    for i in range(files):
        path = launch / f"pkg{i % 20}" / f"m{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x = 1\n" * 512)
    (base / "outer" / "repo" / ".git").mkdir()
    for folder in (base / "outer" / "repo" / "data", base / "outer" / "datasets"):
        folder.mkdir(parents=True)
        for i in range(data_files):
            (folder / f"{i}.bin").write_bytes(b"d")
    for folder in (base / "outer", base / "outer" / "repo"):
        for i in range(entries):
            (folder / f"sibling{i}.txt").write_text("s")
    return launch


def measure(files: int, entries: int, data_files: int, trials: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="work-tree-bench-") as folder:
        launch = make_layout(Path(folder), files, entries, data_files)
        started = time.perf_counter()
        snapshot_code(launch, Path(folder) / "code")
        snapshot_s = time.perf_counter() - started
        setups = []
        for trial in range(trials):
            started = time.perf_counter()
            fill_work_dir(Path(folder) / "code", Path(folder) / "trials" / str(trial) / "work")
            setups.append(time.perf_counter() - started)
    return {"files": files, "entries_around": entries, "data_files": data_files, "trials": trials} | {
        "snapshot_s": snapshot_s,
        "setup_median_s": statistics.median(setups),
        "setup_max_s": max(setups),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    trials = 5 if args.quick else 10
    sizes = (1000,) if args.quick else (1000, 5000)
    load = [os.getloadavg()[0]]
    rows = [measure(n, entries, data, trials) for n in sizes for entries, data in ((10, 10), (200, 5000))]
    load.append(os.getloadavg()[0])
    print(f"fill_work_dir per trial; {trials} trials each; {os.cpu_count()} CPUs, load {load[0]:.1f} -> {load[1]:.1f}")
    print(f"{'code files':>11}{'around':>8}{'data files':>11}{'snapshot s':>12}{'median s':>10}{'max s':>8}")
    for r in rows:
        print(
            f"{r['files']:>11}{r['entries_around']:>8}{r['data_files']:>11}{r['snapshot_s']:>12.3f}"
            f"{r['setup_median_s']:>10.3f}{r['setup_max_s']:>8.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "cpus": os.cpu_count(), "load_average": load}, indent=1))


if __name__ == "__main__":
    main()
