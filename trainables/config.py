"""The trial configuration: one flat dict from Tune, parsed once into `TrainConfig`.

What a sweep ranks its trials by is its `trainables.experiment.objective.Objective`, shared by `sweeps/`
and `analysis/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

DATASETS = ("digits", "cifar10", "npz")
MODELS = ("mlp", "cnn", "resnet18")
LOSSES = ("ce", "label_smoothing", "gce", "sce")
NOISE_TYPES = ("sym", "asym")
OPTIMIZERS = ("sgd", "adamw")
AMP_MODES = ("auto", "off", "bf16", "fp16")
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
    amp: str = "auto"  # auto (bf16 autocast on a GPU with native bf16, else none) | off | bf16 | fp16; CUDA only
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


# The fields of release 0.1.0 (commit c556436), whose trial hashes are kept: a field added since enters a
# trial's identity only away from its default, so a new field never renames the trials run before it.
FIRST_RELEASE_FIELDS = frozenset(
    "dataset data_root data_seed val_fraction test_fraction noise_type noise_rate noise_seed model loss "
    "label_smoothing gce_q sce_alpha sce_beta optimizer lr momentum weight_decay batch_size grad_accum_steps "
    "grad_clip epochs warmup_epochs amp seed checkpoint_every gpu_memory_headroom".split()
)


def identity(cfg: TrainConfig | dict, on_gpu: bool = False) -> dict:
    """What a trial learns, as its hash reads it: every field (defaults filled in) except `RUN_ONLY_KEYS`,
    with values that train the same written one way.

    - `amp="auto"` off a GPU is `off` (autocast is CUDA only, `train.autocast_dtype`); on a GPU it stays
      `auto` (bf16 or none, by the card).
    - a field not in `FIRST_RELEASE_FIELDS` is left out at its default.
    Args:
        cfg: a `TrainConfig` or its dict (parsed; unknown keys raise ValueError).
        on_gpu: whether the trial trains on a CUDA device.
    """
    cfg = cfg if isinstance(cfg, TrainConfig) else parse_config(cfg)
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_ONLY_KEYS}
    if fields["amp"] == "auto" and not on_gpu:
        fields["amp"] = "off"
    defaults = dataclasses.asdict(TrainConfig())
    return {k: v for k, v in fields.items() if k in FIRST_RELEASE_FIELDS or v != defaults[k]}


def config_hash(cfg: TrainConfig | dict, on_gpu: bool = False) -> str:
    """A stable 16-hex-digit id of what a trial learns: sha1 of the sorted JSON of its `identity`.
    Same hash, same trial: a finished one is reused. The hashes of earlier releases' cells are held by
    tests/unit/test_trial_identity.py; one that changes needs a reason recorded there."""
    fields = identity(cfg, on_gpu)
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialIdentity:
    """The `hash_fn` of the built-in trainable's sweeps: `config_hash` and `identity` on one device kind.

    Fields:
        on_gpu: whether the sweep's trials train on CUDA (`amp="auto"` is `off` when not).
    """

    on_gpu: bool = False

    def __call__(self, config: dict) -> str:
        return config_hash(config, self.on_gpu)

    def fields(self, config: dict) -> dict:
        return identity(config, self.on_gpu)


CHOICES = {
    "dataset": DATASETS,
    "model": MODELS,
    "loss": LOSSES,
    "noise_type": NOISE_TYPES,
    "optimizer": OPTIMIZERS,
    "amp": AMP_MODES,
}
# (low, high, low_open, high_open): the allowed range of each numeric field.
RANGES = {
    "noise_rate": (0.0, 1.0, False, True),
    "val_fraction": (0.0, 1.0, True, True),
    "test_fraction": (0.0, 1.0, True, True),
    "label_smoothing": (0.0, 1.0, False, True),
    "gce_q": (0.0, 1.0, True, False),
    "sce_alpha": (0.0, math.inf, False, False),
    "sce_beta": (0.0, math.inf, False, False),
    "lr": (0.0, 10.0, True, False),
    "momentum": (0.0, 1.0, False, True),
    "weight_decay": (0.0, 1.0, False, False),
    "grad_clip": (0.0, math.inf, False, False),
    "warmup_epochs": (0.0, math.inf, False, False),
    "gpu_memory_headroom": (0.0, 0.9, False, False),
}
WHOLE_NUMBERS = {
    "batch_size": 1,
    "grad_accum_steps": 1,
    "epochs": 1,
    "checkpoint_every": 1,
    "seed": 0,
    "data_seed": 0,
    "noise_seed": 0,
}  # field -> smallest allowed value


def check_field(name: str, value) -> None:
    """Check one field's value on its own (choices, ranges, whole numbers).

    Raises:
        ValueError: naming the field, the value and what is allowed, e.g.
            "noise_rate=1.5 is outside the allowed range [0.0, 1.0)".
    """
    if name in CHOICES and value not in CHOICES[name]:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(CHOICES[name])}")
    if name in RANGES:
        low, high, low_open, high_open = RANGES[name]
        bad_low = not isinstance(value, (int, float)) or (value <= low if low_open else value < low)
        bad_high = not isinstance(value, (int, float)) or (value >= high if high_open else value > high)
        if isinstance(value, bool) or bad_low or bad_high or math.isnan(value):
            raise ValueError(
                f"{name}={value!r} is outside the allowed range "
                f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
            )
    if name in WHOLE_NUMBERS and not (name == "noise_seed" and value is None):
        low = WHOLE_NUMBERS[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}={value!r} must be a whole number >= {low}")


def validate(cfg: TrainConfig) -> None:
    """Check every field of `cfg`, then the fields that depend on each other; raise ValueError
    naming the first bad value and its range."""
    for field in dataclasses.fields(cfg):
        check_field(field.name, getattr(cfg, field.name))
    if cfg.dataset in ("cifar10", "npz") and not cfg.data_root:
        raise ValueError(f"dataset={cfg.dataset!r} needs data_root (a folder for cifar10, a .npz file for npz)")
