"""The five kinds of experiment a notebook must read, written without Ray from the records each kind leaves
(:func:`tests.helpers.analysis_fixtures.write_experiment`): a noise grid, a command sweep, a search, a PBT run and a
plain Ray Tune experiment (``Tuner(...).fit()``: Tune's files only, no ``raysweep.json``, no metric recorded).
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.analysis_fixtures import paper_grid, pbt_experiment, search_experiment, trial_spec, write_experiment

KIND_METRICS = {
    "grid": ("val/acc", "max"),
    "command": ("val_acc", "max"),
    "search": ("val/acc", "max"),
    "pbt": ("val/acc", "max"),
    "plain_tune": ("mean_accuracy", "max"),
}
"""Each kind's metric and mode, as its records give them (a plain Tune run: its first reported metric)."""


def command_sweep_experiment(root: Path, name: str = "command_sweep") -> Path:
    """A `raysweep run ... -- python train.py` grid: lr × seed (2 × 2), 3 epochs of the script's printed
    ``train_loss`` and ``val_acc`` (the command's default metric), no test metric, no noise axes.

    val_acc of (lr, seed) at epoch e: ``0.6 + 0.1 e - (0.05 if lr == 0.1 else 0) + 0.01 seed``, so the last epoch is
    each trial's best."""
    specs = []
    for k, (lr, seed) in enumerate((lr, seed) for lr in (0.01, 0.1) for seed in (0, 1)):
        rows = [
            {
                "epoch": e + 1,
                "train_loss": 1.0 / (e + 1),
                "val_acc": 0.6 + 0.1 * e - (0.05 if lr == 0.1 else 0) + 0.01 * seed,
            }
            for e in range(3)
        ]
        specs.append(trial_spec(f"command_{k:05d}", {"lr": lr, "seed": seed}, rows, start=3.0 * k))
    record = {"test_metric": None, "searcher": None, "scheduler": None}
    return write_experiment(root, name, specs, metric="val_acc", mode="max", record=record)


def plain_tune_experiment(root: Path, name: str = "train_fn_2026") -> Path:
    """What ``Tuner(train_fn, param_space={"lr": tune.grid_search([...])}).fit()`` leaves: Tune's state and trial
    files only, no metric in ``TuneConfig``; each of 3 trials reports ``mean_accuracy`` then ``loss`` (as Ray's
    examples) for 3 iterations, no ``epoch``. mean_accuracy of lr at iteration i: ``0.5 + 0.1 i + lr``."""
    specs = []
    for k, lr in enumerate((0.001, 0.01, 0.1)):
        rows = [{"mean_accuracy": 0.5 + 0.1 * i + lr, "loss": 1.0 - 0.1 * i} for i in range(3)]
        specs.append(trial_spec(f"train_fn_{k:05d}", {"lr": lr}, rows, start=3.0 * k))
    return write_experiment(root, name, specs, metric=None, raysweep=False)


def five_kinds(root: Path) -> dict[str, Path]:
    """One small experiment of each kind of :data:`KIND_METRICS` under ``root``: kind -> its folder."""
    return {
        "grid": paper_grid(root, "noise_grid", losses=("ce",), seeds=(0, 1), rates=(0.0, 0.4)),
        "command": command_sweep_experiment(root),
        "search": search_experiment(root, errored=1),
        "pbt": pbt_experiment(root),
        "plain_tune": plain_tune_experiment(root),
    }
