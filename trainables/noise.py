"""Synthetic label noise on training labels: symmetric and asymmetric (pair-flip).

Definitions follow Patrini et al., "Making Deep Neural Networks Robust to Label Noise:
a Loss Correction Approach", CVPR 2017, Sec. 6: symmetric noise flips a label with
probability r to a uniformly drawn *other* class; asymmetric noise flips selected classes
to a similar class with probability r (MNIST: 2→7, 3→8, 5↔6, 7→1; CIFAR-10:
truck→automobile, bird→airplane, deer→horse, cat↔dog).
"""

from __future__ import annotations

import numpy as np

# class id -> class id it is flipped to under asymmetric noise
ASYM_PAIRS = {
    "digits": {2: 7, 3: 8, 5: 6, 6: 5, 7: 1},  # MNIST-like digits
    # CIFAR-10 ids: 0 airplane, 1 automobile, 2 bird, 3 cat, 4 deer, 5 dog, 6 frog, 7 horse, 8 ship, 9 truck
    "cifar10": {9: 1, 2: 0, 4: 7, 3: 5, 5: 3},
}


def asym_pairs(dataset: str, num_classes: int) -> dict[int, int]:
    """The pair-flip map for `dataset`; any other data set flips i -> (i + 1) mod C."""
    if dataset in ASYM_PAIRS:
        return dict(ASYM_PAIRS[dataset])
    return {i: (i + 1) % num_classes for i in range(num_classes)}


def add_label_noise(
    labels: np.ndarray, noise_type: str, noise_rate: float, num_classes: int, seed: int, dataset: str = ""
) -> np.ndarray:
    """Return a noisy copy of `labels`; the input is never modified.

    Args:
        labels: (N,) int class ids in [0, num_classes).
        noise_type: "sym" or "asym" (pair-flip, see `asym_pairs`).
        noise_rate: flip probability r in [0, 1) per label (asym: per label of a flipped class).
        num_classes: C, at least 2.
        seed: seeds the flips; the same seed gives the same noisy labels.
        dataset: picks the asym pair map ("digits", "cifar10", else i -> i+1 mod C).
    Returns:
        (N,) int64 noisy labels.
    Raises:
        ValueError: noise_type not sym/asym, or noise_rate outside [0, 1).
    """
    if noise_type not in ("sym", "asym"):
        raise ValueError(f"noise_type={noise_type!r} is not one of sym, asym")
    if not 0.0 <= noise_rate < 1.0:
        raise ValueError(f"noise_rate={noise_rate!r} is outside the allowed range [0, 1)")
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels, dtype=np.int64)
    flip = rng.random(len(labels)) < noise_rate
    if noise_type == "sym":
        # an offset in 1..C-1 lands uniformly on one of the *other* classes
        target = (labels + rng.integers(1, num_classes, size=len(labels))) % num_classes
    else:
        mapping = np.arange(num_classes)
        for src, dst in asym_pairs(dataset, num_classes).items():
            mapping[src] = dst
        target = mapping[labels]
    return np.where(flip, target, labels)


def transition_matrix(clean: np.ndarray, noisy: np.ndarray, num_classes: int) -> np.ndarray:
    """Empirical noise transition matrix T[i, j] = P(noisy = j | clean = i).

    Args:
        clean, noisy: (N,) int class ids.
    Returns:
        (C, C) float64; each row sums to 1 (a class absent from `clean` gets an identity row).
    """
    counts = np.zeros((num_classes, num_classes), dtype=np.float64)
    np.add.at(counts, (clean, noisy), 1.0)
    totals = counts.sum(axis=1, keepdims=True)
    empty = totals[:, 0] == 0
    counts[empty] = np.eye(num_classes)[empty]
    return counts / counts.sum(axis=1, keepdims=True)


def expected_transition_matrix(noise_type: str, noise_rate: float, num_classes: int, dataset: str = "") -> np.ndarray:
    """The transition matrix the noise process is defined by (Patrini et al. 2017, Sec. 6), (C, C)."""
    C, r = num_classes, noise_rate
    if noise_type == "sym":
        T = np.full((C, C), r / (C - 1))
        np.fill_diagonal(T, 1.0 - r)
        return T
    T = np.eye(C)
    for src, dst in asym_pairs(dataset, C).items():
        T[src, src], T[src, dst] = 1.0 - r, r
    return T
