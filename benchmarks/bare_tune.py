"""The default grid's 12 trials as a plain Ray Tune script: the floor `benchmarks/startup.py` measures
`sweeps/noise_grid.py` against (the same trials and training, no raysweep).

Run:
    python benchmarks/bare_tune.py --storage-path /tmp/bare                  # 12 trials of 30 epochs
    python benchmarks/bare_tune.py --storage-path /tmp/bare --smoke-test     # 2 epochs, as the grid's

What a Ray Tune user writes from Ray's guides, with Ray's defaults: `ray.init()` (a local Ray with its
dashboard), the data loaded once in the driver and shared through `tune.with_parameters`, a `Tuner` over
`tune.grid_search` of noise type x noise rate (1 CPU per trial, Tune's default), Tune's own console
output and loggers, every checkpoint kept. Each trial runs the grid's training loop
(`trainables.train.train_epochs`, imported in the trial: the driver never loads torch, as raysweep's
does not) and reports each epoch with a checkpoint (`torch.save` into a temporary folder,
`Checkpoint.from_directory`). One setting is not Ray's default: actor reuse (`reuse_actors=True`, as
every raysweep sweep sets), so that the comparison is of the sweep's own work, not of a new worker per
trial (3.5 s each: `benchmarks/sweep_efficiency.py` measures Tune's defaults with it). Each trial,
once torch and the loop are imported, creates `<storage>/<name>/started/<trial id>`: the "first trial"
milestone, where the grid's trial writes its `trial_config.json` (after the same imports).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the grid's data and training loop

from trainables.config import parse_config  # noqa: E402  (no torch, no Ray)

NOISE_TYPES = ["sym", "asym"]
NOISE_RATES = [0.125, 0.25, 0.375, 0.5, 0.625, 0.75]  # the grid's defaults (sweeps/noise_grid.py)
STARTED = "started"  # <storage>/<name>/started/<trial id>: one file per trial, made first thing


def train_trial(config: dict, data: dict, started: str) -> None:
    """One trial: the grid's loop, a report and a checkpoint every epoch."""
    import torch
    from ray import tune

    from trainables.train import train_epochs

    Path(started, tune.get_context().get_trial_id()).touch()  # imports done, as the grid's trial_config.json
    for metrics, state in train_epochs(config, data):
        metrics.pop("test/confusion")  # a list of lists: not a metric
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state, Path(folder) / "checkpoint.pt")
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage-path", required=True, help="where Tune writes the experiment")
    parser.add_argument("--name", default="bare_tune", help="the experiment's folder under --storage-path")
    parser.add_argument("--smoke-test", action="store_true", help="2 epochs per trial, as the grid's --smoke-test")
    args = parser.parse_args()
    print(f"{len(NOISE_TYPES) * len(NOISE_RATES)} trials in the grid", flush=True)
    import ray
    from ray import tune

    from trainables.data import load_data

    data = load_data(parse_config({}))
    print(f"data: digits ({len(data['y_train'])} train)", flush=True)
    began = time.monotonic()
    ray.init()
    print(f"started a local Ray with its defaults in {time.monotonic() - began:.1f} s", flush=True)
    started = Path(args.storage_path, args.name, STARTED)
    started.mkdir(parents=True, exist_ok=True)
    param_space = {"noise_type": tune.grid_search(NOISE_TYPES), "noise_rate": tune.grid_search(NOISE_RATES)}
    if args.smoke_test:
        param_space["epochs"] = 2
    tuner = tune.Tuner(
        tune.with_parameters(train_trial, data=data, started=str(started)),
        param_space=param_space,
        tune_config=tune.TuneConfig(metric="val/acc", mode="max", reuse_actors=True),
        run_config=tune.RunConfig(name=args.name, storage_path=args.storage_path),
    )
    results = tuner.fit()
    best = results.get_best_result()
    print(f"sweep finished: {len(results)} trials; best val/acc {best.metrics['val/acc']:.4f}", flush=True)


if __name__ == "__main__":
    main()
