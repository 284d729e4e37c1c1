"""The cost of a sweep before it runs: `--estimate` (the first cell timed) and `--dry-run` (a finished
experiment's trials), both through the one wall-time model of `analysis/wall_time.py`.

    estimate: 0:04:10 wall time (finishes about 21:47), 0.00 GPU-hours: 8 trials, 64 epochs, 2 at once (2 CPUs / 1)
    basis: first cell: start-up 1.2 s, epoch 1.5 s (2 timed); fixed 31 s (imports, Ray joined 2.1 s, report) ...

`--estimate` runs the first cell as `--check` does (`first_cell.py`), stops after `--estimate-epochs`
epochs past its first (or `ESTIMATE_LIMIT_S`; a command whose epochs nothing tells, at its end), and
predicts: each trial's start-up and epochs (its `epochs`, or the command's `--epochs N`, else the total the
command printed, else the epochs the first cell ran), on the slots this cluster gives (`slots`), longest
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

from analysis.progress import format_duration
from analysis.wall_time import TrialCost, sweep_seconds
from sweeps.engine.cluster import slots
from sweeps.engine.estimate.estimate_flags import ESTIMATE_LIMIT_S
from sweeps.engine.estimate.estimate_record import pending_record
from trainables.experiment import records

# raysweep's own seconds around the trials, in units of `first_cell.speed_probe` (a fresh `import
# ray.tune`), from benchmarks/estimate_error.py and tests/sweeps/test_estimate_sweeps.py on the shared 2-core
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
        template: a command sweep's command after --, whose `--epochs N` tells each trial's epochs.
    """

    cells: list[dict]
    kind: str
    epochs: list = dataclasses.field(default_factory=list)
    gpus: float = 0.0
    minimum: list[dict] | None = None
    upper_bound: str | None = None
    repeat: int = 1
    note: str = ""
    template: tuple[str, ...] = ()


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


def trial_epochs(cells: list[dict], kind: str, timing=None, template=()) -> tuple[list[int | None], str]:
    """Each cell's epochs and where they come from: its `epochs` (the built-in trainable's default when
    absent), else what the command says (`template`'s `--epochs N`, or `{epochs}` filled by the cell: the
    reading ASHA's max_t takes, `search_space.command_epochs`), else the total the command printed
    (`epoch 3/50`), else what the first cell ran before it ended; None where none of these tells (`timing`
    None: before the first cell ran)."""
    from sweeps.engine.command_sweep.search_space import command_epochs
    from sweeps.engine.flags import epochs_of

    if kind == "builtin":
        return [epochs_of(c) for c in cells], "each trial's epochs"
    if all(isinstance(c.get("epochs"), int) for c in cells):
        return [c["epochs"] for c in cells], "each trial's {epochs}"
    said = [command_epochs(list(template), c) for c in cells] if template else [None]
    if None not in said:
        return said, "the command's --epochs"
    if timing is not None and timing.epochs_total:
        return [timing.epochs_total] * len(cells), f"the {timing.epochs_total} epochs the command printed"
    if timing is not None and timing.exit_code == 0:
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
    epochs, source = trial_epochs(plan.cells, plan.kind, timing, plan.template)
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
    wall = format_duration(estimate.wall_s)
    if "range_s" in b:
        wall = f"{format_duration(b['range_s'][0])} to {wall}"
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


# --- --estimate: the first cell, the slots, the fixed costs ---------------------------------------------


def run_estimate(args, plan: Plan, time_cell, time_one_epoch=None, measured_s: float = 0.0) -> int:
    """`--estimate`: the cluster's slots, the first cell timed (`time_cell(epochs, limit_s, gpus) ->
    first_cell.CellTiming`; `epochs` None: to its end, a command whose epochs nothing tells before it runs),
    with `--estimate-cells all` one epoch of each value of a cost axis (`time_one_epoch(cell, gpus)`), this
    machine's speed now (`first_cell.speed_probe`); prints the estimate (or its JSON document) and keeps it
    beside the experiment for the launch.

    Args:
        args: the script's checked flags (`--estimate-*`, `--json`, the run flags).
        plan: the trials (`Plan`; its `gpus` is set here from the flags and the cluster); `plan.cells[0]`
            is the cell `time_cell` runs.
        measured_s: fixed seconds of the sweep timed before (the data loaded once in the driver).
    Returns:
        0 with an estimate, 1 when it cannot tell the wall time (the reason is printed).
    """
    from sweeps.engine.estimate.first_cell import speed_probe

    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    resources = (args.cpus_per_trial, args.gpus_per_trial, args.max_concurrent, args.address)
    slot_count, why, ray_s, gpus = slots.cluster_slots(*resources)
    plan = dataclasses.replace(plan, gpus=gpus)
    epochs, limit = args.estimate_epochs, ESTIMATE_LIMIT_S
    if None in trial_epochs(plan.cells, plan.kind, template=plan.template)[0]:  # to its end: its epochs count
        epochs = None
        say(f"--estimate: timing the first cell to its end (its epochs are unknown; at most {limit:g} s)")
    else:
        say(f"--estimate: timing the first cell until {epochs} epochs after its first (at most {limit:g} s)")
    probe_s = speed_probe()  # before and after the cell: the load may change meanwhile
    timing = time_cell(epochs, limit, gpus)
    factors, notes = _axis_factors(args, plan, timing, time_one_epoch and (lambda cell: time_one_epoch(cell, gpus)))
    if factors:
        told = trial_epochs(plan.cells, plan.kind, timing, plan.template)[0]
        plan = scale_by_axes(dataclasses.replace(plan, epochs=told), factors)
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
        records.write_pending_estimate(str(args.storage_path), args.name, pending_record(estimate.to_json()))
    return 0 if estimate.wall_s is not None else 1


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
