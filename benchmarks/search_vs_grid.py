"""How much of a grid's epoch budget TPE + ASHA needs to match the grid's best val/acc.

Run:
    python benchmarks/search_vs_grid.py --quick                  # 6-point grid, 3 epochs: about a minute
    python benchmarks/search_vs_grid.py --json bench.json        # 36-point grid, 12 epochs, 3 seeds, 2 TPE seeds

Setting: digits, mlp, sym noise 0.5, batch size 64; every configuration (grid point or search
trial) is trained with --repeat seeds and scored by their mean (`trainables/seed_group.py`): with one
seed, the grid's best is the luckiest of 36 draws on a 216-image validation set (1 image = 0.46
points), which no search reliably "reaches".
Grid (36 points): loss {ce, gce, sce} x lr {0.003, 0.01, 0.03, 0.1, 0.3, 1} x weight decay
{1e-5, 1e-3}, each trained for all epochs (GCE q, SCE alpha/beta at their defaults).
Search: `sweeps/lr_search.py` over the same lr / weight-decay box and losses (it also searches
q, alpha, beta), ASHA grace period 2, reduction factor 3, `--num-samples` = twice the grid's size
(ASHA stops most trials early, so this is about one grid budget). Both run 2 trials at a time.

A trial's score is its last reported val/acc (what Tune ranks and TPE is told). The search
"reaches" the grid when a trial ends with val/acc >= grid best - 0.005; the epochs it needed are
all epochs any search trial had trained by that moment (results ordered by their wall time).
Printed: a table per search seed; with --json PATH the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd
import ray
from ray import tune
from ray.tune import RunConfig, TuneConfig, Tuner

from sweeps import lr_search
from trainables import Objective, load_data, parse_config, train_classifier

METRIC = Objective.metric  # the built-in trainable's validation accuracy, what both searches rank by
TOLERANCE = 0.005  # "within 0.5 points" of accuracy


def epoch_results(experiment: Path) -> pd.DataFrame:
    """One row per reported epoch of every trial in `experiment`: trial, epoch, val/acc, wall_time."""
    rows = []
    for trial in sorted(p for p in experiment.iterdir() if (p / "result.json").exists()):
        for line in (trial / "result.json").read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows.append({"trial": trial.name, "epoch": r["epoch"], METRIC: r[METRIC], "wall_time": r["wall_time"]})
    return pd.DataFrame(rows).sort_values("wall_time", kind="stable").reset_index(drop=True)


def epochs_to_reach(epochs: pd.DataFrame, target: float) -> tuple[int | None, str | None]:
    """Epochs trained (all trials) when a trial first ended with METRIC >= target; (None, None) if never."""
    last = epochs.groupby("trial").tail(1)  # each trial's final result
    hits = last[last[METRIC] >= target]
    if hits.empty:
        return None, None
    first = hits.loc[hits["wall_time"].idxmin()]
    return int((epochs["wall_time"] <= first["wall_time"]).sum()), first["trial"]


def grid_name(trial) -> str:
    c = trial.config
    return f"grid_{c['loss']}_lr{c['lr']:g}_wd{c['weight_decay']:g}"


def run_grid(storage: Path, fixed: dict, losses, lrs, wds, seeds: tuple) -> pd.DataFrame:
    data = load_data(parse_config(fixed))
    tuner = Tuner(
        tune.with_resources(tune.with_parameters(train_classifier, data=data, seeds=seeds), {"cpu": 1}),
        param_space={
            **fixed,
            "loss": tune.grid_search(losses),
            "lr": tune.grid_search(lrs),
            "weight_decay": tune.grid_search(wds),
        },
        tune_config=TuneConfig(
            max_concurrent_trials=2, reuse_actors=True, trial_name_creator=grid_name, trial_dirname_creator=grid_name
        ),
        run_config=RunConfig(name="grid", storage_path=str(storage), verbose=0),
    )
    tuner.fit()
    return epoch_results(storage / "grid")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6-point grid, 3 epochs, one search seed")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per trial (default: 12; 3 with --quick)")
    parser.add_argument(
        "--search-seeds", default=None, help="TPE seeds, comma-separated (default: 0,1; 0 with --quick)"
    )
    parser.add_argument("--repeat", type=int, default=None, help="seeds per configuration (default: 3; 1 with --quick)")
    parser.add_argument(
        "--samples-per-grid-point", type=float, default=2.0, help="search trials = this x grid size (default: 2)"
    )
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    epochs = args.epochs or (3 if args.quick else 12)
    repeat = args.repeat or (1 if args.quick else 3)
    seeds = [int(s) for s in (args.search_seeds or ("0" if args.quick else "0,1")).split(",")]
    losses = ["ce", "gce"] if args.quick else ["ce", "gce", "sce"]
    lrs = [0.01, 0.1, 1.0] if args.quick else [0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    wds = [1e-4] if args.quick else [1e-5, 1e-3]
    fixed = {
        "dataset": "digits",
        "model": "mlp",
        "noise_type": "sym",
        "noise_rate": 0.5,
        "epochs": epochs,
        "batch_size": 64,
    }
    grid_size = len(losses) * len(lrs) * len(wds)
    num_samples = round(args.samples_per_grid_point * grid_size)

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    report = {
        "setting": {
            **fixed,
            "grid_points": grid_size,
            "tolerance": TOLERANCE,
            "concurrent_trials": 2,
            "repeat": repeat,
            "search_trials": num_samples,
            "epochs_counted_as": f"trial epochs (each trains {repeat} seed(s))",
        },
        "searches": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        grid = run_grid(Path(tmp), fixed, losses, lrs, wds, tuple(range(repeat)))
        grid_s = time.perf_counter() - started
        grid_final = grid.groupby("trial").tail(1)
        grid_best = float(grid_final[METRIC].max())
        grid_epochs = len(grid)
        report["grid"] = {
            "epochs": grid_epochs,
            "best": grid_best,
            "best_trial": grid_final.loc[grid_final[METRIC].idxmax(), "trial"],
            "seconds": round(grid_s, 1),
        }
        for seed in seeds:
            name = f"search_seed{seed}"
            started = time.perf_counter()
            lr_search.main(
                [
                    "--num-samples",
                    str(num_samples),
                    "--repeat",
                    str(repeat),
                    "--epochs",
                    str(epochs),
                    "--grace-period",
                    str(min(2, epochs)),
                    "--reduction-factor",
                    "3",
                    "--lr-range",
                    f"{min(lrs)},{max(lrs)}",
                    "--weight-decay-range",
                    "1e-5,1e-3",
                    "--losses",
                    ",".join(losses),
                    "--batch-sizes",
                    "64",
                    "--search-seed",
                    str(seed),
                    "--gpus-per-trial",
                    "0",
                    "--cpus-per-trial",
                    "1",
                    "--max-concurrent",
                    "2",
                    "--storage-path",
                    tmp,
                    "--name",
                    name,
                ]
            )
            search = epoch_results(Path(tmp) / name)
            needed, trial = epochs_to_reach(search, grid_best - TOLERANCE)
            final = search.groupby("trial").tail(1)
            report["searches"].append(
                {
                    "search_seed": seed,
                    "epochs_total": len(search),
                    "best": float(final[METRIC].max()),
                    "epochs_to_reach_grid_best": needed,
                    "reached_by": trial,
                    "fraction_of_grid_budget": None if needed is None else round(needed / grid_epochs, 3),
                    "stopped_early": int((final["epoch"] < epochs).sum()),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
    ray.shutdown()

    print(
        f"\ngrid: {grid_size} points x {epochs} epochs = {grid_epochs} trial epochs ({repeat} seed(s) each), "
        f"best final {METRIC} "
        f"{grid_best:.4f} ({report['grid']['best_trial']}), {grid_s:.0f} s"
    )
    table = pd.DataFrame(report["searches"])
    print(table.to_string(index=False))
    reached = table["fraction_of_grid_budget"].dropna()
    if len(reached):
        print(
            f"TPE + ASHA reached the grid's best within {TOLERANCE * 100:g} points with "
            f"{reached.mean():.0%} of the grid's epoch budget (mean over {len(reached)} of {len(table)} search seeds)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
