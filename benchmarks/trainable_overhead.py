"""What does running inside Tune cost a trial? The real trainable in Tune vs the same loop called directly.

Run:
    python benchmarks/trainable_overhead.py            # digits, cnn and mlp, 10 epochs, 3 repetitions
    python benchmarks/trainable_overhead.py --quick    # 8 epochs, 1 repetition (CI)
    python benchmarks/trainable_overhead.py --json out.json
    python benchmarks/trainable_overhead.py --quick --models cnn --no-bare --slow-report 0.5   # a slowed build

Inside Tune the trial reports every epoch and saves a Tune checkpoint every epoch
(`checkpoint_every=1`, the default). Two figures:
- ratio = tune / bare: both sides timed by the trainable's own per-epoch `wall_time` stamps, from the
  end of epoch 1 to the end of the last epoch: steady-state epochs with everything Tune adds to them
  (report, checkpoint save and persist), without Ray start-up or model set-up. "bare" iterates
  `train_epochs` with no Tune, on one torch thread as a 1-CPU trial gets; each in a fresh process.
- in-trial cost, measured inside the Tune trial: the training loop's generator is timed in the worker,
  so each epoch splits into its compute (inside `train_epochs`: training and evaluation) and the trial's
  own work until it asks for the next epoch (the log line, the confusion matrix, the checkpoint saved,
  `tune.report` and its round trip through the driver). `in_trial_ms`: the median of the latter over the
  epochs after the first (the first carries one-time set-up), in ms; `in_trial_ratio`: the median over
  those epochs of (compute + in-trial) / compute: the same trial's own "bare", so the machine's load at
  that moment weighs on both sides (what `benchmarks/gate.py` checks).
`--slow-report F` is a deliberately slowed build, for the gate's own test: in the worker, each
`tune.report` first sleeps F times the epoch's compute time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bare(config: dict, slow_report: float = 0.0) -> dict:
    import torch

    from trainables import load_data, parse_config, train_epochs

    torch.set_num_threads(1)  # what a 1-CPU Tune trial gets (Ray sets OMP_NUM_THREADS=1)

    data = load_data(parse_config(config))
    stamps = [metrics["wall_time"] for metrics, _ in train_epochs(config, data)]
    return {"seconds": stamps[-1] - stamps[0]}


def timed_trial(config: dict, data: dict, timings: str, slow_report: float = 0.0) -> None:
    """`train_classifier` with its training loop timed in the worker (see the module docstring); the
    per-epoch figures go to the JSON file `timings`. `slow_report` > 0: each `tune.report` first sleeps
    that many times the epoch's compute time (a slowed build)."""
    import ray.tune

    import trainables.train
    import trainables.trial

    loop, report, epochs, compute_s = trainables.train.train_epochs, ray.tune.report, [], [0.0]
    # where the trial takes the loop from: trainables.train when it starts (older checkouts: its own import)
    owners = [m for m in (trainables.train, trainables.trial) if getattr(m, "train_epochs", None) is loop]

    def timed_epochs(*args, **kwargs):
        run = loop(*args, **kwargs)
        while True:
            started = time.perf_counter()
            try:
                item = next(run)
            except StopIteration:
                return
            yielded = time.perf_counter()
            compute_s[0] = yielded - started
            yield item  # the trial's own work for this epoch runs until the next `next()`
            epochs.append({"compute_s": compute_s[0], "in_trial_s": time.perf_counter() - yielded})

    def slowed_report(*args, **kwargs):
        time.sleep(slow_report * compute_s[0])
        return report(*args, **kwargs)

    for owner in owners:
        owner.train_epochs = timed_epochs
    if slow_report:
        ray.tune.report = slowed_report
    try:
        trainables.trial.train_classifier(config, data)
    finally:
        for owner in owners:
            owner.train_epochs = loop
        ray.tune.report = report
    Path(timings).write_text(json.dumps(epochs))


def in_tune(config: dict, slow_report: float = 0.0) -> dict:
    import ray
    from ray import tune

    from sweeps.engine.run.launch import sweep_run_config, sweep_tune_config
    from trainables import load_data, parse_config
    from trainables.experiment.objective import Objective

    data = load_data(parse_config(config))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        timings = Path(storage, "timings.json")
        trial = tune.with_parameters(timed_trial, data=data, timings=str(timings), slow_report=slow_report)
        results = tune.Tuner(
            tune.with_resources(trial, {"cpu": 1}),
            param_space=config,
            tune_config=sweep_tune_config(tune.TuneConfig(metric=Objective.metric, mode=Objective.mode)),
            run_config=sweep_run_config("overhead", storage, verbose=0),
        ).fit()
        stamps = results[0].metrics_dataframe["wall_time"]
        seconds = float(stamps.iloc[-1] - stamps.iloc[0])
        epochs = json.loads(timings.read_text())
    ray.shutdown()
    return {"seconds": seconds, "epochs": epochs}


def in_trial_figures(epochs: list[dict]) -> dict:
    """`in_trial_ms` and `in_trial_ratio` (see the module docstring) of one trial's per-epoch timings, over
    the epochs after the first: medians, so that one epoch the machine's load (or a periodic copy of the
    trial's files, every 5 s) stretched does not decide; `in_trial_ratio_mean` weighs every epoch."""
    steady = epochs[1:] or epochs
    compute, in_trial = sum(e["compute_s"] for e in steady), sum(e["in_trial_s"] for e in steady)
    return {
        "in_trial_ms": 1000 * statistics.median(e["in_trial_s"] for e in steady),
        "in_trial_ratio": statistics.median((e["compute_s"] + e["in_trial_s"]) / e["compute_s"] for e in steady),
        "in_trial_ratio_mean": (compute + in_trial) / compute,
        "compute_ms": 1000 * statistics.median(e["compute_s"] for e in steady),
    }


def run_again_if_ray_did_not_start(cmd: list[str], tries: int = 3) -> str:
    """The stdout of `cmd`, run again (up to `tries` times) when its local Ray did not start within Ray's
    fixed 30 s (a loaded machine). Raises CalledProcessError on any other failure."""
    from benchmarks.startup import RAY_START_FAILED

    for attempt in range(1, tries + 1):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
        if RAY_START_FAILED not in proc.stderr or attempt == tries:
            raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
        print(f"the local Ray did not start (a loaded machine): run {attempt} of {tries} is run again", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--models", default="cnn,mlp", help="comma-separated (default cnn,mlp)")
    parser.add_argument("--no-bare", action="store_true", help="Tune runs only: in-trial figures, no tune/bare ratio")
    parser.add_argument(
        "--slow-report", type=float, default=0.0, help="a slowed build: each report first sleeps F x the epoch"
    )
    parser.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)  # internal: MODE CONFIG_JSON
    args = parser.parse_args()
    if args.one:
        mode, config = args.one[0], json.loads(args.one[1])
        print("RESULT", json.dumps((bare if mode == "bare" else in_tune)(config, args.slow_report)))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    epochs = 8 if args.quick else 10  # 7 steady epochs in the quick form too: the gate reads their median
    modes = ("tune",) if args.no_bare else ("bare", "tune")
    report = {"epochs": epochs, "repeats": repeats, "slow_report": args.slow_report, "models": {}}
    print(f"digits, {epochs} epochs, report + checkpoint every epoch; median [min, max] of {repeats} fresh processes")
    print(f"{'model':<8}" + "".join(f"{h:>26}" for h in ("bare s", "tune s", "ratio", "in-trial ms", "in-trial ratio")))
    fmt = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]" if v else "-"  # noqa: E731
    for model in args.models.split(","):
        config = {"dataset": "digits", "model": model, "epochs": epochs, "checkpoint_every": 1}
        runs = {mode: [] for mode in modes}
        for _ in range(repeats):
            for mode in modes:
                cmd = [
                    sys.executable,
                    __file__,
                    "--one",
                    mode,
                    json.dumps(config),
                    "--slow-report",
                    str(args.slow_report),
                ]
                out = run_again_if_ray_did_not_start(cmd)
                runs[mode].append(json.loads(out.split("RESULT", 1)[1]))
        times = {mode: [r["seconds"] for r in runs[mode]] for mode in modes}
        ratios = [t / b for t, b in zip(times["tune"], times.get("bare", []))]
        in_trial = [in_trial_figures(r["epochs"]) for r in runs["tune"]]
        figures = {k: [f[k] for f in in_trial] for k in in_trial[0]}
        cells = (times.get("bare", []), times["tune"], ratios, figures["in_trial_ms"], figures["in_trial_ratio"])
        print(f"{model:<8}" + "".join(f"{fmt(c):>26}" for c in cells))
        report["models"][model] = {
            "bare_s": times.get("bare", []),
            "tune_s": times["tune"],
            "ratio": statistics.median(ratios) if ratios else None,
            **{k: statistics.median(v) for k, v in figures.items()},
            "tune_epochs": [r["epochs"] for r in runs["tune"]],
        }
    first = report["models"][args.models.split(",")[0]]  # cnn by default: the figure
    report |= {key: first[key] for key in ("ratio", "in_trial_ms", "in_trial_ratio")}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
