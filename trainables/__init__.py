"""The shared training function of raysweep trials (Ray Tune Function API)."""

from trainables.config import METRIC, MODE, TrainConfig, parse_config
from trainables.data import load_data
from trainables.noise import add_label_noise, transition_matrix
from trainables.train import train_classifier, train_epochs

__all__ = [
    "METRIC", "MODE", "TrainConfig", "parse_config", "load_data",
    "add_label_noise", "transition_matrix", "train_classifier", "train_epochs",
]
