"""How busy does a sweep keep its GPU slots? raysweep's Tune settings vs Tune's defaults vs batches of four.

Run:
    python benchmarks/sweep_efficiency.py                 # 24 trials of 10-25 s on 4 logical GPUs, 3 repetitions
    python benchmarks/sweep_efficiency.py --quick         # 8 trials of 1-3 s, 1 repetition (CI)
    python benchmarks/sweep_efficiency.py --json out.json

Trials are CPU-light (they sleep in 1 s "epochs", report every epoch and save a small checkpoint
every epoch), so the figures measure scheduling and Tune overhead, not compute. Each repetition of
each scheme runs in a fresh process. Definitions (per run):
    ideal makespan      = sum of trial durations / slots
    efficiency_steady   = ideal makespan / (last trial end - first trial start)
    efficiency_total    = ideal makespan / (end - script start, Ray start-up included)
    startup_s           = first trial start - script start: imports and `ray.init` (startup_ray_s),
                          the Tuner built (startup_tuner_s), `fit()` to the first trial (startup_fit_s)
    per_trial_overhead_s = mean over trials of (time in trial - its work) + mean idle gap between
                          consecutive trials on the same slot (the tail after the last trial is
                          not overhead: it is what heterogeneous lengths cost any scheduler),
                          broken down by `overhead_breakdown` (checkpoint write, its persist to
                          storage, the rest of the report round trip, other, the gap)
raysweep's scheme is what `sweeps/engine/run/launch.py` sets up (actor reuse, checkpoints kept, trial files
synced in the background) with the trials in the order `grid_plan.longest_first` gives (the sweeps
order by epochs x model; here the cost is the known duration). Tune's defaults run the grid in
the order given. The batch-of-four scheme is seed 004's: four processes at a time (`CUDA_VISIBLE_DEVICES=i`),
the next batch starts when the slowest of the four ends.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SLOTS = 4


def durations(quick: bool) -> list[float]:
    import numpy as np

    rng = np.random.default_rng(0)
    if quick:
        return [float(d) for d in rng.integers(1, 4, size=8)]
    return [float(d) for d in rng.integers(10, 26, size=24)]  # trials >= 10 s, as the targets are stated


def time_checkpoint_persist() -> dict:
    """Time Ray's copy of each reported checkpoint to storage in this worker (benchmark instrumentation:
    `StorageContext.persist_current_checkpoint`, which `tune.report` calls before handing the result
    over). Returns the dict whose "last_s" holds the latest copy's seconds."""
    from trainables import ray_private

    StorageContext = ray_private.storage_context_class()

    timing = {"last_s": 0.0}
    original = StorageContext.persist_current_checkpoint
    if getattr(original, "timed", False):
        return original.timing

    def persist(self, checkpoint):
        start = time.perf_counter()
        try:
            return original(self, checkpoint)
        finally:
            timing["last_s"] = time.perf_counter() - start

    persist.timed, persist.timing = True, timing
    StorageContext.persist_current_checkpoint = persist
    return timing


def sleep_trial(config: dict) -> None:
    """A trial whose work is `duration` seconds of 1 s epochs, reported and checkpointed each epoch.

    Each report also carries what the previous epoch's overhead cost (seconds): `write_s` (the
    checkpoint written to a local folder), `report_s` (the whole `tune.report` call) and
    `persist_s` (Ray's copy of the checkpoint to storage, inside `tune.report`).
    """
    from ray import tune
    from ray.tune import Checkpoint

    persist = time_checkpoint_persist()
    start = time.time()
    epochs = int(config["duration"])
    last = {"write_s": 0.0, "report_s": 0.0, "persist_s": 0.0}
    for epoch in range(1, epochs + 1):
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as folder:
            t0 = time.perf_counter()
            Path(folder, "checkpoint.pt").write_bytes(b"\0" * 100_000)
            write_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            tune.report(
                {
                    "epoch": epoch,
                    "val/acc": epoch / epochs,
                    "trial_start": start,
                    "wall_time": time.time(),
                    "gpu_ids": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                    **{f"prev_{k}": v for k, v in last.items()},
                    "write_s": write_s,
                },
                checkpoint=Checkpoint.from_directory(folder),
            )
            last = {"write_s": write_s, "report_s": time.perf_counter() - t1, "persist_s": persist["last_s"]}


def run_tune(scheme: str, work: list[float], storage: str) -> dict:
    """One sweep through Tune; returns per-trial (slot, start, end, work) and the times."""
    t0 = time.time()
    import ray
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    from sweeps.engine.grid.plan import longest_first
    from sweeps.engine.run.launch import sweep_run_config, sweep_tune_config
    from trainables.experiment.objective import Objective

    ray.init(num_cpus=2, num_gpus=SLOTS, include_dashboard=False, log_to_driver=False)
    ray_up = time.time()
    trainable = tune.with_resources(sleep_trial, {"cpu": 0.25, "gpu": 1})
    if scheme == "raysweep":  # as noise_grid.py does: explicit points, longest trials first
        points = longest_first([{"duration": d} for d in work], cost=lambda point: point["duration"])
        tuner = tune.Tuner(
            trainable,
            param_space={"duration": tune.choice(work)},
            tune_config=sweep_tune_config(
                tune.TuneConfig(
                    metric=Objective.metric,
                    mode=Objective.mode,
                    num_samples=len(points),
                    search_alg=BasicVariantGenerator(points_to_evaluate=points),
                )
            ),
            run_config=sweep_run_config("bench", storage, verbose=0),
        )
    else:  # Tune's defaults, as a first-time user writes it
        tuner = tune.Tuner(
            trainable,
            param_space={"duration": tune.grid_search(work)},
            run_config=tune.RunConfig(name="bench", storage_path=storage, verbose=0),
        )
    fit_start = time.time()
    results = tuner.fit()
    end = time.time()
    trials = []
    for result in results:
        history = result.metrics_dataframe
        trial = {
            "slot": history["gpu_ids"].iloc[-1],
            "start": float(history["trial_start"].iloc[0]),
            "end": float(history["wall_time"].iloc[-1]),
            "work": float(result.config["duration"]),
        }
        if "prev_report_s" in history:  # the first report carries zeros; the last one's own costs are not seen
            seen = history.iloc[1:]
            trial |= {
                "write_s": float(history["write_s"].sum()),
                "reports": len(history),
                "report_s": float(seen["prev_report_s"].mean()) if len(seen) else 0.0,
                "persist_s": float(seen["prev_persist_s"].mean()) if len(seen) else 0.0,
            }
        trials.append(trial)
    ray.shutdown()
    return {"t0": t0, "ray_up": ray_up, "fit_start": fit_start, "end": end, "trials": trials}


def run_batches(work: list[float]) -> dict:
    """Seed 004's scheme: 4 processes at a time, each batch waits for its slowest task."""
    t0 = time.time()
    trials = []
    for first in range(0, len(work), SLOTS):
        procs = []
        for slot, d in enumerate(work[first : first + SLOTS]):
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(slot)}
            start = time.time()
            p = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({d})"], env=env)
            procs.append((slot, start, d, p))
        for slot, start, d, p in procs:
            p.wait()
            trials.append({"slot": str(slot), "start": start, "end": time.time(), "work": d})
    return {"t0": t0, "end": time.time(), "trials": trials}


def summarise(run: dict) -> dict:
    trials = run["trials"]
    ideal = sum(t["work"] for t in trials) / SLOTS
    first, last = min(t["start"] for t in trials), max(t["end"] for t in trials)
    in_trial = statistics.mean(t["end"] - t["start"] - t["work"] for t in trials)
    gaps = []
    for slot in {t["slot"] for t in trials}:
        on_slot = sorted((t for t in trials if t["slot"] == slot), key=lambda t: t["start"])
        gaps += [b["start"] - a["end"] for a, b in zip(on_slot, on_slot[1:])]
    return {
        **overhead_breakdown(trials, gaps),
        "efficiency_steady": ideal / (last - first),
        "efficiency_total": ideal / (run["end"] - run["t0"]),
        "startup_s": first - run["t0"],
        **(
            {
                "startup_ray_s": run["ray_up"] - run["t0"],
                "startup_tuner_s": run["fit_start"] - run["ray_up"],
                "startup_fit_s": first - run["fit_start"],
            }
            if "fit_start" in run
            else {}
        ),
        "per_trial_overhead_s": in_trial + (statistics.mean(gaps) if gaps else 0.0),
        "makespan_s": last - first,
        "ideal_makespan_s": ideal,
    }


def overhead_breakdown(trials: list[dict], gaps: list[float]) -> dict:
    """Where a trial's overhead goes, seconds per trial (means over trials): `write` the checkpoint
    files, `persist` Ray's copy of them to storage, `report` the rest of `tune.report` (the round
    trip through the driver: the result goes there, the trial waits for its next `train` call),
    `other` the rest of the time in the trial beyond its work (sleep overshoot, folders, the first
    report's set-up), `reuse_gap` the idle time between consecutive trials on one slot (actor reuse:
    reset and the next trial's set-up); `outside_report` what is not Tune's report (write + other +
    reuse_gap: the per-trial overhead outside Tune's report, issue 50's figure). Schemes without the
    per-report figures (batches) give none."""
    if not trials or "report_s" not in trials[0]:
        return {}
    per_trial = {
        "write": statistics.mean(t["write_s"] for t in trials),
        # the last report is stamped before it is made: its costs fall outside the trial's time
        "persist": statistics.mean(t["persist_s"] * (t["reports"] - 1) for t in trials),
        "report": statistics.mean((t["report_s"] - t["persist_s"]) * (t["reports"] - 1) for t in trials),
    }
    in_trial = statistics.mean(t["end"] - t["start"] - t["work"] for t in trials)
    per_trial["other"] = in_trial - sum(per_trial.values())
    per_trial["reuse_gap"] = statistics.mean(gaps) if gaps else 0.0
    per_trial["outside_report"] = per_trial["write"] + per_trial["other"] + per_trial["reuse_gap"]
    per_trial["reports_per_trial"] = statistics.mean(t["reports"] for t in trials)
    return {f"overhead_{k}_s" if k != "reports_per_trial" else k: v for k, v in per_trial.items()}


def one(scheme: str, quick: bool) -> dict:
    work = durations(quick)
    if scheme == "batch4":
        return summarise(run_batches(work))
    with tempfile.TemporaryDirectory() as storage:
        return summarise(run_tune(scheme, work, storage))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 short trials, 1 repetition")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions per scheme (default 3; 1 with --quick)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one scheme, print JSON
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.quick)))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    runs: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for scheme in ("raysweep", "ray_defaults", "batch4"):  # interleaved: drifts hit all schemes alike
            cmd = [sys.executable, __file__, "--one", scheme] + (["--quick"] if args.quick else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs.setdefault(scheme, []).append(json.loads(out.split("RESULT ", 1)[1]))

    def med(scheme, key):
        values = [r[key] for r in runs[scheme]]
        return statistics.median(values), min(values), max(values)

    keys = ("efficiency_steady", "efficiency_total", "startup_s", "per_trial_overhead_s", "makespan_s")
    print(f"{len(durations(args.quick))} trials on {SLOTS} slots, {repeats} repetition(s); median [min, max]")
    print(f"{'scheme':<14}" + "".join(f"{k:>30}" for k in keys))
    for scheme in runs:
        print(f"{scheme:<14}" + "".join(f"{'%.3f [%.3f, %.3f]' % med(scheme, k):>30}" for k in keys))
    parts = [k for k in runs["raysweep"][0] if k.startswith("overhead_")] + ["reports_per_trial"]
    print(
        "per-trial overhead, seconds per trial (write / persist the checkpoint, the rest of tune.report, "
        "other time in the trial, idle gap before the next trial on the slot)"
    )
    print(f"{'scheme':<14}" + "".join(f"{k.removeprefix('overhead_'):>24}" for k in parts))
    for scheme in ("raysweep", "ray_defaults"):
        print(f"{scheme:<14}" + "".join(f"{'%.3f [%.3f, %.3f]' % med(scheme, k):>24}" for k in parts))
    steps = ("startup_ray_s", "startup_tuner_s", "startup_fit_s")
    print("start-up to the first trial, seconds: imports + ray.init, the Tuner built, fit() to the first trial")
    for scheme in ("raysweep", "ray_defaults"):
        print(f"{scheme:<14}" + "".join(f"{'%.3f [%.3f, %.3f]' % med(scheme, k):>24}" for k in steps))
    report = {key: med("raysweep", key)[0] for key in keys + tuple(parts) + steps}
    report |= {
        "batch4_efficiency": med("batch4", "efficiency_steady")[0],
        "ray_defaults_efficiency": med("ray_defaults", "efficiency_steady")[0],
        "ray_defaults_per_trial_overhead_s": med("ray_defaults", "per_trial_overhead_s")[0],
        **{f"ray_defaults_{k}": med("ray_defaults", k)[0] for k in ("startup_s",) + steps},
        "startup_vs_ray_defaults": statistics.median(
            a["startup_s"] / b["startup_s"] for a, b in zip(runs["raysweep"], runs["ray_defaults"])
        ),
        "ideal_makespan_s": runs["raysweep"][0]["ideal_makespan_s"],
        "repeats": repeats,
        "trials": len(durations(args.quick)),
        "slots": SLOTS,
        "runs": runs,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
