"""What raysweep trials run: the built-in trainable (`train_classifier`, Ray Tune's Function API: config,
data, label noise, models, losses and the training loop), the command-trial runtime that runs your own
script (`trainables/command/`), and the floor every layer shares (`trainables/experiment/`: the
experiment folder's records, storage, the objective and selection rules, confidence over seeds).

`trainables.config` imports nothing heavy, so the command line can read `TrainConfig` (flags,
defaults, checks) before torch and Ray load; the names below load their modules on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Objective": "trainables.experiment.objective",
    "TrainConfig": "trainables.config",
    "parse_config": "trainables.config",
    "load_data": "trainables.data",
    "add_label_noise": "trainables.noise",
    "transition_matrix": "trainables.noise",
    "train_classifier": "trainables.trial",
    "train_epochs": "trainables.train",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainables' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
