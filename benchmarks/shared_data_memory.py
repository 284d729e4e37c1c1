"""Peak memory of 8 concurrent trials over a 215 MB data set: shared through Ray's object store
(what sweeps do, `tune.with_parameters`) vs each trial loading its own copy.

Run:
    python benchmarks/shared_data_memory.py            # 70,000 CIFAR-shaped uint8 images (215 MB), 8 trials,
                                                       # 3 repetitions
    python benchmarks/shared_data_memory.py --quick    # 7,000 images (21 MB), 4 trials, 1 repetition (CI)
    python benchmarks/shared_data_memory.py --json out.json

Memory is the summed proportional set size (PSS: shared pages split between the processes that
map them, so a page in Ray's shared-memory object store counts once) of the driver and every
process it started (raylet, object store, trial workers), sampled every 0.5 s; the figure is the
peak minus the idle baseline after `ray.init`. Trials are the real trainable (`mlp`, 1 epoch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def tree_pss_bytes() -> int:
    import psutil

    me = psutil.Process()
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run(mode: str, images: int, trials: int, folder: Path) -> dict:
    import numpy as np
    import ray
    from ray import tune

    from sweeps.engine.run.launch import sweep_run_config, sweep_tune_config
    from trainables import load_data, parse_config, train_classifier
    from trainables.experiment.objective import Objective

    path = folder / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 256, size=(images, 3, 32, 32), dtype=np.uint8), y=np.arange(images) % 10)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    time.sleep(2)
    baseline = tree_pss_bytes()
    peak, stop = [baseline], threading.Event()

    def sample():
        while not stop.is_set():
            peak.append(tree_pss_bytes())
            time.sleep(0.5)

    config = {
        "dataset": "npz",
        "data_root": str(path),
        "model": "mlp",
        "epochs": 1,
        "batch_size": 512,
        "seed": tune.grid_search(list(range(trials))),
    }
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if mode == "shared":  # the sweep's way: load once in the driver, hand it to every trial
        data = load_data(parse_config({k: v for k, v in config.items() if k != "seed"}))
        trainable = tune.with_parameters(train_classifier, data=data)
    else:  # every trial reads the file itself
        trainable = train_classifier
    trainable = tune.with_resources(trainable, {"cpu": 2 / trials})
    tune.Tuner(
        trainable,
        param_space=config,
        tune_config=sweep_tune_config(tune.TuneConfig(metric=Objective.metric, mode=Objective.mode)),
        run_config=sweep_run_config("memory", str(folder / "runs"), verbose=0),
    ).fit()
    stop.set()
    sampler.join()
    ray.shutdown()
    return {"peak_bytes": max(peak) - baseline, "data_bytes": images * 3 * 32 * 32}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    images, trials = (7_000, 4) if args.quick else (70_000, 8)
    if args.one:
        with tempfile.TemporaryDirectory() as folder:
            print("RESULT " + json.dumps(run(args.one, images, trials, Path(folder))))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    peaks = {"shared": [], "per_trial": []}
    for _ in range(repeats):
        for mode in peaks:
            cmd = [sys.executable, __file__, "--one", mode] + (["--quick"] if args.quick else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            peaks[mode].append(json.loads(out.split("RESULT ", 1)[1])["peak_bytes"])
    mib = lambda v: f"{statistics.median(v) / 2**20:.0f} [{min(v) / 2**20:.0f}, {max(v) / 2**20:.0f}]"  # noqa: E731
    print(
        f"{trials} concurrent trials, data set {images * 3072 / 2**20:.0f} MiB; "
        f"peak PSS above baseline, MiB, median [min, max] of {repeats}"
    )
    for mode, values in peaks.items():
        print(f"{mode:<10}{mib(values):>24}")
    ratio = statistics.median(peaks["per_trial"]) / statistics.median(peaks["shared"])
    print(f"per-trial copies use {ratio:.1f}x the memory of one shared copy")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "shared_peak_bytes": statistics.median(peaks["shared"]),
                    "per_trial_peak_bytes": statistics.median(peaks["per_trial"]),
                    "ratio": ratio,
                    "trials": trials,
                    "data_bytes": images * 3072,
                    "runs": peaks,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
