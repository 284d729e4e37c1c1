"""The cost of a sweep before it runs: `--estimate` (the first cell timed) and `--dry-run` (a finished
experiment's trials), both through the one wall-time model of `analysis/wall_time.py`.

    estimate: 0:04:10 wall time (finishes about 21:47), 0.00 GPU-hours: 8 trials, 64 epochs, 2 at once (2 CPUs / 1)
    basis: first cell: start-up 1.2 s, epoch 1.5 s (2 timed); fixed 31 s (imports, Ray joined 2.1 s, report) ...

`--estimate` runs the first cell as `--check` does (`first_cell.py`), stops after `--estimate-epochs`
epochs past its first (or `ESTIMATE_LIMIT_S`), and predicts: each trial's start-up and epochs (its
`epochs`, else the total the command printed), on the slots this cluster gives (`slots`), longest
first, plus raysweep's fixed costs (`FIXED_COSTS`, measured by `benchmarks/estimate_error.py` and
scaled by how fast this machine imports Ray Tune now). Nothing is written to the experiment; the
estimate is kept beside it (`records.write_pending_estimate`) for the sweep's launch to record, so
the final line can set it against the wall time measured (`estimate_vs_actual`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from analysis.wall_time import TrialCost, makespan, sweep_seconds
from trainables.experiment import records, storage

# raysweep's own seconds around the trials, in units of `first_cell.speed_probe` (a fresh `import
# ray.tune`), from benchmarks/estimate_error.py and tests/test_estimate_sweeps.py on the shared 2-core
# machine at load 11-35 (benchmarks/results/estimate_error*.json, 2026-11-25: a command sweep's took
# 4.6-10.7 units, median 6.3; the built-in grid's 7.1 at a steady load): `launch`: the driver from its start
# to Tune's first trials, Ray aside (imports, the grid plan, the code snapshot's bookkeeping, the driver
# record, provenance, Tune's set-up); `workers`: the trial workers' start-up and imports, all at once (in
# turns when slots outnumber cores); `end`: the last trial's end to the exit (the table, the report and its
# plots); `per_trial`: Tune's hand-over between trials on a slot (an actor reused: 0.04 s measured at load 20).
FIXED_COSTS = {
    "command": {"launch": 3.5, "workers": 1.5, "end": 1.5, "per_trial": 0.02},
    "builtin": {"launch": 3.0, "workers": 2.5, "end": 2.0, "per_trial": 0.02},
}
RAY_START_UNITS = 4.0  # a local Ray's start (GCS, raylet, dashboard and its agents), same units
# Cell axes that change what an epoch costs: the estimate cannot see through them from one cell.
COST_WORDS = ("model", "arch", "net", "batch", "dataset", "data", "size", "width", "depth", "layer", "hidden",
              "dim", "resolution", "image", "img", "seq", "length", "amp", "accum", "repeat")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A sweep's predicted cost; see `to_json` for the document.

    Fields:
        wall_s: seconds from the sweep's start to its exit (None: it cannot tell, `basis["cannot"]`).
        gpu_hours: GPU time the trials hold (GPUs per trial x their seconds / 3600).
        slots: trials at once; trials: how many; epochs: epochs of all trials (None when unknown).
        basis: what it rests on (`basis_line` prints it): timing, fixed costs, ranges, warnings.
    """

    wall_s: float | None
    gpu_hours: float | None
    slots: int
    trials: int
    epochs: int | None
    basis: dict

    def to_json(self) -> dict:
        """The `raysweep.estimate/1` document (`analysis/schemas/estimate-1.json`)."""
        from analysis.tables.json_output import ESTIMATE_SCHEMA

        finish = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + self.wall_s)) if self.wall_s else None
        fields = ("wall_s", "gpu_hours", "slots", "trials", "epochs", "basis")
        return {"schema": ESTIMATE_SCHEMA, "estimate": {k: getattr(self, k) for k in fields} | {"finish": finish}}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the sweep runs, as the estimate sees it.

    Fields:
        cells: each trial's config; kind: "command" (the user's script) or "builtin" (`trainables.train`).
        epochs: each trial's epochs (None: unknown); [] until `trial_epochs` tells them.
        gpus: GPUs per trial (`run_estimate` sets it from the flags and the cluster).
        minimum: with `--seeds auto`, the cells that run at least (the minimum seeds), else None.
        upper_bound: why the trials may end sooner (ASHA), else None.
        repeat: seeds each trial trains side by side (the searches' --repeat).
        note: a word on what the estimate assumes for this kind of sweep (PBT's exploits), else "".
    """

    cells: list[dict]
    kind: str
    epochs: list = dataclasses.field(default_factory=list)
    gpus: float = 0.0
    minimum: list[dict] | None = None
    upper_bound: str | None = None
    repeat: int = 1
    note: str = ""


def predict(plan: Plan, cost: TrialCost, slot_count: int, fixed_s: float, per_trial_s: float) -> tuple[float, float]:
    """(wall seconds of the sweep, GPU-hours) by the wall-time model: each trial `cost.seconds(its epochs)`
    (times `plan.repeat`), `per_trial_s` more, on `slot_count` slots, plus `fixed_s`."""
    seconds = [cost.startup_s + plan.repeat * cost.epoch_s * e for e in plan.epochs]
    return sweep_seconds(seconds, slot_count, fixed_s, per_trial_s), sum(seconds) * plan.gpus / 3600


def cost_axes(cells: list[dict]) -> dict[str, list]:
    """Axes of `cells` whose values may change an epoch's cost (a name holding one of `COST_WORDS`):
    name -> its distinct values, in order; `seed`, `epochs` and single-valued keys left out."""
    axes = {}
    for key in cells[0]:
        values = list(dict.fromkeys(c.get(key) for c in cells))
        if len(values) > 1 and key not in ("seed", "epochs") and any(w in key.lower() for w in COST_WORDS):
            axes[key] = values
    return axes


def trial_epochs(cells: list[dict], kind: str, timing) -> tuple[list[int | None], str]:
    """Each cell's epochs and where they come from: its `epochs` (the built-in trainable's default when
    absent), else the total the command printed (`epoch 3/50`), else what the command ran before it
    ended; None where none of these tells."""
    from sweeps.engine.flags import epochs_of

    if kind == "builtin":
        return [epochs_of(c) for c in cells], "each trial's epochs"
    if all(isinstance(c.get("epochs"), int) for c in cells):
        return [c["epochs"] for c in cells], "each trial's {epochs}"
    if timing.epochs_total:
        return [timing.epochs_total] * len(cells), f"the {timing.epochs_total} epochs the command printed"
    if timing.exit_code == 0:
        return [len(timing.epoch_ends)] * len(cells), f"the {len(timing.epoch_ends)} epochs the first cell ran"
    return [None] * len(cells), ""


def fixed_costs(kind: str, probe_s: float, ray_s: float | None, slot_count: int, measured_s: float) -> float:
    """Seconds of the sweep outside its trials: `FIXED_COSTS[kind]` and a local Ray's start
    (`RAY_START_UNITS`; `ray_s`: the measured join of a cluster instead) in units of `probe_s`;
    the trial workers start together, so more slots than cores start them in turns; `measured_s`:
    what was timed here (the data load, the copy of the code)."""
    units = FIXED_COSTS[kind]
    turns = max(1.0, slot_count / (os.cpu_count() or 1))
    ray = RAY_START_UNITS * probe_s if ray_s is None else ray_s
    return (units["launch"] + units["workers"] * turns + units["end"]) * probe_s + ray + measured_s


def estimate_from_timing(plan: Plan, timing, slot_count: int, why: str, probe_s: float, ray_s, measured_s: float):
    """The `Estimate` of `plan` from the first cell's `timing` (`first_cell.CellTiming`).

    Args:
        slot_count, why: `slots`; probe_s: `first_cell.speed_probe`; ray_s: seconds of joining the
            cluster (None: the sweep starts a local Ray); measured_s: fixed seconds timed here.
    """
    epochs, source = trial_epochs(plan.cells, plan.kind, timing)
    epochs = plan.epochs or epochs  # already scaled by the cost axes (`scale_by_axes`)
    plan = dataclasses.replace(plan, epochs=epochs)
    cost, per_trial = timing.cost, FIXED_COSTS[plan.kind]["per_trial"] * probe_s + timing.fill_s
    basis = {
        "slots": why,
        "first_cell": {
            "startup_s": cost.startup_s if cost else None,
            "epoch_s": cost.epoch_s if cost else None,
            "epochs_timed": timing.epochs_timed,
            "ran_s": timing.ran_s,
            "exit_code": timing.exit_code,
        },
        "epochs_from": source or None,
        "fixed_s": fixed_costs(plan.kind, probe_s, ray_s, slot_count, measured_s),
        "per_trial_s": per_trial,
        "probe_s": probe_s,
        "ray": "joined" if ray_s is not None else "local start",
        "ray_s": ray_s if ray_s is not None else RAY_START_UNITS * probe_s,
        "measured_s": measured_s,
        "notes": [],
    }
    if cost is None or None in epochs:
        basis["cannot"] = _cannot(cost, timing)
        return Estimate(None, None, slot_count, len(plan.cells), None, basis)
    wall, gpu_hours = predict(plan, cost, slot_count, basis["fixed_s"], per_trial)
    if plan.minimum is not None:
        at_least = [e for cell, e in zip(plan.cells, epochs) if cell in plan.minimum]
        least = dataclasses.replace(plan, cells=plan.minimum, epochs=at_least)
        basis["range_s"] = [predict(least, cost, slot_count, basis["fixed_s"], per_trial)[0], wall]
        basis["notes"].append(f"--seeds auto: {len(plan.minimum)} trials at least, {len(plan.cells)} at the cap")
    if plan.upper_bound:
        basis["upper_bound"] = plan.upper_bound
    return Estimate(wall, gpu_hours, slot_count, len(plan.cells), sum(epochs) * plan.repeat, basis)


def _cannot(cost: TrialCost | None, timing) -> str:
    """Why no wall time can be told from `timing`."""
    if cost is None and timing.exit_code not in (None, 0):
        return f"the first cell exited with code {timing.exit_code} before its first epoch ended: run --check"
    if cost is None:
        return f"the first cell reported no epoch in {timing.ran_s:.0f} s"
    return (
        "the trials' epochs are unknown: the command printed no total (such as `epoch 3/50`), has no {epochs}, "
        f"and was stopped after {len(timing.epoch_ends)} epochs"
    )


def scale_by_axes(plan: Plan, factors: dict) -> Plan:
    """`plan` with each cell's epochs scaled by its cost axes' timed `factors` ({axis: {value: epoch
    seconds / the first cell's}}), so that the first cell's epoch seconds times them fits each cell."""
    scaled = []
    for cell, epochs in zip(plan.cells, plan.epochs):
        factor = 1.0
        for axis, by_value in factors.items():
            factor *= by_value.get(cell.get(axis), 1.0)
        scaled.append(None if epochs is None else epochs * factor)
    return dataclasses.replace(plan, epochs=scaled)


def format_estimate(estimate: Estimate) -> list[str]:
    """The lines `--estimate` prints: the estimate, its basis, and what it cannot see."""
    b = estimate.basis
    share = f"{estimate.slots} at once ({b['slots']})"
    if estimate.wall_s is None:
        lines = [f"no estimate of the wall time: {b['cannot']}", basis_line(b)]
        return [line for line in lines if line] + [f"note: {n}" for n in b["notes"]]
    wall = _duration(estimate.wall_s)
    if "range_s" in b:
        wall = f"{_duration(b['range_s'][0])} to {wall}"
    finish = time.strftime("%H:%M", time.localtime(time.time() + estimate.wall_s))
    bound = f" at most (an upper bound: {b['upper_bound']})" if b.get("upper_bound") else ""
    lines = [
        f"estimate: {wall} wall time{bound} (finishes about {finish}), {estimate.gpu_hours:.2f} GPU-hours: "
        f"{estimate.trials} trials, {estimate.epochs} epochs, {share}",
        basis_line(b),
    ]
    return lines + [f"note: {n}" for n in b["notes"]]


def basis_line(b: dict) -> str:
    """`basis: first cell: start-up 1.2 s, epoch 1.5 s (2 timed); ...` (the timing, then the fixed
    costs), or the finished experiment a `--dry-run` learnt from; "" when there is no basis."""
    if b.get("history"):
        return (
            f"basis: the trials of {b['history']}: {b['epoch_s']:.1f} s per epoch on average, same config "
            f"where it ran; fixed {b['fixed_s']:.0f} s (its wall time less its trials')"
        )
    first = b.get("first_cell")
    if not first:
        return ""
    if first["epoch_s"] is not None:
        timed = f"start-up {first['startup_s']:.1f} s, epoch {first['epoch_s']:.1f} s ({first['epochs_timed']} timed)"
    else:
        timed = f"ran {first['ran_s']:.1f} s"
    epochs = f"; epochs: {b['epochs_from']}" if b.get("epochs_from") else ""
    return (
        f"basis: first cell: {timed}{epochs}; {b['per_trial_s']:.1f} s per trial more (code copy, hand-over); fixed "
        f"{b['fixed_s']:.0f} s (imports, Ray {b['ray']}, workers, report; `import ray.tune` takes {b['probe_s']:.1f} s "
        "here now)"
    )


def _duration(seconds: float) -> str:
    from analysis.progress import format_duration

    return format_duration(seconds)


# --- --estimate: the first cell, the slots, the fixed costs ---------------------------------------------


def run_estimate(args, plan: Plan, time_cell, time_one_epoch=None, measured_s: float = 0.0) -> int:
    """`--estimate`: the cluster's slots, the first cell timed (`time_cell(epochs, limit_s, gpus) ->
    first_cell.CellTiming`), with `--estimate-cells all` one epoch of each value of a cost axis
    (`time_one_epoch(cell, gpus)`), this machine's speed now (`first_cell.speed_probe`); prints the
    estimate (or its JSON document) and keeps it beside the experiment for the launch.

    Args:
        args: the script's checked flags (`--estimate-*`, `--json`, the run flags).
        plan: the trials (`Plan`; its `gpus` is set here from the flags and the cluster); `plan.cells[0]`
            is the cell `time_cell` runs.
        measured_s: fixed seconds of the sweep timed before (the data loaded once in the driver).
    Returns:
        0 with an estimate, 1 when it cannot tell the wall time (the reason is printed).
    """
    from sweeps.engine.first_cell import speed_probe
    from sweeps.engine.run_flags import ESTIMATE_LIMIT_S

    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    slot_count, why, ray_s, gpus = slots(args.cpus_per_trial, args.gpus_per_trial, args.max_concurrent, args.address)
    plan = dataclasses.replace(plan, gpus=gpus)
    epochs, limit = args.estimate_epochs, ESTIMATE_LIMIT_S
    say(f"--estimate: timing the first cell until {epochs} epochs after its first (at most {limit:g} s)")
    probe_s = speed_probe()  # before and after the cell: the load may change meanwhile
    timing = time_cell(epochs, limit, gpus)
    factors, notes = _axis_factors(args, plan, timing, time_one_epoch and (lambda cell: time_one_epoch(cell, gpus)))
    if factors:
        plan = scale_by_axes(dataclasses.replace(plan, epochs=trial_epochs(plan.cells, plan.kind, timing)[0]), factors)
    probe_s = (probe_s + speed_probe()) / 2
    measured_s += timing.snapshot_s + timing.worker_s  # once per sweep, once per worker (they start together)
    estimate = estimate_from_timing(plan, timing, slot_count, why, probe_s, ray_s, measured_s)
    estimate.basis["notes"] += notes + _packing_note(gpus) + ([plan.note] if plan.note else [])
    if args.gpus_per_trial == "auto" and gpus:
        estimate.basis["notes"].append(
            f"--gpus-per-trial auto: its memory probe chooses the share at launch; {gpus:g} assumed"
        )
    if args.json:
        print(json.dumps(estimate.to_json()))
    else:
        print(*format_estimate(estimate), sep="\n")
    if estimate.wall_s is not None:
        records.write_pending_estimate(str(args.storage_path), args.name, pending_record(estimate))
    return 0 if estimate.wall_s is not None else 1


def estimate_search(args, searched: dict, choices: dict | None = None, upper_bound: str | None = None, note="") -> int:
    """`--estimate` of a search (`lr_search.py`, `pbt.py`): `--num-samples` trials of the fixed options
    and `searched` (the middle of each searched range), each `choices` axis ({key: values}, the
    searcher's categorical choices) taken in turn, so that `--estimate-cells all` times each value.

    Args:
        args: the search's checked flags (`fixed`, `num_samples`, `repeat`, `template`: a command after --).
        upper_bound: why trials may end sooner (ASHA); note: what PBT's exploits add.
    Returns: as `run_estimate`.
    """
    from sweeps.engine.first_cell import time_builtin
    from sweeps.engine.run_flags import ESTIMATE_LIMIT_S

    first = {**args.fixed, **searched}
    choices = choices or {}
    cells = [first | {k: v[i % len(v)] for k, v in choices.items()} for i in range(args.num_samples)]
    command = getattr(args, "template", None)  # lr_search.py: a command after --
    plan = Plan(cells, "command" if command else "builtin", upper_bound=upper_bound, note=note)
    if command:
        from sweeps.engine.command_sweep.command_check import time_command

        return run_estimate(
            args,
            plan,
            lambda epochs, limit_s, gpus: time_command(args, cells[0], epochs, limit_s, gpus),
            lambda cell, gpus: time_command(args, cell, 0, ESTIMATE_LIMIT_S, gpus),
        )
    from trainables.config import parse_config
    from trainables.data import load_data

    loading = time.monotonic()
    data = load_data(parse_config(cells[0]))
    plan = dataclasses.replace(plan, repeat=args.repeat)
    return run_estimate(
        args,
        plan,
        lambda epochs, limit_s, gpus: time_builtin(cells[0], data, epochs, limit_s, args.cpus_per_trial),
        lambda cell, gpus: time_builtin(cell, data, 0, ESTIMATE_LIMIT_S, args.cpus_per_trial),
        measured_s=time.monotonic() - loading,
    )


def middle(bounds: tuple[float, float]) -> float:
    """The middle of a log-scale range (its geometric mean)."""
    return (bounds[0] * bounds[1]) ** 0.5


def _axis_factors(args, plan: Plan, timing, time_one_epoch) -> tuple[dict, list[str]]:
    """The cost axes' factors ({axis: {value: epoch seconds / the first cell's}}) timed with
    `--estimate-cells all`, else {} and a note naming each cost axis the estimate cannot see through."""
    axes = cost_axes(plan.cells)
    if not axes or timing.cost is None:
        return {}, []
    if args.estimate_cells != "all" or time_one_epoch is None:
        return {}, [
            f"the estimate cannot see through the {axis} axis ({', '.join(map(str, values))}): its cells may take "
            f"much longer or shorter than the first; --estimate-cells all times one epoch of each"
            for axis, values in axes.items()
        ]
    factors = {}
    first = plan.cells[0]
    for axis, values in axes.items():
        factors[axis] = {first[axis]: 1.0}
        for value in values[1:]:
            other = time_one_epoch({**first, axis: value})
            epoch_s = other.epoch_ends[0] - timing.cost.startup_s if other.epoch_ends else None
            factors[axis][value] = max(epoch_s, 0.0) / timing.cost.epoch_s if epoch_s else 1.0
    return factors, [f"one epoch of each {', '.join(axes)} timed: " + json.dumps(factors)]


def _packing_note(gpus: float) -> list[str]:
    """A packed GPU trial may run slower than the first cell did alone: say that it was not measured."""
    if 0 < gpus < 1:
        return [
            f"the first cell ran alone on its {gpus:g} GPU share; {int(1 / gpus)} trials packed on a GPU may each run "
            "slower (not measured: benchmarks/gpu_packing.py has no figures for this GPU)"
        ]
    return []


def slots(
    cpus_per_trial: float, gpus_per_trial: float | str | None, max_concurrent: int | None, address: str | None
) -> tuple[int, str, float | None, float]:
    """(Trials that can run at once: min(CPUs / cpus_per_trial, GPUs / gpus_per_trial, max_concurrent),
    at least 1; the reason in words; the seconds joining the cluster took, or None for a local Ray;
    the GPUs per trial: --gpus-per-trial, else (and for `auto`) 0.25 with GPUs, 0 without).

    The sweep's cluster (`cluster_to_join`: --address, RAY_ADDRESS, or the one `ray start` runs here)
    is joined for its resources and left; without one, this machine's CPUs and GPUs (NVML, or
    RAYSWEEP_LOGICAL_GPUS), as a local Ray would have them.
    """
    from sweeps.engine.cluster.ray_start import cluster_to_join

    joined = cluster_to_join(address)
    ray_s = None
    if joined:
        import ray

        started = time.monotonic()
        ray.init(address=joined, log_to_driver=False)
        ray_s = time.monotonic() - started
        cpus, gpu_count = (ray.cluster_resources().get(k, 0) for k in ("CPU", "GPU"))
        ray.shutdown()
    else:
        from sweeps.engine.cluster.gpus import read_gpus

        cpus, gpu_count = os.cpu_count() or 1, len(read_gpus() or [])
    share = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else (0.25 if gpu_count else 0.0)
    counts = {f"{cpus:g} CPUs / {cpus_per_trial:g}": int(cpus // cpus_per_trial)}
    if share:
        counts[f"{gpu_count:g} GPUs / {share:g}"] = int(gpu_count / share + 1e-9)
    if max_concurrent:
        counts["--max-concurrent"] = max_concurrent
    limit = min(counts, key=counts.get)
    where = f"{limit}, {'the cluster at ' + joined if joined else 'this machine'}"
    return max(1, counts[limit]), where, ray_s, share


# --- the estimate kept at launch, and set against the run -------------------------------------------------


def pending_record(estimate: Estimate) -> dict:
    """What `--estimate` keeps beside the experiment for the launch: the estimate, when, and the command
    line it was made for (without the estimate's own flags)."""
    return {"argv": launch_argv(sys.argv), "made": time.time(), **estimate.to_json()}


def launch_argv(argv: list[str]) -> list[str]:
    """`argv` without the flags that change nothing the sweep costs: the estimate's own (`--estimate`,
    `--estimate-epochs N`, `--estimate-cells X`, `--json`) and the console's (`--quiet`,
    `--progress-every S`, `--notify URL`), before a `--` (a command's own words after it stay): an
    estimate made for one command line applies to the launch of another with the same words left."""
    alone, valued = (
        ("--estimate", "--json", "--quiet"),
        ("--estimate-epochs", "--estimate-cells", "--progress-every", "--notify"),
    )
    own = argv[: argv.index("--")] if "--" in argv else argv  # after `--`: the user's command, as it is
    out, skip = [], False
    for word in own:
        flag = word.split("=", 1)[0]
        if skip or flag in alone or flag in valued:
            skip = not skip and flag in valued and "=" not in word
            continue
        out.append(word)
    return out + argv[len(own) :]


def take_pending_estimate(storage_path: str, name: str) -> dict | None:
    """At a new sweep's launch: the estimate `--estimate` made for this very command line (removed
    from beside the experiment: it is the experiment's now), or None."""
    record = records.read_pending_estimate(storage_path, name)
    if record is None:
        return None
    records.delete_pending_estimate(storage_path, name)
    if record.get("argv") != launch_argv(sys.argv):
        return None
    return record["estimate"] | {"made": record.get("made")}


def record_actual(experiment_dir: str, resumed: bool) -> str:
    """At the end of a run: its wall time (process start to now), set against the estimate that its
    launch kept in `raysweep.json` (a new sweep's run only; recorded there as `actual_wall_s`).
    Returns the final line's words: `wall time 0:01:05, estimated 0:01:10 (+8 %)`."""
    from sweeps.engine.sweep_records.provenance_capture import process_start_time

    wall_s = time.time() - process_start_time()
    settings = records.read_settings(experiment_dir) or {}
    kept = None if resumed else settings.get("estimate")
    if kept:
        records.write_settings(experiment_dir, settings | {"estimate": kept | {"actual_wall_s": wall_s}})
    return estimate_vs_actual(kept, wall_s)


def estimate_vs_actual(estimate: dict | None, wall_s: float) -> str:
    """`wall time 0:01:05, estimated 0:01:10 (+8 %)`: the error is (estimate - actual) / actual; the
    wall time alone without an estimate."""
    line = f"wall time {_duration(wall_s)}"
    if not estimate or not estimate.get("wall_s"):
        return line
    error = (estimate["wall_s"] - wall_s) / wall_s
    return f"{line}, estimated {_duration(estimate['wall_s'])} ({100 * error:+.0f} %)"


# --- --dry-run: from a finished experiment's trials ----------------------------------------------------------


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


def local_slots(
    cpus_per_trial: float, gpus_per_trial: float | str | None, max_concurrent: int | None, address: str | None
) -> tuple[int, str]:
    """(Trials that can run at once on this machine: min(CPUs / cpus_per_trial, GPUs /
    gpus_per_trial, max_concurrent), at least 1; the reason in words). CPUs from `os.cpu_count`,
    GPUs from NVML, without starting Ray; with `address` (a cluster) this machine's count is a
    lower bound, and the words say so."""
    from sweeps.engine.sweep_records.provenance_capture import local_gpus

    cpus = os.cpu_count() or 1
    gpu_count = len(local_gpus()[0])
    share = gpus_per_trial if isinstance(gpus_per_trial, (int, float)) else (0.25 if gpu_count else 0.0)
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
