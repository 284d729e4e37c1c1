"""The trial configuration: one flat dict from Tune, parsed once into `TrainConfig`.

The sweep metric and mode live here too, so `sweeps/` and `analysis/` agree on them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

METRIC = "val/acc"  # the metric every sweep ranks trials by
MODE = "max"

DATASETS = ("digits", "cifar10", "npz")
MODELS = ("mlp", "cnn", "resnet18")
LOSSES = ("ce", "label_smoothing", "gce", "sce")
NOISE_TYPES = ("sym", "asym")
OPTIMIZERS = ("sgd", "adamw")
AMP_MODES = ("off", "bf16", "fp16")
RUN_ONLY_KEYS = ("checkpoint_every", "gpu_memory_headroom")  # change how a trial runs, not what it learns


@dataclass
class TrainConfig:
    """Everything one trial needs. Tune passes it as a plain dict; unknown keys are an error."""

    # data
    dataset: str = "digits"  # digits (bundled with scikit-learn) | cifar10 | npz
    data_root: str | None = None  # cifar10: folder with data_batch_1..5, test_batch; npz: the .npz file
    data_seed: int = 0  # fixes the stratified train/val/test split
    val_fraction: float = 0.15  # share of the labelled pool held out, clean, for validation
    test_fraction: float = 0.2  # share held out for test when the data set has no test split
    # label noise (training labels only)
    noise_type: str = "sym"  # sym: uniform flip to another class; asym: pair-flip (Patrini et al. 2017)
    noise_rate: float = 0.0  # probability that a training label is flipped, in [0, 1)
    noise_seed: int | None = None  # seeds the flips; None: use `seed`
    # model and loss
    model: str = "mlp"  # mlp | cnn | resnet18 (CIFAR variant)
    loss: str = "ce"  # ce | label_smoothing | gce | sce
    label_smoothing: float = 0.1  # epsilon of the label_smoothing loss
    gce_q: float = 0.7  # q of the generalized cross entropy (Zhang & Sabuncu 2018)
    sce_alpha: float = 0.1  # weight of CE in symmetric cross entropy (Wang et al. 2019)
    sce_beta: float = 1.0  # weight of reverse CE in symmetric cross entropy
    # optimisation
    optimizer: str = "sgd"  # sgd (Nesterov momentum) | adamw
    lr: float = 0.05  # peak learning rate, reached after warm-up
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 5e-4  # decoupled for adamw, L2 for sgd
    batch_size: int = 64  # samples per optimizer step
    grad_accum_steps: int = 1  # micro-batches the step is split into, gradients summed
    grad_clip: float = 5.0  # max global grad norm; 0 disables clipping
    epochs: int = 30  # passes over the training set
    warmup_epochs: float = 1.0  # linear warm-up before the cosine decay, in epochs
    amp: str = "off"  # off | bf16 | fp16 autocast; used on CUDA only
    seed: int = 0  # seeds init and data order: the seed axis of a sweep
    checkpoint_every: int = 1  # save a Tune checkpoint every N epochs (and at the last epoch)
    gpu_memory_headroom: float = 0.1  # share of a fractional GPU left free of the memory cap

    def __post_init__(self) -> None:
        validate(self)


def parse_config(config: dict) -> TrainConfig:
    """Build a `TrainConfig` from Tune's config dict.

    Args:
        config: flat dict of field name -> value, as Tune passes it.
    Returns:
        The validated `TrainConfig`.
    Raises:
        ValueError: on an unknown key (named, with the known keys) or a value out of range.
    """
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}; known keys: {sorted(known)}")
    return TrainConfig(**config)


def config_hash(cfg: TrainConfig | dict) -> str:
    """A stable 16-hex-digit id of what a trial learns: sha1 of the sorted JSON of every field
    (defaults filled in) except `RUN_ONLY_KEYS`. Same hash, same trial: a finished one is reused."""
    cfg = cfg if isinstance(cfg, TrainConfig) else parse_config(cfg)
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_ONLY_KEYS}
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def _in_range(name: str, value, low, high, *, low_open=False, high_open=False) -> None:
    bad_low = value <= low if low_open else value < low
    bad_high = value >= high if high_open else value > high
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or bad_low or bad_high:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{name}={value!r} is outside the allowed range {lo}{low}, {high}{hi}")


def validate(cfg: TrainConfig) -> None:
    """Check every field of `cfg`; raise ValueError naming the first bad value and its range."""
    _choice("dataset", cfg.dataset, DATASETS)
    _choice("model", cfg.model, MODELS)
    _choice("loss", cfg.loss, LOSSES)
    _choice("noise_type", cfg.noise_type, NOISE_TYPES)
    _choice("optimizer", cfg.optimizer, OPTIMIZERS)
    _choice("amp", cfg.amp, AMP_MODES)
    if cfg.dataset in ("cifar10", "npz") and not cfg.data_root:
        raise ValueError(f"dataset={cfg.dataset!r} needs data_root (a folder for cifar10, a .npz file for npz)")
    _in_range("noise_rate", cfg.noise_rate, 0.0, 1.0, high_open=True)
    _in_range("val_fraction", cfg.val_fraction, 0.0, 1.0, low_open=True, high_open=True)
    _in_range("test_fraction", cfg.test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    _in_range("label_smoothing", cfg.label_smoothing, 0.0, 1.0, high_open=True)
    _in_range("gce_q", cfg.gce_q, 0.0, 1.0, low_open=True)
    _in_range("sce_alpha", cfg.sce_alpha, 0.0, math.inf)
    _in_range("sce_beta", cfg.sce_beta, 0.0, math.inf)
    _in_range("lr", cfg.lr, 0.0, 10.0, low_open=True)
    _in_range("momentum", cfg.momentum, 0.0, 1.0, high_open=True)
    _in_range("weight_decay", cfg.weight_decay, 0.0, 1.0)
    _in_range("grad_clip", cfg.grad_clip, 0.0, math.inf)
    _in_range("warmup_epochs", cfg.warmup_epochs, 0.0, math.inf)
    _in_range("gpu_memory_headroom", cfg.gpu_memory_headroom, 0.0, 0.9)
    for name in ("batch_size", "grad_accum_steps", "epochs", "checkpoint_every"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be a whole number >= 1")
    for name in ("seed", "data_seed"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}={value!r} must be a whole number >= 0")
