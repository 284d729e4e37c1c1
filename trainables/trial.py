"""The built-in trainable's trial: what a trial of `noise_grid.py`, `lr_search.py` or `pbt.py` does around the
training loop. (A trial of your own command is `trainables/command/runner.py:train_command`.)

`train_classifier(config, data, seeds=None)` is the Tune trainable (Function API) of the built-in
sweeps: the grid (one seed per trial), the searches' `--repeat N` (N seeds side by side in one trial,
reported as their mean) and, through `trainables/ddp.py`, each rank of a data-parallel trial.
Around `train_epochs` it does, once for all of them:

- title the worker process `ray::<trial name>` while the trial runs (`trainables/proctitle.py`);
- resume from the newest loadable `checkpoint_*` of the trial (`trainables/checkpoints.py`);
- write `trial_config.json` (config + hash: skip-existing), `noise.json` (realised noise) and
  `placement.json` (its GPU ids, from its start: `trainables/gpu_use.py:record_placement`);
- cap a fractional GPU's memory, turn CUDA OOM into `GpuOutOfMemory` with its marker, sample
  NVML utilisation (`trainables/gpu.py`);
- per epoch, a log line, `tune.report` of the metrics and, every `checkpoint_every` epochs, a
  `Checkpoint` (one nanoGPT-style dict; with several seeds, one per seed inside it);
- a seed whose loss or gradients turn NaN/inf ends the trial as `diverged` (naming the seed and
  epoch) with `divergence.json` in the trial folder, never as an error.

torch (with the training loop and the GPU caps) is imported when a trial starts, not with this module:
a sweep's driver imports `train_classifier` to hand it to Tune and never trains (1.3 s of its start-up).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from ray import tune
from ray.tune import Checkpoint

from trainables import divergence
from trainables.checkpoints import CHECKPOINT_FILE, load_latest_state
from trainables.config import TrainConfig, config_hash, identity, parse_config
from trainables.data import data_key, load_data
from trainables.experiment import records
from trainables.experiment.storage import trial_folder, trial_storage_dir
from trainables.experiment.trial_end import ended_before_restart, final_epoch_recorded
from trainables.gpu_share import trial_gpu_fraction
from trainables.gpu_use import gpu_metrics, record_placement, sample_gpu_utilization
from trainables.logs import log_epoch, trial_logger
from trainables.noise import add_label_noise, transition_matrix
from trainables.proctitle import report_then_refresh, titled_trial
from trainables.seed_group import apply_hyperparameters, seed_mean


@titled_trial
def train_classifier(config: dict, data: dict | None = None, seeds: Sequence[int] | None = None) -> None:
    """Train one trial under Ray Tune (or plainly, printing one line per epoch).

    Args:
        config: flat dict of `TrainConfig` fields; unknown keys raise ValueError.
        data: the dict from `trainables.data.load_data`, shared by the sweep through
            `tune.with_parameters`; None (or data for another split) loads it here.
        seeds: train these seeds side by side, epoch by epoch, and report their mean
            (`trainables/seed_group.py:seed_mean`); None trains `config["seed"]` alone.
    Reports per epoch: epoch, train/loss, train/acc (against noisy labels), val/loss, val/acc,
        test/loss, test/acc (clean labels), lr, grad_norm, samples_per_s, noise/flip_rate,
        gpu_ids, wall_time, cuda/peak_memory_bytes on a GPU, and gpu/fraction, gpu/memory_cap,
        gpu/utilization_mean (NVML) from `trainables.gpu`; with several seeds the mean of each
        plus `val/acc_seed<s>`, `val/acc_std`, `val/acc_ci95`, `num_seeds`.
    Raises:
        GpuOutOfMemory: CUDA ran out of memory at this trial's GPU share (the sweep re-queues it).
        ValueError: an empty `seeds`, or a bad config value.
    """
    from trainables import gpu  # torch: in the trial, not in the driver that imports this module
    from trainables.train import train_epochs

    cfg = parse_config(config)
    seeds = (cfg.seed,) if seeds is None else tuple(seeds)
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    if data is None or data.get("key") != data_key(cfg):
        data = load_data(cfg)
    trial_name = _tune_trial_name()
    states = restore_states(cfg, seeds) if trial_name else {}
    if states and min(state["epoch"] for state in states.values()) >= cfg.epochs:
        return  # finished before the driver was killed (after Tune's last snapshot): nothing to run again
    if trial_name and (ended_before_restart(trial_name) or final_epoch_recorded(trial_name, cfg.epochs)):
        return  # ended after Tune's last snapshot, which named an older checkpoint (object storage) or none
    gpu_fraction = trial_gpu_fraction()  # fractional GPUs are capped so a trial cannot starve its neighbours
    trial_dir = start_trial(cfg, data)
    if trial_dir is not None:
        record_placement(trial_dir, gpu_fraction)  # the progress line names its GPU before its first epoch
    runs = [train_epochs(dataclasses.replace(cfg, seed=s), data, states.get(s)) for s in seeds]
    memory_cap = gpu.cap_gpu_memory(gpu_fraction, cfg.gpu_memory_headroom)
    with (
        sample_gpu_utilization(gpu.nvml_utilization_reader()) as utilization,
        gpu.mark_gpu_oom(gpu_fraction, trial_dir),
    ):
        report_epochs(
            cfg,
            seeds,
            runs,
            trial_dir,
            lambda: gpu_metrics(gpu_fraction, memory_cap, utilization),
            report=report_then_refresh(tune.report) if trial_dir else None,
        )


def report_epochs(
    cfg: TrainConfig,
    seeds: Sequence[int],
    runs: list,
    trial_dir: Path | None,
    extra_metrics: Callable[[], dict],
    report: Callable | None = tune.report,
    checkpoint_type: type = Checkpoint,
) -> None:
    """Drive the `train_epochs` generators of `seeds` epoch by epoch and report each epoch.

    Args:
        runs: one `train_epochs` generator per seed, in the order of `seeds`.
        trial_dir: the trial's folder, where the log line, `divergence.json`, `confusion.json`
            and the checkpoint come from; None on the ranks > 0 of a data-parallel trial, which
            only report (Ray Train keeps rank 0's checkpoint).
        extra_metrics: called each epoch; its dict is merged into the metrics (GPU readings).
        report, checkpoint_type: `tune.report` and `tune.Checkpoint`; the ranks of a
            data-parallel trial pass `ray.train.report` and `ray.train.Checkpoint`; `report=None`
            (outside Tune) prints one plain line per epoch instead.
    """
    import torch

    log = trial_logger(trial_dir.name) if trial_dir and report else None
    started, first_epoch, best_val = time.perf_counter(), None, _best_val_so_far(trial_dir)
    for per_seed in zip(*runs):
        diverged = [(s, m, dump) for s, (m, dump) in zip(seeds, per_seed) if m.get("diverged")]
        if diverged:
            end_diverged(*diverged[0], len(seeds), trial_dir, report)
            return
        confusion = [m.pop("test/confusion", None) for m, _ in per_seed][0]  # first seed's: one noise draw, not a mean
        metrics = per_seed[0][0] if len(seeds) == 1 else seed_mean([m for m, _ in per_seed], seeds)
        metrics.update(extra_metrics())
        first_epoch = metrics["epoch"] - 1 if first_epoch is None else first_epoch
        if report is None:
            print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
            continue
        improved = metrics["val/acc"] > best_val  # ties keep the earliest epoch
        best_val = max(best_val, metrics["val/acc"])
        if trial_dir is None:  # a data-parallel rank > 0
            report(metrics)
            continue
        log_epoch(log, metrics, cfg.epochs, started, first_epoch)  # -> the trial folder's `stdout` file
        if confusion is not None and (improved or metrics["epoch"] == cfg.epochs):
            write_confusion(trial_dir, confusion, metrics, improved, metrics["epoch"] == cfg.epochs)
        if metrics["epoch"] % cfg.checkpoint_every == 0 or metrics["epoch"] == cfg.epochs:
            with tempfile.TemporaryDirectory() as folder:
                states = [state for _, state in per_seed]
                state = (
                    states[0]
                    if len(seeds) == 1
                    else {"epoch": metrics["epoch"], "seed_states": dict(zip(seeds, states))}
                )
                torch.save(state, Path(folder) / CHECKPOINT_FILE)
                report(metrics, checkpoint=checkpoint_type.from_directory(folder))
        else:
            report(metrics)


def end_diverged(
    seed: int, metrics: dict, dump: dict, num_seeds: int, trial_dir: Path | None, report: Callable | None
) -> None:
    """The last report of a trial in which `seed` diverged: `diverged: True`, the seed and epoch,
    no sweep metric (schedulers skip it), and `divergence.json` in the trial folder."""
    metrics = {**metrics, "diverged/seed": seed}
    if report is None:
        print(f"diverged: seed {seed} at epoch {metrics['epoch']}, step {metrics['diverged/step']}")
        return
    if trial_dir is not None:
        divergence.write_dump(trial_dir, {**dump, "seed": seed, "num_seeds": num_seeds})
    report(metrics)


def start_trial(cfg: TrainConfig, data: dict) -> Path | None:
    """Inside a Tune trial: write `trial_config.json` (the resolved config, its hash and whether it trains on
    a GPU: how a later run of the sweep recognises this cell as done, `config.identity`) and `noise.json`;
    return the trial folder. Outside Tune: None, nothing written."""
    if _tune_trial_name() is None:
        return None
    import torch

    trial_dir = trial_folder()  # on storage: every node of a cluster, every retry and --resume see it
    on_gpu = torch.cuda.is_available()  # a trial given no GPU sees none (CUDA_VISIBLE_DEVICES is empty)
    saved = {
        "config_hash": config_hash(cfg, on_gpu),
        "config": dataclasses.asdict(cfg),
        "on_gpu": on_gpu,
        "identity": identity(cfg, on_gpu),  # the settings as they train: amp=auto without CUDA is off
    }
    records.write_trial_config(trial_dir, saved)
    write_noise_summary(cfg, data, trial_dir)
    return trial_dir


def restore_states(cfg: TrainConfig, seeds: Sequence[int]) -> dict[int, dict]:
    """Seed -> checkpoint state to resume from (empty when the trial starts afresh).

    The newest loadable checkpoint of the trial wins (`_load_checkpoint`). The config's `lr` and
    `weight_decay` are written into each state (`apply_hyperparameters`): population-based
    training changes them when it copies another trial's checkpoint.
    Raises:
        ValueError: the checkpoint was saved with other seeds.
    """
    state = _load_checkpoint(tune.get_checkpoint())
    if state is None:
        return {}
    states = state["seed_states"] if "seed_states" in state else {cfg.seed if len(seeds) == 1 else seeds[0]: state}
    missing = [s for s in seeds if s not in states]
    if missing:
        raise ValueError(f"the checkpoint holds seeds {sorted(states)}, not {missing}: it was saved with other seeds")
    return {s: apply_hyperparameters(states[s], cfg) for s in seeds}


def write_noise_summary(cfg: TrainConfig, data: dict, trial_dir: Path) -> None:
    """Write the realised flip rate and noise transition matrix to `trial_dir/noise.json`."""
    from trainables.train import noise_seed

    clean = data["y_train"]
    noisy = add_label_noise(clean, cfg.noise_type, cfg.noise_rate, data["num_classes"], noise_seed(cfg), cfg.dataset)
    summary = {
        "noise_type": cfg.noise_type,
        "noise_rate": cfg.noise_rate,
        "realised_flip_rate": float(np.mean(noisy != clean)),
        "transition_matrix": transition_matrix(clean, noisy, data["num_classes"]).round(4).tolist(),
    }
    records.write_noise(trial_dir, summary)


def write_confusion(trial_dir: Path, matrix: list, metrics: dict, best: bool, last: bool) -> None:
    """Update `confusion.json`: the clean-test confusion matrix (rows: true class, columns:
    predicted) under "last" at the trial's last epoch, under "best-val" at the best-`val/acc`
    epoch so far (ties: the earliest), for the per-class plots of `analysis`."""
    saved = records.read_confusion(trial_dir) or {}  # a torn file (warned about) starts afresh
    saved.update({"num_classes": len(matrix), "labels": "rows are true classes, columns predicted (clean test set)"})
    if last:
        saved["last"] = {"epoch": metrics["epoch"], "test": matrix}
    if best:
        saved["best-val"] = {"epoch": metrics["epoch"], "val/acc": metrics["val/acc"], "test": matrix}
    records.write_confusion(trial_dir, saved)


def _best_val_so_far(trial_dir: Path | None) -> float:
    """The best `val/acc` a resumed trial already reached (from its `confusion.json`), else -inf."""
    saved = records.read_confusion(trial_dir) if trial_dir else None  # a torn file: warned about, skipped
    best = (saved or {}).get("best-val")
    value = best.get("val/acc") if isinstance(best, dict) else None
    return float(value) if isinstance(value, (int, float)) else -math.inf


def _tune_trial_name() -> str | None:
    """The trial's name inside a Tune session, None outside one (a plain call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tune.get_context().get_trial_name()


def _load_checkpoint(checkpoint: Checkpoint | None) -> dict | None:
    """The newest loadable state of this trial (see `trainables/checkpoints.py`), or None.

    On local storage every `checkpoint_*` folder of the trial is a candidate, so a torn latest
    checkpoint falls back to an earlier one and a stale experiment state never costs an epoch.
    """
    trial_dir = trial_storage_dir()
    if trial_dir is not None or checkpoint is None:
        return load_latest_state(checkpoint.path if checkpoint else None, trial_dir)
    with checkpoint.as_directory() as folder:  # remote storage: Tune's checkpoint, downloaded
        return load_latest_state(folder, None)
