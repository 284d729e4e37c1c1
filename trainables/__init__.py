"""The shared training function of raysweep trials (Ray Tune Function API).

Names are imported on first use (PEP 562), so `trainables.report` and `trainables.command_parse`
load without torch or Ray: a user's script imports the report helper, and the sweep scripts check a
command before Ray starts.
"""

import importlib

_SOURCES = {
    "METRIC": "trainables.config", "MODE": "trainables.config", "TrainConfig": "trainables.config",
    "parse_config": "trainables.config", "load_data": "trainables.data",
    "add_label_noise": "trainables.noise", "transition_matrix": "trainables.noise",
    "train_classifier": "trainables.train", "train_epochs": "trainables.train",
}

__all__ = list(_SOURCES)


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module 'trainables' has no attribute {name!r}")
    return getattr(importlib.import_module(_SOURCES[name]), name)
