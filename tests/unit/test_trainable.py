"""The trainable called directly: it learns, it resumes exactly, its config and losses are checked."""

import math

import pytest
import torch

from trainables import parse_config, train_epochs
from trainables.losses import GeneralizedCrossEntropy, SymmetricCrossEntropy
from trainables.models import build_model
from trainables.train import get_lr_factor


def run(config, state=None, stop_after=None):
    history, last_state = [], None
    for metrics, ckpt in train_epochs(config, state=state):
        history.append(metrics)
        last_state = ckpt
        if stop_after and metrics["epoch"] == stop_after:
            break
    return history, last_state


def test_learns_digits_well_above_chance(tiny_config):
    history, _ = run({**tiny_config, "epochs": 4})
    assert [m["epoch"] for m in history] == [1, 2, 3, 4]
    assert history[-1]["val/acc"] > 0.85  # chance is 0.10
    assert history[-1]["train/loss"] < history[0]["train/loss"]
    expected = {
        "epoch",
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
        "test/loss",
        "test/acc",
        "lr",
        "grad_norm",
        "samples_per_s",
        "noise/flip_rate",
        "gpu_ids",
    }
    assert expected <= set(history[-1])


def test_resume_from_checkpoint_matches_uninterrupted_run(tiny_config, tmp_path):
    config = {**tiny_config, "epochs": 4, "noise_rate": 0.3}
    full, _ = run(config)
    _, state = run(config, stop_after=2)
    torch.save(state, tmp_path / "checkpoint.pt")
    restored = torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # no pickled code allowed
    resumed, _ = run(config, state=restored)
    assert [m["epoch"] for m in resumed] == [3, 4]
    for a, b in zip(full[2:], resumed):
        for key in ("train/loss", "val/acc", "val/loss", "test/acc", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key


def test_noise_reaches_training_labels_only(tiny_config):
    history, _ = run({**tiny_config, "epochs": 1, "noise_rate": 0.5})
    assert 0.45 < history[0]["noise/flip_rate"] < 0.55


@pytest.mark.parametrize(
    "model,loss,extra",
    [
        ("cnn", "gce", {"optimizer": "adamw", "lr": 3e-3}),
        ("mlp", "sce", {"optimizer": "adamw", "lr": 1e-3}),
        ("mlp", "label_smoothing", {"grad_accum_steps": 4}),
    ],
)
def test_models_and_losses_train(tiny_config, model, loss, extra):
    history, _ = run({**tiny_config, "epochs": 2, "model": model, "loss": loss, **extra})
    assert all(math.isfinite(m["train/loss"]) for m in history)
    assert history[-1]["val/acc"] > 0.3


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match="learning_rate"):
        parse_config({"learning_rate": 0.1})


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("noise_rate", 1.0, r"\[0.0, 1.0\)"),
        ("noise_type", "pair", "sym, asym"),
        ("model", "vit", "mlp, cnn, resnet18"),
        ("loss", "mae", "ce, label_smoothing"),
        ("epochs", 0, ">= 1"),
        ("dataset", "mnist", "digits, cifar10, npz"),
    ],
)
def test_bad_values_name_value_and_range(key, value, match):
    with pytest.raises(ValueError, match=match):
        parse_config({key: value})


def test_gce_and_sce_against_formulas():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    targets = torch.tensor([0, 2])
    p_y = torch.softmax(logits, 1)[[0, 1], targets]
    assert GeneralizedCrossEntropy(0.5)(logits, targets).item() == pytest.approx(((1 - p_y**0.5) / 0.5).mean().item())
    ce = torch.nn.functional.cross_entropy(logits, targets).item()
    rce = (4.0 * (1 - p_y)).mean().item()
    assert SymmetricCrossEntropy(0.1, 1.0)(logits, targets).item() == pytest.approx(0.1 * ce + rce)
    # q -> 0 recovers cross entropy (Zhang & Sabuncu 2018)
    assert GeneralizedCrossEntropy(1e-4)(logits, targets).item() == pytest.approx(ce, rel=1e-3)


def test_models_give_logits_of_the_right_shape():
    assert build_model("resnet18", (3, 32, 32), 10)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert build_model("cnn", (1, 8, 8), 10)(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    with pytest.raises(ValueError, match="images"):
        build_model("cnn", (64,), 10)


def test_lr_schedule_warms_up_then_decays_to_zero():
    factors = [get_lr_factor(s, 100, 10) for s in range(101)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[55] == pytest.approx(0.5) and factors[100] == pytest.approx(0.0)
