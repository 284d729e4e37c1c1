"""Confusion matrices the trainable saves into each trial folder (``confusion.json``).

Format (clean test set; rows are true classes, columns predicted)::

    {"num_classes": C, "labels": "rows are true classes, columns predicted (clean test set)",
     "last": {"epoch": e, "test": [[int] * C] * C},
     "best-val": {"epoch": e, "val/acc": v, "test": [[int] * C] * C}}

Per-class accuracy shows what a mean hides: under pair-flip (asymmetric) noise on digits the
flipped classes (2->7, 3->8, 5<->6, 7->1) collapse while the others stay high.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import numpy as np

from analysis.reading.tune_state import read_bytes, resolve_source
from trainables.experiment import records
from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective

CONFUSION_FILE = records.CONFUSION_FILE
CONFUSION_SELECT = ("best-val", "last")
"""Rules a saved matrix exists for (``last-k`` has no single epoch)."""


def load_confusion(trial_dir: Any, select: str = Objective.select) -> np.ndarray:
    """The clean-test confusion matrix a trial saved, at the epoch chosen by ``select``.

    Args:
        trial_dir: trial folder, local path or URI (the ``trial_dir`` column of
            :func:`analysis.load_trials`).
        select: ``"best-val"`` (epoch of the best validation metric) or ``"last"``.

    Returns:
        int64 array (C, C): ``[true class, predicted class]`` counts.

    Raises:
        ExperimentError: ``select`` is not one of :data:`CONFUSION_SELECT`.
        FileNotFoundError: the trial saved no ``confusion.json``.
        ValueError: the file is not in the format above.
    """
    if select not in CONFUSION_SELECT:
        raise ExperimentError(f"confusion matrices are saved for {', '.join(CONFUSION_SELECT)}, not {select!r}")
    fs, root, prefix = resolve_source(trial_dir, None)
    data = read_bytes(fs, posixpath.join(root, CONFUSION_FILE))
    if data is None:
        raise FileNotFoundError(f"{prefix}{root}/{CONFUSION_FILE} does not exist")
    try:
        saved = json.loads(data)
        matrix = np.asarray(saved[select]["test"], dtype=np.int64)
        c = int(saved["num_classes"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{prefix}{root}/{CONFUSION_FILE} is not a confusion file ({error})") from None
    if matrix.shape != (c, c):
        raise ValueError(f"{prefix}{root}/{CONFUSION_FILE}: matrix of shape {matrix.shape}, num_classes {c}")
    return matrix


def per_class_accuracy(matrix: np.ndarray) -> np.ndarray:
    """Recall of each true class, ``diag / row sums`` (C,), NaN for a class absent from the test set."""
    matrix = np.asarray(matrix, dtype=float)
    totals = matrix.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, np.diag(matrix) / totals, np.nan)
