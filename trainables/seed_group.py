"""Several seeds in one Tune trial: the mean they report, and hyperparameters written into a restored state.

`train_classifier(config, data, seeds=(0, 1, 2))` (`trainables/trial.py`) runs one `train_epochs`
generator per seed, interleaved epoch by epoch, and after every epoch reports the mean over seeds of each metric
(`val/acc` is the mean val/acc), the per-seed values (`val/acc_seed0`, ...) and the spread
(`val/acc_std`, `val/acc_ci95`). A searcher (Optuna TPE) then learns from the seed mean, and an
early-stopping scheduler (ASHA) compares trials on the seed mean at every rung.

Why not `ray.tune.search.Repeater`: it runs each seed as its own trial and averages only the
final results for the searcher, and its docstring (Ray 2.x, `ray/tune/search/repeater.py`)
advises against an early-stopping scheduler: ASHA would judge, and stop, single seeds on their
own noisy curves, so a configuration could lose one seed at rung 1 and keep the others.

Checkpoints: one Tune `Checkpoint` holds every seed's state (`{"epoch", "seed_states": {seed: state}}`),
each the dict `train_epochs` yields. On restore the config's `lr` and `weight_decay` are written into the
loaded optimizer and scheduler states, so population-based training can change them when it
copies another trial's checkpoint (exploit) and perturbs its config (explore).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainables.config import TrainConfig
from trainables.experiment.confidence import t_half_width  # the one t-quantile, shared with every table
from trainables.experiment.objective import Objective

METRIC = Objective.metric  # the built-in trainable's validation metric, the one its sweeps rank by


def seed_mean(per_seed: list[dict], seeds: Sequence[int]) -> dict:
    """Mean over seeds of every numeric metric, plus per-seed `METRIC`, its std and 95% CI half width
    (`trainables.experiment.confidence.t_half_width`; 0 with one seed).

    Args:
        per_seed: one metrics dict of `train_epochs` per seed, same epoch.
        seeds: the seed of each dict, for the `METRIC_seed{s}` names.
    Returns:
        A flat metrics dict; strings (e.g. `gpu_ids`) are taken from the first seed.
    """
    out = {}
    for key, value in per_seed[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(np.mean([m[key] for m in per_seed]))
        else:
            out[key] = value
    out["epoch"] = per_seed[0]["epoch"]
    values = [m[METRIC] for m in per_seed]
    for s, v in zip(seeds, values):
        out[f"{METRIC}_seed{s}"] = v
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    out[f"{METRIC}_std"] = std
    out[f"{METRIC}_ci95"] = t_half_width(std, len(values)) if len(values) > 1 else 0.0
    out["num_seeds"] = len(values)
    return out


def apply_hyperparameters(state: dict, cfg: TrainConfig) -> dict:
    """Write `cfg.lr` and `cfg.weight_decay` into a loaded checkpoint state (in place; returned).

    `train_epochs` restores the optimizer and LR scheduler from the state, which would bring back
    the old learning rate and weight decay; PBT's explore step changes them in the config, so the
    config wins. The schedule position (step count, warm-up, cosine) is kept: the new `lr` is the
    new peak the schedule is scaled to.
    """
    for group in state["optimizer"]["param_groups"]:
        group["lr"] *= cfg.lr / group["initial_lr"]  # the current step's LR, same schedule position
        group["initial_lr"] = cfg.lr
        group["weight_decay"] = cfg.weight_decay
    state["scheduler"]["base_lrs"] = [cfg.lr] * len(state["scheduler"]["base_lrs"])
    return state
