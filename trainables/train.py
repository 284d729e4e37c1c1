"""The training loop: `train_epochs`, a generator usable without Ray (notebooks, tests).

It yields `(metrics, checkpoint_state)` after every epoch; the checkpoint state is one dict
holding model, optimizer, LR scheduler, grad scaler, RNG states, epoch and config. What a Tune
trial does around it (reports, checkpoints, logs, GPU caps, divergence) is `trainables/trial.py`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Iterator
from contextlib import nullcontext

import numpy as np
import torch

from trainables import divergence
from trainables.config import TrainConfig, parse_config
from trainables.data import data_key, load_data, place_data
from trainables.losses import build_loss
from trainables.models import build_model
from trainables.noise import add_label_noise


def train_epochs(
    cfg: TrainConfig | dict, data: dict | None = None, state: dict | None = None
) -> Iterator[tuple[dict, dict]]:
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
    splits = place_data(data, device)  # on the GPU when they fit: batches are gathered there
    num_classes = data["num_classes"]
    y_noisy = add_label_noise(
        data["y_train"], cfg.noise_type, cfg.noise_rate, num_classes, noise_seed(cfg), cfg.dataset
    )
    flip_rate = float(np.mean(y_noisy != data["y_train"]))
    y_noisy = torch.from_numpy(y_noisy).to(splits["x_train"].device)
    mean, std = (torch.tensor(data[k], device=device) for k in ("mean", "std"))

    # Derived sizes, computed once.
    n_train = len(data["y_train"])
    micro_batch = cfg.batch_size // cfg.grad_accum_steps or 1
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    warmup_steps = round(cfg.warmup_epochs * steps_per_epoch)
    # On CUDA: cuDNN picks the fastest kernels for the fixed input shape, and image models run in
    # channels-last layout (NHWC: tensor cores' native layout, with AMP). The CPU keeps its defaults.
    layout = torch.channels_last if device.type == "cuda" and data["x_train"].ndim == 4 else torch.contiguous_format
    torch.backends.cudnn.benchmark = device.type == "cuda"

    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data["x_train"].shape[1:], num_classes).to(device, memory_format=layout)
    rank, world = _rank_and_world()  # (0, 1) unless run data-parallel by trainables/ddp.py
    loss_fn = build_loss(cfg)
    optimizer = _build_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: get_lr_factor(s, total_steps, warmup_steps))
    amp_dtype = autocast_dtype(cfg.amp, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    order_rng = torch.Generator().manual_seed(cfg.seed)  # data order, saved in checkpoints

    start_epoch = 0
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
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()] if device.type == "cuda" else None
        )

    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        model.train()
        started = time.perf_counter()
        order = torch.randperm(n_train, generator=order_rng).to(y_noisy.device)  # drawn on the CPU, as ever
        loss_sum = torch.zeros((), device=device)  # summed on the device, read once per epoch
        correct = torch.zeros((), device=device, dtype=torch.long)
        grad_norms = []
        steps = divergence.StepWatch(device)  # reads each step's finiteness without waiting on the GPU
        for step_start in range(0, n_train, cfg.batch_size):
            batch_idx = order[step_start : step_start + cfg.batch_size][
                rank::world
            ]  # each rank its share of the global batch
            # Gradient accumulation: micro-batches of one optimizer step add up their gradients.
            for micro in range(0, len(batch_idx), micro_batch):
                idx = batch_idx[micro : micro + micro_batch]
                x = _to_input(splits["x_train"][idx], mean, std, device, layout)
                y = y_noisy[idx].to(device, non_blocking=True)
                with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext():
                    logits = model(x)
                    loss = loss_fn(logits, y)
                scaler.scale(loss * len(idx) / len(batch_idx)).backward()
                loss_sum += loss.detach() * len(idx)
                correct += (logits.argmax(1) == y).sum()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)
            finite = divergence.finite(loss_sum, grad_norm, grads_may_overflow=scaler.is_enabled())
            bad = steps.push(scheduler.last_epoch + 1, finite, loss.detach(), grad_norm)
            if bad is None and step_start + cfg.batch_size >= n_train:
                bad = steps.flush()  # the epoch's last step: every flag is read before the epoch ends
            if bad is not None:
                dump = divergence.forensics(model, epoch=epoch, **bad)
                yield divergence.diverged_metrics(dump), dump
                return
            grad_norms.append(grad_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        if world > 1:  # loss and accuracy over all ranks' samples
            torch.distributed.all_reduce(loss_sum)
            torch.distributed.all_reduce(correct)
        train_seconds = time.perf_counter() - started

        numerics = (mean, std, device, amp_dtype, layout)
        val_loss, val_acc, _ = evaluate(raw_model, splits["x_val"], splits["y_val"], *numerics)
        test_loss, test_acc, test_pred = evaluate(raw_model, splits["x_test"], splits["y_test"], *numerics)
        confusion = np.bincount(data["y_test"] * num_classes + test_pred, minlength=num_classes**2).reshape(
            num_classes, -1
        )
        metrics = {
            "epoch": epoch,
            "train/loss": loss_sum.item() / n_train,
            "train/acc": correct.item() / n_train,
            "val/loss": val_loss,
            "val/acc": val_acc,
            "test/loss": test_loss,
            "test/acc": test_acc,
            "test/confusion": confusion.tolist(),  # rows: true class, columns: predicted; the trial writes it to a file
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
def evaluate(
    model, x: torch.Tensor, y: torch.Tensor, mean, std, device, amp_dtype=None, layout=torch.contiguous_format
) -> tuple[float, float, np.ndarray]:
    """Mean cross-entropy, accuracy (fraction in [0, 1]) and predicted classes (N,) of `model` on clean labels `y`.

    `x` (N, ...) and `y` (N,) are tensors on `device` or on the CPU (`trainables.data.place_data`), read in
    batches of 1024 in the model's memory `layout`; the sums stay on `device` (the loss in float64, as a
    Python float sum was) and are read once.
    """
    model.eval()
    batch_size = 1024
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct, predictions = torch.zeros((), dtype=torch.long, device=device), []
    for start in range(0, len(y), batch_size):
        xb = _to_input(x[start : start + batch_size], mean, std, device, layout)
        yb = y[start : start + batch_size].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext():
            logits = model(xb).float()
        loss_sum += torch.nn.functional.cross_entropy(logits, yb, reduction="sum").double()
        predictions.append(logits.argmax(1))
        correct += (predictions[-1] == yb).sum()
    return loss_sum.item() / len(y), correct.item() / len(y), torch.cat(predictions).cpu().numpy()


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `TrainConfig.amp` on `device`: None on the CPU and for `off`; `auto` is
    bfloat16 on a GPU that computes it natively (compute capability 8.0+: A100, H100, RTX 30xx+), else None."""
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.3 has no emulation to leave out
            native = torch.cuda.is_bf16_supported()
        return torch.bfloat16 if native else None
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]


def get_lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to 0 (Loshchilov & Hutter, SGDR, 2017)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _to_input(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, device, layout=torch.contiguous_format):
    """A batch (uint8 or float in [0, 1], on `device` or the CPU) as a normalised float32 tensor on `device`."""
    xb = x.to(device, non_blocking=True)
    xb = xb.float() / 255.0 if xb.dtype == torch.uint8 else xb.float()
    shape = (1, -1, 1, 1) if xb.ndim == 4 else (1, -1)
    if xb.ndim == 2 and mean.numel() != xb.shape[1]:
        shape = (1, -1)
    return ((xb - mean.view(shape)) / std.view(shape)).contiguous(memory_format=layout)


def _build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0, weight_decay=cfg.weight_decay
    )


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of data-parallel processes; (0, 1) without torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def noise_seed(cfg: TrainConfig) -> int:
    """The seed of the label flips: `noise_seed`, else the trial's `seed`."""
    return cfg.seed if cfg.noise_seed is None else cfg.noise_seed
