"""`--dry-run`'s estimate of a sweep's wall time and GPU-hours from a finished experiment's trials
(its seconds per epoch of each config, and that sweep's fixed seconds), through the one wall-time
model of `analysis/wall_time.py`; printed as `--estimate` prints its own with `--dry-run --estimate`."""

from __future__ import annotations

import json
import time

from analysis.wall_time import makespan, sweep_seconds
from sweeps.engine.cluster.slots import local_slots
from sweeps.engine.estimate.prediction import Estimate, format_estimate
from trainables.experiment import records, storage


def estimate_lines(cells: list[dict], experiment_dir: str, **flags) -> list[str]:
    """What `--dry-run` says about the sweep of `cells` before it runs; reads nothing heavy (pandas
    only when a finished experiment is there to learn from).

    Args:
        cells: the trials' configs.
        experiment_dir: this sweep's folder; its finished trials are the history used unless
            `estimate_from` (another experiment's folder or URI) is given.
        flags: `run_flags_of(args)`: estimate_from; cpus_per_trial, gpus_per_trial, max_concurrent,
            address (the slots, `local_slots`); epochs_of: config -> the steps its trial takes (None:
            unknown; the history's are used).
    Returns:
        Lines: trials and steps; then, with a history, the expected wall time and GPU-hours
        (`history_estimate`), else why there is no estimate.
    """
    epochs_of = flags.get("epochs_of")
    steps = [epochs_of(c) for c in cells] if epochs_of else None
    lines = [f"{len(cells)} trials" + (f", {sum(steps)} steps (epochs) in all" if steps else "")]
    estimate = history_estimate(cells, experiment_dir, **flags)
    if isinstance(estimate, str):
        return lines + [f"no estimate of the wall time: {estimate}"]
    wall, b = estimate.wall_s, estimate.basis
    return lines + [
        f"expected wall time: {wall:.0f} s ({wall / 3600:.2f} h) with {estimate.slots} trials at once ({b['slots']}), "
        f"{estimate.gpu_hours:.2f} GPU-hours; from the trials of {b['history']}"
    ]


def history_estimate(
    cells: list[dict],
    experiment_dir: str,
    *,
    estimate_from: str | None,
    cpus_per_trial: float,
    gpus_per_trial: float | str | None,
    max_concurrent: int | None = None,
    address: str | None = None,
    epochs_of=None,
) -> Estimate | str:
    """The `Estimate` of the sweep of `cells` from a finished experiment's trials (`trial_history`:
    seconds per epoch of each config, and that sweep's fixed seconds), or why there is none (str).
    Arguments as `estimate_lines`'."""
    source = estimate_from or experiment_dir
    if not storage.exists(source):
        return f"no finished experiment at {source} (--estimate-from EXP)"
    slot_count, why = local_slots(cpus_per_trial, gpus_per_trial, max_concurrent, address)
    history = trial_history(source)
    if history is None:
        return f"{source} has no finished trials"
    per_step, overhead_s = history
    durations = [trial_seconds(c, per_step, epochs_of) for c in cells]
    gpus = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else 0.0
    epochs = sum(epochs_of(c) for c in cells) if epochs_of else round(per_step["steps"] * len(cells))
    basis = {
        "slots": why,
        "history": source,
        "epoch_s": per_step[None],
        "fixed_s": overhead_s,
        "per_trial_s": 0.0,
        "notes": [],
    }
    wall = sweep_seconds(durations, slot_count, overhead_s, 0.0)
    return Estimate(wall, sum(durations) * gpus / 3600, slot_count, len(cells), epochs, basis)


def dry_run_estimate(args, cells: list[dict], experiment_dir: str) -> None:
    """`--dry-run --estimate`: `history_estimate` printed as `--estimate` prints its own (or as JSON)."""
    flags = run_flags_of(args)
    estimate = history_estimate(cells, experiment_dir, **flags)
    if isinstance(estimate, str):
        basis = {"slots": "", "fixed_s": None, "per_trial_s": None, "cannot": estimate, "notes": []}
        estimate = Estimate(None, None, 1, len(cells), None, basis)
    if args.json:
        print(json.dumps(estimate.to_json()))
    else:
        print(*format_estimate(estimate), sep="\n")


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
