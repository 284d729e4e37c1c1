"""--dry-run's estimate: trials, steps and, from a finished experiment's histories, wall time and GPU-hours."""

from __future__ import annotations

import heapq
import os
import time

from trainables.experiment import records, storage


def estimate_lines(
    cells: list[dict],
    experiment_dir: str,
    *,
    estimate_from: str | None,
    cpus_per_trial: float,
    gpus_per_trial: float | str | None,
    max_concurrent: int | None = None,
    address: str | None = None,
    epochs_of=None,
) -> list[str]:
    """What `--dry-run` says about the sweep of `cells` before it runs; reads nothing heavy (pandas
    only when a finished experiment is there to learn from).

    Args:
        cells: the trials' configs.
        experiment_dir: this sweep's folder; its finished trials are the history used unless
            `estimate_from` (another experiment's folder or URI) is given.
        cpus_per_trial, gpus_per_trial, max_concurrent, address: the run flags (slots, `slots`).
        epochs_of: config -> the steps its trial takes (None: unknown; the history's are used).
    Returns:
        Lines: trials and steps; then, with a history, the expected wall time and GPU-hours
        (`expected_wall_s`), else why there is no estimate.
    """
    steps = [epochs_of(c) for c in cells] if epochs_of else None
    lines = [f"{len(cells)} trials" + (f", {sum(steps)} steps (epochs) in all" if steps else "")]
    source = estimate_from or experiment_dir
    if not storage.exists(source):
        return lines + [f"no estimate of the wall time: no finished experiment at {source} (--estimate-from EXP)"]
    slot_count, why = slots(cpus_per_trial, gpus_per_trial, max_concurrent, address)
    history = trial_history(source)
    if history is None:
        return lines + [f"no estimate of the wall time: {source} has no finished trials"]
    per_trial, overhead_s = history
    durations = [trial_seconds(c, per_trial, epochs_of) for c in cells]
    wall = overhead_s + makespan(durations, slot_count)
    gpus = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else 0.0
    return lines + [
        f"expected wall time: {wall:.0f} s ({wall / 3600:.2f} h) with {slot_count} trials at once ({why}), "
        f"{sum(durations) * gpus / 3600:.2f} GPU-hours; from the trials of {source}"
    ]


def run_flags_of(args) -> dict:
    """`estimate_lines`' keyword arguments from a grid script's checked flags (epochs: a
    `TrainConfig` trial's `epochs`; a command's steps are unknown before it runs)."""
    from sweeps.engine.flags import epochs_of

    return {
        "estimate_from": args.estimate_from,
        "cpus_per_trial": args.cpus_per_trial,
        "gpus_per_trial": args.gpus_per_trial,
        "max_concurrent": args.max_concurrent,
        "address": args.address,
        "epochs_of": None if hasattr(args, "template") else epochs_of,
    }


def slots(
    cpus_per_trial: float, gpus_per_trial: float | str | None, max_concurrent: int | None, address: str | None
) -> tuple[int, str]:
    """(Trials that can run at once on this machine: min(CPUs / cpus_per_trial, GPUs /
    gpus_per_trial, max_concurrent), at least 1; the reason in words). CPUs from `os.cpu_count`,
    GPUs from NVML, without starting Ray; with `address` (a cluster) this machine's count is a
    lower bound, and the words say so."""
    from sweeps.engine.run_flags import GPU_SHARE
    from sweeps.engine.sweep_records.provenance_capture import local_gpus

    cpus = os.cpu_count() or 1
    gpu_count = len(local_gpus()[0])
    share = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else (GPU_SHARE if gpu_count else 0.0)
    counts = {f"{cpus} CPUs / {cpus_per_trial:g}": int(cpus // cpus_per_trial)}
    if share:
        counts[f"{gpu_count} GPUs / {share:g}"] = int(gpu_count // share) if share < 1 else gpu_count // int(share)
    if max_concurrent:
        counts["--max-concurrent"] = max_concurrent
    limit = min(counts, key=counts.get)
    where = "this machine" if address in (None, "local") else "this machine only; a cluster has more"
    return max(1, counts[limit]), f"{limit}, {where}"


def trial_history(experiment_dir: str) -> tuple[dict, float] | None:
    """From a finished experiment: ({config without epochs (as a sorted tuple): seconds per step
    (duration / iterations), None: the mean over all trials, "steps": mean steps per trial}, and
    the sweep's fixed overhead in seconds (its wall time, process start to driver exit, less the
    makespan of its trials as they ran: Ray's start-up, imports, the report). None when no trial
    finished."""
    from analysis.reading.load import load_trials

    trials = load_trials(experiment_dir)
    done = trials[(trials["status"] == "TERMINATED") & (trials["iterations"] > 0)]
    if done.empty:
        return None
    config = [c for c in done.columns if c.startswith("config/") and c != "config/epochs"]
    per_step = {}
    for _, row in done.iterrows():
        key = tuple(sorted((c[len("config/") :], row[c]) for c in config))
        per_step[key] = row["duration_s"] / row["iterations"]
    per_step[None] = float(done["duration_s"].sum() / done["iterations"].sum())
    concurrent = concurrency(done)
    overhead = max(0.0, (sweep_wall_s(experiment_dir) or 0.0) - makespan(list(done["duration_s"]), concurrent))
    per_step["steps"] = float(done["iterations"].mean())
    return per_step, overhead


def trial_seconds(cell: dict, per_step: dict, epochs_of=None) -> float:
    """Expected seconds of a trial of `cell`: the seconds per step of the same config (any
    epochs) in the history, else the mean, times its steps (`epochs_of`, else the history's mean)."""
    key = tuple(sorted((k, v) for k, v in cell.items() if k != "epochs"))
    steps = epochs_of(cell) if epochs_of else per_step["steps"]
    return per_step.get(key, per_step[None]) * steps


def makespan(durations: list[float], slot_count: int) -> float:
    """Seconds until `durations` (seconds) all end on `slot_count` slots, longest first, each on
    the first free slot (Graham's LPT list scheduling, 1969, as `launch.longest_first` orders them)."""
    ends = [0.0] * max(1, slot_count)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(ends, ends[0] + d)
    return max(ends)


def concurrency(trials) -> int:
    """The most trials that ran at the same time (from `start_time` / `end_time`), at least 1."""
    events = sorted([(t, 1) for t in trials["start_time"].dropna()] + [(t, -1) for t in trials["end_time"].dropna()])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return max(1, peak)


def sweep_wall_s(experiment_dir: str) -> float | None:
    """Seconds the latest run of the sweep took: its process start (the newest provenance record,
    else driver.json's `since`) to the driver's exit (driver.json's `ended`); None when unknown."""
    from analysis.reading.provenance import read_records

    driver = records.read_driver(experiment_dir)
    if driver is None:
        return None
    runs = read_records(experiment_dir)
    started = runs[-1]["started"] if runs else time.mktime(time.strptime(driver["since"], "%Y-%m-%d %H:%M:%S"))
    return driver["ended"] - started if driver.get("ended") else None
