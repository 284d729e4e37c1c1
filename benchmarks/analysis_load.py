"""Time analysis.load_trials against ray.tune.ExperimentAnalysis on a synthetic experiment.

Run:
    python benchmarks/analysis_load.py                 # 1,000 trials x 50 results, 3 repetitions
    python benchmarks/analysis_load.py --quick         # 100 trials x 20 results, 1 repetition
    python benchmarks/analysis_load.py --json out.json # also write the figures ("speedup" key)

The experiment is written in Ray Tune 2.x's on-disk format (experiment_state-*.json made from
real ``Trial`` objects, and params.json / result.json / progress.csv per trial) into a
temporary folder, so both readers see the same files. Each measurement runs in a fresh Python
process; the import time of each library is reported apart from the load time. The speedup is
the ratio of median load times (ExperimentAnalysis + .dataframe() over load_trials). The script
reports; it does not assert.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Measured in a child process: import the reader, then time one full load.
_CHILD = {
    "analysis.load_trials": (
        "import analysis",
        "df = analysis.load_trials(PATH)",
    ),
    "tune.ExperimentAnalysis": (
        "from ray.tune import ExperimentAnalysis",
        "ea = ExperimentAnalysis(PATH); df = ea.dataframe()",
    ),
}
_CHILD_TEMPLATE = """
import json, sys, time
t0 = time.perf_counter()
{imp}
t1 = time.perf_counter()
PATH = sys.argv[1]
{load}
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "rows": len(df)}}))
"""

METRICS = (
    "train/loss",
    "train/acc",
    "val/loss",
    "val/acc",
    "test/loss",
    "test/acc",
    "lr",
    "grad_norm",
    "samples_per_s",
    "noise/flip_rate",
)


def write_experiment(root: Path, n_trials: int, n_iterations: int, seed: int = 0) -> Path:
    """Write a finished synthetic noise-grid experiment under ``root``; return its folder."""
    from ray.tune.experiment import Trial

    from trainables import ray_private

    StorageContext = ray_private.storage_context_class()
    PlacementGroupFactory = ray_private.placement_group_factory_class()

    rng = random.Random(seed)
    name = "synthetic"
    experiment = root / name
    experiment.mkdir(parents=True)
    session = "2026-01-01_00-00-00"
    t_start = 1_767_225_600.0
    storage = StorageContext(storage_path=str(root), experiment_dir_name=name)
    trial_data = []
    for i in range(n_trials):
        noise_type = ("sym", "asym")[i % 2]
        noise_rate = round(0.1 * (i // 2 % 8), 3)
        config = {
            "dataset": "cifar10",
            "model": "resnet18",
            "loss": "ce",
            "noise_type": noise_type,
            "noise_rate": noise_rate,
            "seed": i // 16,
            "epochs": n_iterations,
            "lr": 0.1,
            "batch_size": 128,
            "optimizer": "sgd",
            "weight_decay": 5e-4,
        }
        trial_id = f"a1b2c_{i:05d}"
        tag = f"{i}_noise_type={noise_type},noise_rate={noise_rate}"
        dirname = f"train_classifier_{trial_id}_{tag}_{session}"
        folder = experiment / dirname
        folder.mkdir()
        (folder / "params.json").write_text(json.dumps(config, indent=2))

        start = t_start + 60.0 * (i // 8) + rng.random()
        rows, elapsed = [], 0.0
        for it in range(1, n_iterations + 1):
            dt = 1.0 + 0.1 * rng.random()
            elapsed += dt
            acc = 0.9 - noise_rate * 0.5 - 0.3 / it + 0.01 * rng.random()
            metrics = {"epoch": it - 1, **{m: rng.random() for m in METRICS}, "val/acc": acc, "gpu_ids": str(i % 4)}
            rows.append(
                {
                    **metrics,
                    "timestamp": int(start + elapsed),
                    "checkpoint_dir_name": None,
                    "done": it == n_iterations,
                    "training_iteration": it,
                    "trial_id": trial_id,
                    "date": session,
                    "time_this_iter_s": dt,
                    "time_total_s": elapsed,
                    "pid": 1000 + i,
                    "hostname": "node0",
                    "node_ip": "10.0.0.1",
                    "config": config,
                    "time_since_restore": elapsed,
                    "iterations_since_restore": it,
                }
            )
        with open(folder / "result.json", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        with open(folder / "progress.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "config"])
            writer.writeheader()
            writer.writerows({k: v for k, v in row.items() if k != "config"} for row in rows)

        trial = Trial(
            "train_classifier", config=config, trial_id=trial_id, experiment_tag=tag, stub=True, storage=storage
        )
        trial.placement_group_factory = PlacementGroupFactory([{"CPU": 2.0, "GPU": 1.0}])
        trial.relative_logdir = dirname
        trial.storage.trial_dir_name = dirname  # Trial holds its own copy of `storage`
        trial.status = Trial.TERMINATED
        trial.run_metadata.start_time = start
        trial.run_metadata.last_result = {**rows[-1], "experiment_tag": tag}
        trial.run_metadata.last_result_time = start + elapsed
        trial_data.append(trial.get_json_state())

    state = {
        "trial_data": trial_data,
        "runner_data": {"_metric": "val/acc", "_session_str": session},
        "stats": {"start_time": t_start},
    }
    (experiment / f"experiment_state-{session}.json").write_text(json.dumps(state))
    (experiment / "raysweep.json").write_text(json.dumps({"metric": "val/acc", "mode": "max"}))
    return experiment


def measure(reader: str, experiment: Path) -> dict:
    """Import time, load time and row count of ``reader`` in a fresh Python process."""
    imp, load = _CHILD[reader]
    code = _CHILD_TEMPLATE.format(imp=imp, load=load)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "RAY_DEDUP_LOGS": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(experiment)], capture_output=True, text=True, env=env, cwd=REPO
    )
    if out.returncode != 0:
        raise SystemExit(f"{reader} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse_size_args(argv: list[str] | None, description: str, repeat: int, repeat_help: str) -> argparse.Namespace:
    """The flags of the benchmarks that time reading a synthetic experiment (this one, status_speed.py).

    Returns:
        `trials`, `iterations` (results per trial), `repeat` (fresh-process runs), `json` (a Path or
        None); `--quick` sets 100 trials x 20 results, 1 run.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=50, help="results per trial")
    parser.add_argument("--repeat", type=int, default=repeat, help=repeat_help)
    parser.add_argument("--quick", action="store_true", help="100 trials x 20 results, 1 run")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.iterations, args.repeat = 100, 20, 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_size_args(argv, __doc__.split("\n\n")[0], repeat=3, repeat_help="fresh-process runs per reader")

    with tempfile.TemporaryDirectory(prefix="raysweep-bench-") as tmp:
        t0 = time.perf_counter()
        experiment = write_experiment(Path(tmp), args.trials, args.iterations)
        print(f"wrote {args.trials} trials x {args.iterations} results in {time.perf_counter() - t0:.1f} s")
        runs = {reader: [] for reader in _CHILD}
        for _ in range(args.repeat):  # interleaved, so slow phases of a busy machine hit both
            for reader in _CHILD:
                runs[reader].append(measure(reader, experiment))

    summary = {}
    print(f"\n{'reader':<26}{'load median (s)':>16}{'load range (s)':>18}{'import (s)':>12}{'rows':>7}")
    for reader, results in runs.items():
        loads = [r["load_s"] for r in results]
        imports = [r["import_s"] for r in results]
        summary[reader] = {
            "load_s": loads,
            "load_median_s": statistics.median(loads),
            "import_median_s": statistics.median(imports),
            "rows": results[0]["rows"],
        }
        print(
            f"{reader:<26}{statistics.median(loads):>16.3f}{min(loads):>9.3f}-{max(loads):<8.3f}"
            f"{statistics.median(imports):>12.2f}{results[0]['rows']:>7}"
        )
    ours, theirs = summary["analysis.load_trials"], summary["tune.ExperimentAnalysis"]
    speedup = theirs["load_median_s"] / ours["load_median_s"]
    end_to_end = (theirs["load_median_s"] + theirs["import_median_s"]) / (
        ours["load_median_s"] + ours["import_median_s"]
    )
    print(f"\nspeedup (load, median): {speedup:.1f}x   with imports: {end_to_end:.1f}x")
    report = {
        "trials": args.trials,
        "iterations": args.iterations,
        "repeat": args.repeat,
        "speedup": speedup,
        "speedup_with_imports": end_to_end,
        "readers": summary,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
