"""The one grid planner of `noise_grid.py` and `run_command.py`: the cells to run as Tune search space, and
the grid's run (`fit_grid`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ray import tune
from ray.tune import TuneConfig, Tuner
from ray.tune.search import BasicVariantGenerator

from sweeps.engine.flags import epochs_of
from sweeps.engine.run import resume
from sweeps.engine.run.launch import Sweep
from sweeps.engine.run.sweep_end import print_summary
from trainables.config import TrainConfig, TrialIdentity
from trainables.experiment.objective import Objective

# Relative time of one epoch of each model on the same data, for ordering trials only: mlp 0.04 s and
# cnn 0.51 s per digits epoch on one core (benchmarks/results/trainable_overhead.json); resnet18 is
# an estimate (about 10x the cnn's FLOPs per sample). Only the order these give matters.
MODEL_EPOCH_COST = {"mlp": 1.0, "cnn": 12.0, "resnet18": 120.0}


def expected_cost(config: dict) -> float:
    """Relative cost of a trial of `config`: epochs x its model's `MODEL_EPOCH_COST` (unknown models: 1;
    a command trial's `epochs` that is not a number: `TrainConfig.epochs`)."""
    epochs = epochs_of(config)
    epochs = epochs if isinstance(epochs, (int, float)) else TrainConfig.epochs
    return epochs * MODEL_EPOCH_COST.get(config.get("model", TrainConfig.model), 1.0)


def longest_first(points: list[dict], cost=expected_cost) -> list[dict]:
    """`points` ordered by decreasing `cost(point)`; equal costs keep their order.

    Tune's `BasicVariantGenerator` starts `points_to_evaluate` in the order given. Starting the
    longest trials first (Graham's LPT rule, "Bounds on multiprocessing timing anomalies", 1969)
    leaves short trials to fill the slots at the end, instead of one long trial running alone
    while the other slots idle (benchmarks/sweep_efficiency.py).
    """
    return sorted(points, key=cost, reverse=True)


@dataclasses.dataclass
class GridPlan:
    """What a grid sweep runs this time.

    Fields:
        todo: the cells to run (full trial configs), longest first (`longest_first`).
        reused: {config hash: trial folder} of the cells an earlier run finished (`resume.plan_cells`).
        param_space: the `Tuner`'s param_space: `tune.grid_search` per axis when every cell runs in
            the grid's own order, else `tune.choice` per axis with the cells as explicit points.
        search_alg: None (Tune's grid), or a `BasicVariantGenerator` over exactly `todo`.
        num_samples: `TuneConfig.num_samples`: 1 for the grid, `len(todo)` for explicit points.
    """

    todo: list[dict]
    reused: dict[str, str]
    param_space: dict
    search_alg: BasicVariantGenerator | None
    num_samples: int


def plan_grid(
    cells: list[dict],
    axes: dict,
    experiment_dir: str,
    *,
    skip_existing: bool,
    hash_fn: Callable[[dict], str] = TrialIdentity(),
    relaunch: bool = False,
) -> GridPlan:
    """Plan a grid: skip the cells already finished in `experiment_dir`, order the rest longest first.

    Ray's restore cannot extend a grid (ray-project/ray#42221), so when some cells are reused, the
    order changed, or an axis is linked (`run_command.py --axis a,b=...` or `--tasks`: `axes` has a
    key that is no single setting), every sample is one of the explicit points instead.
    Args:
        cells: one full trial config per cell, in the grid's order.
        axes: the grid's axes, setting (or tuple of linked settings) -> values.
        experiment_dir: `RunOptions.experiment_dir` (a path or a URI).
        skip_existing: False runs every cell again.
        hash_fn: a config's id (`TrialIdentity`; `resume.command_hash` for command trials).
        relaunch: a new run of the sweep, not `--resume` (`resume.plan_cells` says what reruns where).
    Returns:
        the `GridPlan`; its `todo` is empty when every cell is finished.
    """
    todo, reused = resume.plan_cells(cells, experiment_dir, skip_existing, hash_fn=hash_fn, relaunch=relaunch)
    todo = longest_first(todo)
    flat = {}  # setting -> its values, in first-seen order
    for cell in cells:
        for key, value in cell.items():
            if value not in flat.setdefault(key, []):
                flat[key].append(value)
    if todo == cells and set(flat) == set(axes):
        space = {k: tune.grid_search(v) if len(v) > 1 else v[0] for k, v in axes.items()}
        return GridPlan(todo, reused, space, None, 1)
    space = {k: tune.choice(v) if len(v) > 1 else v[0] for k, v in flat.items()}
    return GridPlan(todo, reused, space, BasicVariantGenerator(points_to_evaluate=todo), len(todo))


def say_all_finished(plan: GridPlan, experiment_dir: str, objective: Objective, report: bool = True) -> int:
    """Every cell is finished already: say so, print the sweep's table and report, and return the
    exit code of the reused trials (`resume.say_outcome`: 0 all done, 1 one diverged). `objective`:
    the sweep's (`RunOptions.objective`); `report`: write the report folder (False: --no-report)."""
    print(f"all {len(plan.reused)} cells already finished in {experiment_dir}; --no-skip-existing reruns them")
    print_summary(experiment_dir, objective, report=report)
    return resume.say_outcome(None, plan.reused, objective.metric)


def say_nothing_to_resume(
    plan: GridPlan, experiment_dir: str, objective: Objective, hash_fn: Callable, report: bool = True
) -> int | None:
    """`--resume` of a sweep whose every cell finished and none of whose trials is left unfinished
    (`resume.unfinished_trials`): say that nothing is left to run, print its table and report (`report`
    False: --no-report, none written), and return the exit code of its trials (`resume.say_outcome`); None when
    a cell or trial is left: Tune's restore runs it (a cell not finished may be one the sweep never started)."""
    if plan.todo or resume.unfinished_trials(experiment_dir, hash_fn):
        return None
    print(f"nothing left to run: all {len(plan.reused)} cells of {experiment_dir} finished (--resume)", flush=True)
    print_summary(experiment_dir, objective, report=report)
    return resume.say_outcome(None, plan.reused, objective.metric)


def fit_grid(
    sweep: Sweep, plan: GridPlan, trial_name_creator: Callable, new_tuner: Callable[[TuneConfig], Tuner]
) -> tuple[int, list]:
    """Run the planned grid (`plan_grid`) with Ray Tune, or resume it: `Sweep.fit` of the grid's `TuneConfig`
    (Tune's grid, or exactly the cells or seeds to run) and the script's own `new_tuner` (its `Tuner(...)`).
    Returns `Sweep.fit`'s (exit code, `ResultGrid`s)."""
    objective = sweep.options.objective
    tune_config = TuneConfig(
        search_alg=plan.search_alg,  # None: Tune's grid; else exactly the cells (or seeds) to run
        num_samples=plan.num_samples,
        metric=objective.metric,
        mode=objective.mode,
        trial_name_creator=trial_name_creator,  # also names the trial folders
    )
    return sweep.fit(tune_config, plan.param_space, new_tuner, reused=plan.reused)
