"""`--seeds auto` end to end: `sweeps/run_command.py` on a scripted command, and the built-in trainable's pairing."""

from __future__ import annotations

from tests.helpers.command_sweeps import PY, run_sweep
from trainables.config import TrainConfig
from trainables.data import data_key
from trainables.train import noise_seed


def test_seed_s_gives_every_method_the_same_split_and_noise_draw():
    # the split is keyed by data_key (data_seed, not seed), the flips by noise_seed: neither reads the loss
    ce, gce = TrainConfig(loss="ce", seed=3), TrainConfig(loss="gce", seed=3)
    assert data_key(ce) == data_key(gce) and noise_seed(ce) == noise_seed(gce) == 3
    assert noise_seed(TrainConfig(loss="ce", seed=4)) != noise_seed(ce)


def test_bad_auto_flags_are_refused_before_ray(tmp_path):
    cmd = ["--", PY, "tests/scripts/seeded_methods.py", "--cell", "{cell}", "--method", "{method}", "--seed", "{seed}"]
    proc = run_sweep(
        tmp_path, "--axis", "cell=gap", "--axis", "method=A,B", "--seeds", "auto", "--compare", "cell", *cmd
    )
    assert proc.returncode == 2 and "--compare=cell must name an axis of 2 or more values" in proc.stderr
    proc = run_sweep(tmp_path, "--axis", "cell=gap", "--axis", "method=A,B", "--seeds", "3", "--max-seeds", "6", *cmd)
    assert proc.returncode == 2 and "--max-seeds applies to --seeds auto only" in proc.stderr
