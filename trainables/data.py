"""Data sets as plain dicts of numpy arrays, split once and shared by every trial of a sweep.

A sweep calls `load_data` once in the driver and hands the dict to every trial through
Ray's object store (`tune.with_parameters`): numpy arrays come back zero-copy and read-only,
so eight trials over a 200 MB data set hold one copy, not eight. Inside a trial, `place_data` puts
the splits where the training loop indexes its batches: on the GPU when they fit (`DEVICE_DATA_MAX_BYTES`).
"""

from __future__ import annotations

import math
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np

CIFAR10_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
PLACED_SPLITS = ("x_train", "x_val", "x_test", "y_val", "y_test")  # what `place_data` puts where batches are read
DEVICE_DATA_MAX_BYTES = 2 * 2**30  # larger data stays in host memory; digits is 0.5 MB, CIFAR-10 (uint8) 184 MB
DEVICE_DATA_SHARE = 0.25  # ... and so does data above this share of the GPU memory the trial may allocate
_placed: list = []  # [(the data dict's arrays, device, their tensors)]: the seeds of one trial share one copy


def data_key(cfg) -> tuple:
    """The config fields that decide the data dict; trials reuse shared data only when it matches."""
    return (cfg.dataset, cfg.data_root, cfg.data_seed, cfg.val_fraction, cfg.test_fraction)


def load_data(cfg) -> dict:
    """Load `cfg.dataset` and split it into train / val / test with a stratified split.

    Args:
        cfg: a `TrainConfig` (fields dataset, data_root, data_seed, val_fraction, test_fraction).
    Returns:
        dict with `x_train`, `x_val`, `x_test` (N, C, H, W) or (N, D) arrays (uint8 or float32),
        `y_train`, `y_val`, `y_test` (N,) int64 class ids, `num_classes`, `mean`/`std`
        (float32 per channel, from the training split), `name` and `key` (see `data_key`).
        Labels are clean: noise is applied per trial to the training labels only.
    Raises:
        ValueError: missing or malformed data files, naming the path and what was expected; data
            no trial could learn from (`check_data`), naming the file and the count.
    """
    if cfg.dataset == "digits":
        x, y, x_test, y_test = _digits()
        source = "digits (scikit-learn)"
    elif cfg.dataset == "cifar10":
        x, y, x_test, y_test = _cifar10(Path(cfg.data_root))
        source = str(cfg.data_root)
    elif cfg.dataset == "npz":
        x, y, x_test, y_test = _npz(Path(cfg.data_root))
        source = str(cfg.data_root)
    else:
        raise ValueError(f"dataset={cfg.dataset!r} is not one of digits, cifar10, npz")
    check_data(source, x, y, x_test, y_test, cfg.val_fraction, None if x_test is not None else cfg.test_fraction)

    # Imported here, not at the top: trial workers import this module but get the data loaded
    # (scikit-learn costs them about 1.5 s of start-up; benchmarks/startup.py).
    from sklearn.model_selection import train_test_split

    try:
        if x_test is None:  # carve a test split out of the pool first
            x, x_test, y, y_test = train_test_split(
                x, y, test_size=cfg.test_fraction, stratify=y, random_state=cfg.data_seed
            )
        x_train, x_val, y_train, y_val = train_test_split(
            x, y, test_size=cfg.val_fraction, stratify=y, random_state=cfg.data_seed
        )
    except ValueError as e:  # a case check_data does not foresee: still name the file
        raise ValueError(f"{source}: the stratified train/val/test split failed: {e}") from None
    num_classes = int(max(y.max(), y_test.max())) + 1
    mean, std = _channel_stats(x_train)
    return {
        "name": cfg.dataset,
        "key": data_key(cfg),
        "x_train": x_train,
        "y_train": y_train.astype(np.int64),
        "x_val": x_val,
        "y_val": y_val.astype(np.int64),
        "x_test": x_test,
        "y_test": y_test.astype(np.int64),
        "num_classes": num_classes,
        "mean": mean,
        "std": std,
    }


def place_data(data: dict, device) -> dict:
    """The splits of `data` (`PLACED_SPLITS`) as tensors where the training loop indexes its batches.

    On a CUDA `device` they are copied there once when they fit: at most `DEVICE_DATA_MAX_BYTES` and
    `DEVICE_DATA_SHARE` of the memory this process may allocate (its `set_per_process_memory_fraction`
    cap); batches are then gathered and normalised on the GPU, with no copy from the host per step.
    Larger data stays in host memory (a batch is gathered there and copied each step). On the CPU the
    tensors share the arrays' memory (no copy; the object store's read-only arrays are only read).
    The seeds of one trial (`--repeat`) get the same tensors: the last placement is kept for reuse.
    Args:
        data: the dict of `load_data` (numpy arrays, uint8 or float32 images, int64 labels).
        device: the `torch.device` the model trains on.
    Returns:
        {split: tensor} for `PLACED_SPLITS`, all on `device` or all on the CPU.
    """
    import torch

    arrays = [data[k] for k in PLACED_SPLITS]
    for kept, kept_device, tensors in _placed:
        if kept_device == device and all(a is b for a, b in zip(kept, arrays)):
            return tensors
    size = sum(a.nbytes for a in arrays)
    fits = device.type != "cuda" or size <= DEVICE_DATA_SHARE * _allocatable_bytes(device)
    where = device if fits and size <= DEVICE_DATA_MAX_BYTES else torch.device("cpu")
    with warnings.catch_warnings():  # read-only arrays (Ray's object store): shared, never written
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensors = {k: torch.from_numpy(a).to(where) for k, a in zip(PLACED_SPLITS, arrays)}
    _placed[:] = [(arrays, device, tensors)]
    return tensors


def _allocatable_bytes(device) -> float:
    """The bytes this process may allocate on CUDA `device`: its memory times the allocator's cap (1 if none).
    A `torch.device("cuda")` without an index is the current device: `get_per_process_memory_fraction` takes only
    an index or an indexed device (ValueError "Expected a torch.device with a specified index" otherwise, torch
    2.11 on an H200, 2026-11-29)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)  # torch 2.6+
    return total * (get_fraction(index) if get_fraction else 1.0)


def check_data(
    source: str,
    x: np.ndarray,
    y: np.ndarray,
    x_test: np.ndarray | None,
    y_test: np.ndarray | None,
    val_fraction: float,
    test_fraction: float | None,
) -> None:
    """Refuse data no sweep can learn from, before Ray starts: one message naming `source` and the count.

    Checks, in order: finite features (NaN/inf make every trial diverge); labels 0..C-1 with every
    class present in the training pool, and test labels among them; at least two classes; every
    class large enough, and every split large enough, for the stratified splits of `load_data`
    (scikit-learn's `train_test_split(stratify=...)` needs >= 2 samples per class and at least one
    sample per class on each side; it rounds the held-out part up, `ceil(fraction * n)`).
    Args:
        source: the file or folder the data came from (named in every message).
        x, y: the training pool (train + val, + test when `test_fraction` is given), (N, ...) and (N,).
        x_test, y_test: a given test split, or None.
        val_fraction: fraction of the pool held out for validation.
        test_fraction: fraction carved out for testing first, or None when the test split is given.
    Raises:
        ValueError: naming `source`, the numbers that are wrong and the minimum needed.
    """
    _check_finite(source, x, x_test)
    counts = np.bincount(y) if len(y) else np.zeros(0, dtype=np.int64)
    if (missing := np.flatnonzero(counts == 0)).size:
        raise ValueError(
            f"{source}: labels must be 0..C-1 but class(es) {missing.tolist()} of 0..{len(counts) - 1} "
            f"have no sample; relabel the classes present ({np.flatnonzero(counts).tolist()}) "
            f"as 0..{np.count_nonzero(counts) - 1}"
        )
    if len(counts) < 2:
        raise ValueError(
            f"{source}: the training data has {len(counts)} class(es) ({len(y)} samples); "
            "classification needs at least 2"
        )
    if y_test is not None and len(y_test) and (y_test.min() < 0 or y_test.max() >= len(counts)):
        raise ValueError(
            f"{source}: y_test has labels outside 0..{len(counts) - 1}, the classes of y "
            f"(min {int(y_test.min())}, max {int(y_test.max())})"
        )
    fractions = [("val", val_fraction)] if test_fraction is None else [("test", test_fraction), ("val", val_fraction)]
    needed = _min_class_size([f for _, f in fractions])
    if small := {c: int(n) for c, n in enumerate(counts) if n < needed}:
        raise ValueError(
            f"{source}: class sizes {small} (class: samples) are below the {needed} per class the stratified "
            f"{' and '.join(n for n, _ in fractions)} split(s) need; add samples or drop those classes"
        )
    pool = len(y)
    for split, fraction in fractions:
        held_out = math.ceil(fraction * pool)
        if min(held_out, pool - held_out) < len(counts):
            raise ValueError(
                f"{source}: {pool} samples split {fraction:g} for {split} give {held_out} / {pool - held_out}, "
                f"fewer than the {len(counts)} classes on one side; the data needs at least "
                f"{math.ceil(len(counts) / min(fraction, 1 - fraction))} samples for this split"
            )
        pool -= held_out


def _check_finite(source: str, x: np.ndarray, x_test: np.ndarray | None) -> None:
    """Raise ValueError naming `source` when float features hold NaN/inf (every trial would diverge)."""
    for name, features in (("x", x), ("x_test", x_test)):
        if (
            features is not None
            and features.dtype.kind == "f"
            and (bad := int(np.size(features) - np.isfinite(features).sum()))
        ):
            rows = int((~np.isfinite(features.reshape(len(features), -1))).any(axis=1).sum())
            raise ValueError(
                f"{source}: {name} holds {bad} NaN/inf value(s) in {rows} of {len(features)} samples; "
                "remove or impute them (every trial would diverge)"
            )


def _min_class_size(fractions: list[float]) -> int:
    """Smallest class that keeps >= 2 samples for each later stratified split: 2 for one split, more for two."""
    n = 2
    while True:
        left = n
        for fraction in fractions[:-1]:  # the held-out part is rounded up per class at worst
            left -= math.ceil(fraction * left)
        if left >= 2:
            return n
        n += 1


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of x in [0, 1] units (uint8 is divided by 255), float32."""
    scale = 255.0 if x.dtype == np.uint8 else 1.0
    axes = (0, 2, 3) if x.ndim == 4 else (0,)
    sample = x[:: max(1, len(x) // 5000)]  # a strided subsample is plenty for two statistics
    mean = (sample.mean(axis=axes) / scale).astype(np.float32)
    std = (sample.std(axis=axes) / scale).astype(np.float32)
    return mean, np.maximum(std, 1e-6).astype(np.float32)


def _digits():
    from sklearn.datasets import load_digits

    digits = load_digits()  # bundled with scikit-learn: no download
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # (1797, 1, 8, 8) in [0, 1]
    return x, digits.target.astype(np.int64), None, None


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a CIFAR batch cannot run code."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data file")


def _cifar10(root: Path):
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    missing = [name for name in CIFAR10_FILES if not (root / name).is_file()]
    if missing:
        raise ValueError(
            f"data_root={str(root)!r} lacks the CIFAR-10 python batches {missing}; "
            f"expected {', '.join(CIFAR10_FILES)} (the official cifar-10-python.tar.gz, extracted)"
        )
    parts = []
    for name in CIFAR10_FILES:
        try:
            with open(root / name, "rb") as f:
                batch = _ArrayUnpickler(f, encoding="bytes").load()
            x = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            y = np.asarray(batch[b"labels"], dtype=np.int64)
        except (pickle.UnpicklingError, KeyError, ValueError, EOFError, TypeError) as e:
            raise ValueError(f"{root / name} is not a CIFAR-10 python batch: {e}") from None
        parts.append((x, y))
    x = np.concatenate([p[0] for p in parts[:5]])
    y = np.concatenate([p[1] for p in parts[:5]])
    return x, y, parts[5][0], parts[5][1]


def _npz(path: Path):
    if not path.is_file():
        raise ValueError(f"data_root={str(path)!r} is not a file; npz needs a .npz file with arrays x, y")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"data_root={str(path)!r} is not a readable .npz file: {e}") from None
    if "x" not in arrays or "y" not in arrays:
        raise ValueError(f"{path} has arrays {sorted(arrays)}; npz needs x and y (optionally x_test, y_test)")
    x, y = _npz_images(arrays["x"], path), _npz_labels(arrays["y"], len(arrays["x"]), path)
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise ValueError(f"{path} has only one of x_test, y_test; give both or neither")
    if "x_test" in arrays:
        x_test = _npz_images(arrays["x_test"], path)
        return x, y, x_test, _npz_labels(arrays["y_test"], len(x_test), path)
    return x, y, None, None


def _npz_images(x: np.ndarray, path: Path) -> np.ndarray:
    if x.ndim == 3:  # (N, H, W) grey images
        x = x[:, None]
    if x.ndim not in (2, 4):
        raise ValueError(f"{path}: x has shape {x.shape}; expected (N, D), (N, H, W) or (N, C, H, W)")
    return x if x.dtype == np.uint8 else x.astype(np.float32)


def _npz_labels(y: np.ndarray, n: int, path: Path) -> np.ndarray:
    if y.ndim != 1 or len(y) != n or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(f"{path}: y must be {n} non-negative integer class ids, got shape {y.shape} {y.dtype}")
    return y.astype(np.int64)
