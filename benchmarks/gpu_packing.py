"""Does packing trials onto one GPU pay? Throughput of 1 x 1, 2 x 0.5, 4 x 0.25 and 8 x 0.125 GPU per trial.

Run (on a machine with a CUDA GPU; elsewhere it says so and exits 0):
    python benchmarks/gpu_packing.py                 # mlp, cnn, resnet18; fp32 and bf16; 1, 2, 4, 8 trials per GPU
    python benchmarks/gpu_packing.py --quick         # resnet18, fp32, 1 and 4 trials per GPU, 2 epochs
    python benchmarks/gpu_packing.py --json out.json --plot out.png
    python benchmarks/gpu_packing.py --from-json benchmarks/results/gpu_packing.json   # table + plot again, no GPU
    make bench-gpu

Each configuration (model, precision, k trials per GPU) is one Tune run of k trials with 1/k GPU
each, set up as every sweep is (`sweeps/engine/cluster/trial_resources.py`: `with_resources`;
`sweeps/engine/run/launch.py`: `sweep_tune_config`, `sweep_run_config`), all started together on GPU 0.
Each trial is the real trial runtime
(`trainables.trial.train_classifier`: memory cap at its share, NVML sampling) on synthetic
CIFAR-shaped data (uint8 3x32x32, 10 classes, written once as an .npz). Per trial, from its
reports: samples/s (median over the epochs after the first: no start-up; `samples_per_s` counts
training steps only), peak CUDA memory against its cap (`gpu/memory_cap` x the device's
memory), NVML utilisation (`gpu/utilization_mean`, the device's, sampled every second). Total
samples/s = the sum over the k concurrent trials.

OOM check: one resnet18 trial at the smallest share, with a batch size estimated from the measured
memory per sample to need about 1.5x its cap; it must raise `GpuOutOfMemory` and finish after
`launch.rerun_oom_trials` re-queues it at twice the share.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("mlp", "cnn", "resnet18")
AMPS = ("off", "bf16")  # fp32 and bf16 autocast (`TrainConfig.amp`)
TRIALS_PER_GPU = (1, 2, 4, 8)
BATCH_SIZE = 128


def write_synthetic_cifar(path: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """Write CIFAR-shaped random data to `path` (.npz: x, y, x_test, y_test; uint8 (N, 3, 32, 32), 10 classes)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    np.savez(
        path,
        x=rng.integers(0, 256, (n_train, 3, 32, 32), dtype=np.uint8),
        y=rng.integers(0, 10, n_train),
        x_test=rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8),
        y_test=rng.integers(0, 10, n_test),
    )
    return path


def trial_figures(history, total_memory_bytes: int) -> dict:
    """One trial's figures from its reports (a DataFrame of `train_classifier`'s metrics, one row per epoch)."""
    steady = history["samples_per_s"].iloc[1:] if len(history) > 1 else history["samples_per_s"]
    cap = history["gpu/memory_cap"].iloc[-1] if "gpu/memory_cap" in history else None
    util = history["gpu/utilization_mean"].iloc[-1] if "gpu/utilization_mean" in history else None
    return {
        "samples_per_s": float(statistics.median(steady)),
        "peak_memory_bytes": int(history["cuda/peak_memory_bytes"].max()),
        "memory_cap_bytes": int(cap * total_memory_bytes) if cap and not math.isnan(cap) else None,  # 0: uncapped
        "utilization_percent": None if util is None or math.isnan(util) else float(util),
    }


def run_packing(
    model: str,
    amp: str,
    k: int,
    *,
    data: dict,
    data_root: str,
    epochs: int,
    cpus_per_trial: float,
    storage: str,
    total_memory_bytes: int,
) -> dict:
    """k concurrent trials of `model` at 1/k GPU each; returns the row of the table (see `format_table`)."""
    from ray import tune

    from sweeps.engine.cluster.trial_resources import with_resources
    from sweeps.engine.run.launch import TrialFunction, sweep_run_config, sweep_tune_config
    from trainables import train_classifier
    from trainables.experiment.objective import Objective

    name = f"{model}_{amp}_{k}x"
    space = {
        "dataset": "npz",
        "data_root": data_root,
        "model": model,
        "amp": amp,
        "epochs": epochs,
        "batch_size": BATCH_SIZE,
        "checkpoint_every": epochs,
        "seed": tune.grid_search(list(range(k))),
    }
    trainable = with_resources(
        TrialFunction(train_classifier, {"data": data}), 1.0 / k, cpus_per_trial, f"{storage}/{name}"
    )
    results = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=sweep_tune_config(tune.TuneConfig(metric=Objective.metric, mode=Objective.mode)),
        run_config=sweep_run_config(name, storage, max_failures=0),
    ).fit()
    errors = [str(r.error) for r in results if r.error is not None]
    if errors:
        return {"model": model, "amp": amp, "trials_per_gpu": k, "errors": errors}
    trials = [trial_figures(r.metrics_dataframe, total_memory_bytes) for r in results]
    return {
        "model": model,
        "amp": amp,
        "trials_per_gpu": k,
        "gpu_per_trial": 1.0 / k,
        "trials": trials,
        "total_samples_per_s": sum(t["samples_per_s"] for t in trials),
    }


def check_oom_requeue(
    rows: list[dict], *, data: dict, data_root: str, cpus_per_trial: float, storage: str, total_memory_bytes: int
) -> dict:
    """Run one resnet18 trial sized to exceed its cap at the smallest share; check it is re-queued at twice
    the share."""
    from ray import tune

    from sweeps.engine.cluster.trial_resources import with_resources
    from sweeps.engine.run.launch import TrialFunction, rerun_oom_trials, sweep_run_config, sweep_tune_config
    from trainables import train_classifier
    from trainables.experiment.objective import Objective
    from trainables.gpu_share import is_gpu_oom

    share = 1.0 / max(TRIALS_PER_GPU)
    measured = [r for r in rows if r["model"] == "resnet18" and r["amp"] == "off" and "trials" in r]
    if not measured:
        return {"skipped": "no fp32 resnet18 row to size the batch from"}
    per_sample = max(t["peak_memory_bytes"] for t in measured[0]["trials"]) / BATCH_SIZE
    cap = share * (1 - 0.1) * total_memory_bytes  # TrainConfig.gpu_memory_headroom = 0.1
    batch_size = int(1.5 * cap / per_sample)
    space = {"dataset": "npz", "data_root": data_root, "model": "resnet18", "epochs": 1, "batch_size": batch_size}

    def trainable_for(gpu_share: float):
        return with_resources(
            TrialFunction(train_classifier, {"data": data}), gpu_share, cpus_per_trial, f"{storage}/oom"
        )

    run_config = sweep_run_config("oom", storage, max_failures=0)
    tune_config = sweep_tune_config(
        tune.TuneConfig(
            metric=Objective.metric, mode=Objective.mode, trial_name_creator=lambda trial: f"oom_{trial.trial_id}"
        )
    )
    first = tune.Tuner(trainable_for(share), param_space=space, tune_config=tune_config, run_config=run_config).fit()
    rounds = rerun_oom_trials(first, trainable_for, share, run_config, tune_config)
    return {
        "batch_size": batch_size,
        "share": share,
        "cap_bytes": int(cap),
        "first_round_oom": any(r.error is not None and is_gpu_oom(r.error) for r in rounds[0]),
        "requeued_shares": [share * 2**i for i in range(1, len(rounds))],
        "finished_after_requeue": len(rounds) > 1 and all(r.error is None for r in rounds[-1]),
    }


def format_table(report: dict) -> str:
    """The table of a report: one row per model, precision and trials per GPU."""
    gib = 2**30
    head = (
        f"{'model':<9}{'amp':<6}{'trials':>7}{'GPU each':>9}{'samples/s per trial':>22}{'total samples/s':>17}"
        f"{'x vs 1x1':>9}{'peak / cap GiB':>17}{'util %':>8}"
    )
    lines = [
        f"{report['device']}, {report['total_memory_bytes'] / gib:.0f} GiB; batch {BATCH_SIZE}, "
        f"{report['epochs']} epochs on {report['n_train']} synthetic CIFAR-shaped images",
        head,
    ]
    single = {
        (r["model"], r["amp"]): r["total_samples_per_s"]
        for r in report["rows"]
        if r["trials_per_gpu"] == 1 and "trials" in r
    }
    for r in report["rows"]:
        if "trials" not in r:
            lines.append(f"{r['model']:<9}{r['amp']:<6}{r['trials_per_gpu']:>7}  failed: {r['errors'][0][:80]}")
            continue
        rates = [t["samples_per_s"] for t in r["trials"]]
        peak = max(t["peak_memory_bytes"] for t in r["trials"]) / gib
        caps = [t["memory_cap_bytes"] for t in r["trials"] if t["memory_cap_bytes"]]
        utils = [t["utilization_percent"] for t in r["trials"] if t["utilization_percent"] is not None]
        base = single.get((r["model"], r["amp"]))
        speedup = f"{r['total_samples_per_s'] / base:.2f}" if base else "-"
        lines.append(
            f"{r['model']:<9}{r['amp']:<6}{r['trials_per_gpu']:>7}{r['gpu_per_trial']:>9.3g}"
            f"{f'{statistics.median(rates):,.0f} [{min(rates):,.0f}, {max(rates):,.0f}]':>22}"
            f"{r['total_samples_per_s']:>17,.0f}{speedup:>9}"
            f"{(f'{peak:.2f} / {min(caps) / gib:.2f}' if caps else f'{peak:.2f} / -'):>17}"
            f"{(f'{statistics.mean(utils):.0f}' if utils else '-'):>8}"
        )
    oom = report.get("oom") or {}
    if "first_round_oom" in oom:
        lines.append(
            f"OOM check: batch {oom['batch_size']} at {oom['share']:g} GPU (cap {oom['cap_bytes'] / gib:.2f} GiB): "
            f"out of memory {'yes' if oom['first_round_oom'] else 'NO'}; re-queued at "
            f"{', '.join(f'{s:g}' for s in oom['requeued_shares']) or '-'} GPU; "
            f"finished {'yes' if oom['finished_after_requeue'] else 'NO'}"
        )
    elif oom:
        lines.append(f"OOM check skipped: {oom.get('skipped')}")
    return "\n".join(lines)


def plot_throughput(report: dict):
    """Figure: total samples/s against trials per GPU, one line per model and precision (log-2 x axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for model in dict.fromkeys(r["model"] for r in report["rows"]):
        for amp in dict.fromkeys(r["amp"] for r in report["rows"]):
            rows = [r for r in report["rows"] if r["model"] == model and r["amp"] == amp and "trials" in r]
            if rows:
                ax.plot(
                    [r["trials_per_gpu"] for r in rows],
                    [r["total_samples_per_s"] for r in rows],
                    marker="o",
                    label=f"{model} {'fp32' if amp == 'off' else amp}",
                )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("trials per GPU (each gets 1/k GPU)")
    ax.set_ylabel("total training samples/s")
    ax.set_title(f"Packing trials on one {report['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def measure(quick: bool) -> dict | None:
    """Run every configuration on GPU 0; None when this machine has no CUDA GPU."""
    import ray
    import torch

    if not torch.cuda.is_available():
        return None
    from trainables import load_data, parse_config

    models, amps, ks = (("resnet18",), ("off",), (1, 4)) if quick else (MODELS, AMPS, TRIALS_PER_GPU)
    epochs, n_train = (2, 4096) if quick else (4, 20_000)
    props = torch.cuda.get_device_properties(0)
    cpus_per_trial = max(0.5, math.floor(2 * (os.cpu_count() or 8) / max(ks)) / 2)  # the same for every k
    report = {
        "device": props.name,
        "total_memory_bytes": props.total_memory,
        "epochs": epochs,
        "n_train": n_train,
        "batch_size": BATCH_SIZE,
        "cpus_per_trial": cpus_per_trial,
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        data_root = str(write_synthetic_cifar(Path(tmp) / "cifar_shaped.npz", n_train, 2000))
        data = load_data(parse_config({"dataset": "npz", "data_root": data_root}))
        ray.init(num_gpus=1, include_dashboard=False, log_to_driver=False)
        for model in models:
            for amp in amps:
                for k in ks:
                    report["rows"].append(
                        run_packing(
                            model,
                            amp,
                            k,
                            data=data,
                            data_root=data_root,
                            epochs=epochs,
                            cpus_per_trial=cpus_per_trial,
                            storage=f"{tmp}/runs",
                            total_memory_bytes=props.total_memory,
                        )
                    )
        report["oom"] = check_oom_requeue(
            report["rows"],
            data=data,
            data_root=data_root,
            cpus_per_trial=cpus_per_trial,
            storage=f"{tmp}/runs",
            total_memory_bytes=props.total_memory,
        )
        ray.shutdown()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="resnet18, fp32, 1 and 4 trials per GPU, 2 epochs")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument(
        "--plot", default=None, help="write the throughput plot to this image (default: next to --json)"
    )
    parser.add_argument("--from-json", default=None, help="print the table and plot of recorded figures; runs nothing")
    args = parser.parse_args()
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
    else:
        report = measure(args.quick)
        if report is None:
            print(
                "gpu_packing: no CUDA GPU on this machine: nothing measured (run it on a GPU machine: make bench-gpu)"
            )
            if args.json:
                Path(args.json).write_text(json.dumps({"skipped": "no CUDA GPU"}, indent=1))
            return
    print(format_table(report))
    if args.json and not args.from_json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    plot = args.plot or (str(Path(args.json).with_suffix(".png")) if args.json else None)
    if plot:
        plot_throughput(report).savefig(plot, dpi=120)
        print(f"plot: {plot}")


if __name__ == "__main__":
    main()
