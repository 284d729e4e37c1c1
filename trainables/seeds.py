"""One Tune trial that trains a configuration with several seeds at once and reports their mean.

`train_seeds(config, data, seeds=(0, 1, 2))` runs one `train_epochs` generator per seed,
interleaved epoch by epoch, and after every epoch reports the mean over seeds of each metric
(`val/acc` is the mean val/acc), the per-seed values (`val/acc_seed0`, ...) and the spread
(`val/acc_std`, `val/acc_ci95`). A searcher (Optuna TPE) then learns from the seed mean, and an
early-stopping scheduler (ASHA) compares trials on the seed mean at every rung.

Why not `ray.tune.search.Repeater`: it runs each seed as its own trial and averages only the
final results for the searcher, and its docstring (Ray 2.x, `ray/tune/search/repeater.py`)
advises against an early-stopping scheduler: ASHA would judge, and stop, single seeds on their
own noisy curves, so a configuration could lose one seed at rung 1 and keep the others.

Checkpoints: one Tune `Checkpoint` holds every seed's state (`seed0.pt`, `seed1.pt`, ...), each the
dict `train_epochs` yields. On restore the config's `lr` and `weight_decay` are written into the
loaded optimizer and scheduler states, so population-based training can change them when it
copies another trial's checkpoint (exploit) and perturbs its config (explore).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from ray import tune
from ray.tune import Checkpoint

from trainables.config import METRIC, TrainConfig, parse_config
from trainables.data import data_key, load_data
from trainables.train import train_epochs

# Two-sided 95% Student-t quantiles for n - 1 degrees of freedom (n seeds, n <= 10); normal beyond.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def train_seeds(config: dict, data: dict | None = None, seeds: Sequence[int] = (0,)) -> None:
    """Train `config` once per seed, interleaved epoch by epoch; report the seed mean every epoch.

    Args:
        config: flat dict of `TrainConfig` fields (its `seed` is ignored: `seeds` set it).
        data: the dict of `trainables.data.load_data`, shared through `tune.with_parameters`.
        seeds: the seeds to train, e.g. (0, 1, 2); at least one.
    Reports per epoch: every numeric metric of `train_epochs` averaged over seeds (same names:
        `val/acc` is the mean val/acc), `val/acc_seed{s}` per seed, `val/acc_std` (sample std, 0 for
        one seed), `val/acc_ci95` (half-width of the 95% Student-t interval of the mean),
        `num_seeds`. A checkpoint every `checkpoint_every` epochs and at the last.
    Raises:
        ValueError: an empty `seeds` or a bad config value.
    """
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    cfg = parse_config(config)
    if data is None or data.get("key") != data_key(cfg):
        data = load_data(cfg)
    states = _load_states(tune.get_checkpoint(), cfg, seeds)
    runs = [train_epochs(parse_config({**config, "seed": s}), data, states.get(s)) for s in seeds]
    for per_seed in zip(*runs):
        metrics = seed_mean([m for m, _ in per_seed], seeds)
        if metrics["epoch"] % cfg.checkpoint_every == 0 or metrics["epoch"] == cfg.epochs:
            with tempfile.TemporaryDirectory() as folder:
                for s, (_, state) in zip(seeds, per_seed):
                    torch.save(state, Path(folder) / f"seed{s}.pt")
                tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def seed_mean(per_seed: list[dict], seeds: Sequence[int]) -> dict:
    """Mean over seeds of every numeric metric, plus per-seed `METRIC`, its std and 95% CI.

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
    out[f"{METRIC}_ci95"] = T95.get(len(values) - 1, 1.96) * std / math.sqrt(len(values)) if len(values) > 1 else 0.0
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


def _load_states(checkpoint: Checkpoint | None, cfg: TrainConfig, seeds: Sequence[int]) -> dict[int, dict]:
    """Seed -> state from a `train_seeds` checkpoint (empty when there is none)."""
    if checkpoint is None:
        return {}
    states = {}
    with checkpoint.as_directory() as folder:
        for s in seeds:
            path = Path(folder) / f"seed{s}.pt"
            if not path.exists():
                raise ValueError(f"checkpoint has no state for seed {s}: it was saved with other seeds")
            states[s] = apply_hyperparameters(torch.load(path, map_location="cpu", weights_only=True), cfg)
    return states
