"""The shared training function: one trial of a label-noise sweep, Tune's Function API.

`train_classifier(config)` is what Tune runs. It parses the config, resumes from
`tune.get_checkpoint()`, and for each epoch of `train_epochs` calls `tune.report` with the
metrics and, every `checkpoint_every` epochs, a `Checkpoint` holding model, optimizer,
LR scheduler, grad scaler, RNG states and epoch. `train_epochs` is the loop itself, a
generator usable without Ray (notebooks, tests).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from ray import tune
from ray.tune import Checkpoint

from trainables import divergence
from trainables.checkpoints import CHECKPOINT_FILE, load_latest_state
from trainables.config import TrainConfig, config_hash, parse_config
from trainables.data import data_key, load_data
from trainables.gpu import cap_gpu_memory, gpu_metrics, mark_gpu_oom, nvml_utilization_reader, sample_gpu_utilization, trial_gpu_fraction
from trainables.logs import log_epoch, trial_logger
from trainables.losses import build_loss
from trainables.models import build_model
from trainables.noise import add_label_noise, transition_matrix


def train_classifier(config: dict, data: dict | None = None) -> None:
    """Train one trial under Ray Tune (or plainly, printing one line per epoch).

    Args:
        config: flat dict of `TrainConfig` fields; unknown keys raise ValueError.
        data: the dict from `trainables.data.load_data`, shared by the sweep through
            `tune.with_parameters`; None (or data for another split) loads it here.
    Reports per epoch: epoch, train/loss, train/acc (against noisy labels), val/loss, val/acc,
        test/loss, test/acc (clean labels), lr, grad_norm, samples_per_s, noise/flip_rate,
        gpu_ids, wall_time, cuda/peak_memory_bytes on a GPU, and gpu/fraction, gpu/memory_cap,
        gpu/utilization_mean (NVML) from `trainables.gpu`. Writes `noise.json` (realised flip
        rate, transition matrix) into the trial folder.
    Raises:
        GpuOutOfMemory: CUDA ran out of memory at this trial's GPU share (the sweep re-queues it).
    """
    cfg = parse_config(config)
    if data is None or data.get("key") != data_key(cfg):
        data = load_data(cfg)
    in_tune = _tune_trial_name() is not None
    state = _load_checkpoint(tune.get_checkpoint()) if in_tune else None
    if in_tune:
        trial_dir = Path(tune.get_context().get_trial_dir())
        _write_noise_summary(cfg, data, trial_dir)
        # The resolved config and its hash: how a later run of the sweep recognises this cell as done.
        (trial_dir / "trial_config.json").write_text(json.dumps({"config_hash": config_hash(cfg), "config": dataclasses.asdict(cfg)}))
    gpu_fraction = trial_gpu_fraction()  # fractional GPUs are capped so a trial cannot starve its neighbours
    memory_cap = cap_gpu_memory(gpu_fraction, cfg.gpu_memory_headroom)
    with sample_gpu_utilization(nvml_utilization_reader()) as utilization, \
            mark_gpu_oom(gpu_fraction, Path(tune.get_context().get_trial_dir()) if in_tune else None):
        _report_epochs(cfg, data, state, in_tune, lambda: gpu_metrics(gpu_fraction, memory_cap, utilization))


def _report_epochs(cfg: TrainConfig, data: dict, state: dict | None, in_tune: bool, extra_metrics) -> None:
    """Run `train_epochs`; per epoch, log a line and `tune.report` metrics (+ a `Checkpoint` when due)."""
    if in_tune:
        trial_dir = Path(tune.get_context().get_trial_dir())
        log, started, first_epoch = trial_logger(_tune_trial_name()), time.perf_counter(), (state or {}).get("epoch", 0)
    for metrics, checkpoint_state in train_epochs(cfg, data, state):
        metrics.update(extra_metrics())
        if in_tune and not metrics.get("diverged"):
            log_epoch(log, metrics, cfg.epochs, started, first_epoch)  # -> the trial folder's `stdout` file
        if not in_tune:
            print(" | ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        elif metrics.get("diverged"):  # the last yield; checkpoint_state is then the forensic dump
            divergence.write_dump(trial_dir, checkpoint_state)
            tune.report(metrics)
        elif metrics["epoch"] % cfg.checkpoint_every == 0 or metrics["epoch"] == cfg.epochs:
            with tempfile.TemporaryDirectory() as folder:
                torch.save(checkpoint_state, Path(folder) / CHECKPOINT_FILE)
                tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def train_epochs(cfg: TrainConfig | dict, data: dict | None = None, state: dict | None = None) -> Iterator[tuple[dict, dict]]:
    """Train epoch by epoch, yielding `(metrics, checkpoint_state)` after each epoch.

    Args:
        cfg: a `TrainConfig` or its dict.
        data: see `train_classifier`.
        state: a checkpoint state from an earlier yield (or `torch.load` of one) to resume from.
    Yields:
        metrics: dict of floats/ints (see `train_classifier`).
        checkpoint_state: dict of model, optimizer, scheduler, scaler and RNG states, epoch and
            config. It references live tensors: save it before asking for the next epoch.
        When the loss or gradient norm turns NaN/inf, the last yield is
        `(divergence.diverged_metrics(dump), dump)`: `diverged: True` and the forensic dump of
        `divergence.forensics` instead of a checkpoint; the generator then ends.
    """
    cfg = cfg if isinstance(cfg, TrainConfig) else parse_config(cfg)
    if data is None or data.get("key") != data_key(cfg):
        data = load_data(cfg)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    num_classes = data["num_classes"]
    y_noisy = add_label_noise(data["y_train"], cfg.noise_type, cfg.noise_rate, num_classes, _noise_seed(cfg), cfg.dataset)
    flip_rate = float(np.mean(y_noisy != data["y_train"]))
    y_noisy = torch.from_numpy(y_noisy).to(device)
    mean, std = (torch.tensor(data[k], device=device) for k in ("mean", "std"))

    # Derived sizes, computed once.
    n_train = len(data["y_train"])
    micro_batch = cfg.batch_size // cfg.grad_accum_steps or 1
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    warmup_steps = round(cfg.warmup_epochs * steps_per_epoch)

    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data["x_train"].shape[1:], num_classes).to(device)
    rank, world = _rank_and_world()  # (0, 1) unless run data-parallel by trainables/ddp.py
    loss_fn = build_loss(cfg)
    optimizer = _build_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: get_lr_factor(s, total_steps, warmup_steps))
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp) if device.type == "cuda" else None
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    order_rng = torch.Generator().manual_seed(cfg.seed)  # data order, saved in checkpoints

    start_epoch = 0
    last_finite_loss = None  # a tensor: reading it every step would cost a sync
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        order_rng.set_state(state["order_rng"])
        torch.set_rng_state(state["torch_rng"])
        if device.type == "cuda" and state.get("cuda_rng"):
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        start_epoch = state["epoch"]
    raw_model = model  # checkpoints hold the unwrapped model, loadable with or without DDP
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if device.type == "cuda" else None)

    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        model.train()
        started = time.perf_counter()
        order = torch.randperm(n_train, generator=order_rng).numpy()
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        grad_norms = []
        for step_start in range(0, n_train, cfg.batch_size):
            batch_idx = order[step_start : step_start + cfg.batch_size][rank::world]  # each rank its share of the global batch
            # Gradient accumulation: micro-batches of one optimizer step add up their gradients.
            for micro in range(0, len(batch_idx), micro_batch):
                idx = batch_idx[micro : micro + micro_batch]
                x = _to_input(data["x_train"][idx], mean, std, device)
                y = y_noisy[idx]
                with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext():
                    logits = model(x)
                    loss = loss_fn(logits, y)
                scaler.scale(loss * len(idx) / len(batch_idx)).backward()
                loss_sum += loss.detach() * len(idx)
                correct += (logits.argmax(1) == y).sum()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)
            if not divergence.is_finite(loss_sum, grad_norm, grads_may_overflow=scaler.is_enabled()):
                dump = divergence.forensics(model, epoch=epoch, step=scheduler.last_epoch + 1, loss=loss, grad_norm=grad_norm,
                                            last_finite_loss=None if last_finite_loss is None else last_finite_loss.item())
                yield divergence.diverged_metrics(dump), dump
                return
            last_finite_loss = loss.detach()
            grad_norms.append(grad_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        if world > 1:  # loss and accuracy over all ranks' samples
            torch.distributed.all_reduce(loss_sum)
            torch.distributed.all_reduce(correct)
        train_seconds = time.perf_counter() - started

        val_loss, val_acc = evaluate(raw_model, data["x_val"], data["y_val"], mean, std, device, amp_dtype)
        test_loss, test_acc = evaluate(raw_model, data["x_test"], data["y_test"], mean, std, device, amp_dtype)
        metrics = {
            "epoch": epoch,
            "train/loss": loss_sum.item() / n_train,
            "train/acc": correct.item() / n_train,
            "val/loss": val_loss,
            "val/acc": val_acc,
            "test/loss": test_loss,
            "test/acc": test_acc,
            "lr": optimizer.param_groups[0]["lr"],
            "grad_norm": torch.stack(grad_norms).mean().item(),
            "samples_per_s": n_train / train_seconds,
            "noise/flip_rate": flip_rate,
            "gpu_ids": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "wall_time": time.time(),  # seconds since the epoch, float: Tune's own `timestamp` is whole seconds
        }
        if device.type == "cuda":
            metrics["cuda/peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        checkpoint_state = {
            "epoch": epoch,
            "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "order_rng": order_rng.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else [],
            "config": dataclasses.asdict(cfg),
        }
        yield metrics, checkpoint_state


@torch.no_grad()
def evaluate(model, x: np.ndarray, y: np.ndarray, mean, std, device, amp_dtype=None, batch_size: int = 1024) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (fraction in [0, 1]) of `model` on clean labels `y`."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        xb = _to_input(x[start : start + batch_size], mean, std, device)
        yb = torch.from_numpy(y[start : start + batch_size].copy()).to(device)
        with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext():
            logits = model(xb).float()
        loss_sum += torch.nn.functional.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    return loss_sum / len(y), correct / len(y)


def get_lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to 0 (Loshchilov & Hutter, SGDR, 2017)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _to_input(x: np.ndarray, mean: torch.Tensor, std: torch.Tensor, device) -> torch.Tensor:
    """A numpy batch (uint8 or float in [0, 1]) as a normalised float32 tensor on `device`."""
    x = x if x.flags.writeable else x.copy()  # arrays from Ray's object store are read-only views
    xb = torch.from_numpy(np.ascontiguousarray(x)).to(device, non_blocking=True).float()
    if x.dtype == np.uint8:
        xb = xb / 255.0
    shape = (1, -1, 1, 1) if xb.ndim == 4 else (1, -1)
    if xb.ndim == 2 and mean.numel() != xb.shape[1]:
        shape = (1, -1)
    return (xb - mean.view(shape)) / std.view(shape)


def _build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0, weight_decay=cfg.weight_decay)


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of data-parallel processes; (0, 1) without torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _noise_seed(cfg: TrainConfig) -> int:
    return cfg.seed if cfg.noise_seed is None else cfg.noise_seed


def _tune_trial_name() -> str | None:
    """The trial's name inside a Tune session, None outside one (a plain call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tune.get_context().get_trial_name()


def _load_checkpoint(checkpoint: Checkpoint | None) -> dict | None:
    """The newest loadable state of this trial (see `trainables/checkpoints.py`), or None.

    On local storage every `checkpoint_*` folder of the trial is a candidate, so a torn latest
    checkpoint falls back to an earlier one and a stale experiment state never costs an epoch.
    Ray has no public API for the trial's storage folder, hence the guarded internal one.
    """
    try:
        import pyarrow.fs
        from ray.train._internal.session import get_session

        storage = get_session().storage
        local = isinstance(storage.storage_filesystem, pyarrow.fs.LocalFileSystem)
        trial_dir = storage.trial_fs_path if local else None
    except Exception:  # another Ray version: Tune's checkpoint alone
        trial_dir = None
    if trial_dir is not None or checkpoint is None:
        return load_latest_state(checkpoint.path if checkpoint else None, trial_dir)
    with checkpoint.as_directory() as folder:  # remote storage: Tune's checkpoint, downloaded
        return load_latest_state(folder, None)


def _write_noise_summary(cfg: TrainConfig, data: dict, trial_dir: Path) -> None:
    """Write the realised flip rate and noise transition matrix to `trial_dir/noise.json`."""
    clean = data["y_train"]
    noisy = add_label_noise(clean, cfg.noise_type, cfg.noise_rate, data["num_classes"], _noise_seed(cfg), cfg.dataset)
    summary = {
        "noise_type": cfg.noise_type,
        "noise_rate": cfg.noise_rate,
        "realised_flip_rate": float(np.mean(noisy != clean)),
        "transition_matrix": transition_matrix(clean, noisy, data["num_classes"]).round(4).tolist(),
    }
    (trial_dir / "noise.json").write_text(json.dumps(summary, indent=1))
