"""What does running inside Tune cost a trial? The real trainable in Tune vs the same loop called directly.

Run:
    python benchmarks/trainable_overhead.py            # digits, cnn and mlp, 10 epochs, 3 repetitions
    python benchmarks/trainable_overhead.py --quick    # 3 epochs, 1 repetition (CI)
    python benchmarks/trainable_overhead.py --json out.json

Inside Tune the trial reports every epoch and saves a Tune checkpoint every epoch
(`checkpoint_every=1`, the default). Both sides are timed by the trainable's own per-epoch
`wall_time` stamps, from the end of epoch 1 to the end of the last epoch: steady-state epochs with
everything Tune adds to them (report, checkpoint save and persist), without Ray start-up or
model set-up. "bare" iterates `train_epochs` with no Tune, on one torch thread as a 1-CPU trial
gets. ratio = tune / bare; each measurement in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bare(config: dict) -> float:
    import torch

    from trainables import load_data, parse_config, train_epochs

    torch.set_num_threads(1)  # what a 1-CPU Tune trial gets (Ray sets OMP_NUM_THREADS=1)

    data = load_data(parse_config(config))
    stamps = [metrics["wall_time"] for metrics, _ in train_epochs(config, data)]
    return stamps[-1] - stamps[0]


def in_tune(config: dict) -> float:
    import ray
    from ray import tune

    from sweeps.engine.run.launch import sweep_run_config, sweep_tune_config
    from trainables import load_data, parse_config, train_classifier
    from trainables.experiment.objective import Objective

    data = load_data(parse_config(config))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        trainable = tune.with_resources(tune.with_parameters(train_classifier, data=data), {"cpu": 1})
        results = tune.Tuner(
            trainable,
            param_space=config,
            tune_config=sweep_tune_config(tune.TuneConfig(metric=Objective.metric, mode=Objective.mode)),
            run_config=sweep_run_config("overhead", storage, verbose=0),
        ).fit()
        stamps = results[0].metrics_dataframe["wall_time"]
        seconds = float(stamps.iloc[-1] - stamps.iloc[0])
    ray.shutdown()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)  # internal: MODE CONFIG_JSON
    args = parser.parse_args()
    if args.one:
        mode, config = args.one[0], json.loads(args.one[1])
        print("RESULT", (bare if mode == "bare" else in_tune)(config))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    epochs = 3 if args.quick else 10
    report = {"epochs": epochs, "repeats": repeats, "models": {}}
    print(f"digits, {epochs} epochs, report + checkpoint every epoch; median [min, max] of {repeats} fresh processes")
    print(f"{'model':<8}{'bare s':>22}{'tune s':>22}{'ratio':>22}")
    for model in ("cnn", "mlp"):
        config = {"dataset": "digits", "model": model, "epochs": epochs, "checkpoint_every": 1}
        times = {"bare": [], "tune": []}
        for _ in range(repeats):
            for mode in ("bare", "tune"):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", mode, json.dumps(config)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                times[mode].append(float(out.split("RESULT", 1)[1]))
        ratios = [t / b for t, b in zip(times["tune"], times["bare"])]
        fmt = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"  # noqa: E731
        print(f"{model:<8}{fmt(times['bare']):>22}{fmt(times['tune']):>22}{fmt(ratios):>22}")
        report["models"][model] = {"bare_s": times["bare"], "tune_s": times["tune"], "ratio": statistics.median(ratios)}
    report["ratio"] = report["models"]["cnn"]["ratio"]
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
