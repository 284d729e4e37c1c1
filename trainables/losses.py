"""Classification losses, including noise-robust ones, as `(logits, targets) -> scalar` modules."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


def build_loss(cfg) -> nn.Module:
    """The training loss named by `cfg.loss` ("ce", "label_smoothing", "gce", "sce").

    Every loss maps logits (B, C) float and targets (B,) int64 to a scalar mean over the batch.
    Raises:
        ValueError: unknown loss name.
    """
    if cfg.loss == "ce":
        return nn.CrossEntropyLoss()
    if cfg.loss == "label_smoothing":
        return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    if cfg.loss == "gce":
        return GeneralizedCrossEntropy(cfg.gce_q)
    if cfg.loss == "sce":
        return SymmetricCrossEntropy(cfg.sce_alpha, cfg.sce_beta)
    raise ValueError(f"loss={cfg.loss!r} is not one of ce, label_smoothing, gce, sce")


class GeneralizedCrossEntropy(nn.Module):
    """L_q = (1 - p_y^q) / q, Zhang & Sabuncu, "Generalized Cross Entropy Loss for Training Deep
    Neural Networks with Noisy Labels", NeurIPS 2018, Eq. 6. q -> 0 gives CE, q = 1 gives MAE."""

    def __init__(self, q: float = 0.7):
        super().__init__()
        self.q = q

    def forward(self, logits, targets):
        p_y = F.softmax(logits.float(), dim=1).gather(1, targets[:, None]).squeeze(1)
        return ((1.0 - p_y.clamp_min(1e-7) ** self.q) / self.q).mean()


class SymmetricCrossEntropy(nn.Module):
    """alpha * CE + beta * RCE, Wang et al., "Symmetric Cross Entropy for Robust Learning with
    Noisy Labels", ICCV 2019, Eq. 5; RCE uses log(0) := A = -4 (their Sec. 3.2), so
    RCE = -A * (1 - p_y)."""

    def __init__(self, alpha: float = 0.1, beta: float = 1.0, log_zero: float = -4.0):
        super().__init__()
        self.alpha, self.beta, self.log_zero = alpha, beta, log_zero

    def forward(self, logits, targets):
        ce = F.cross_entropy(logits.float(), targets)
        p_y = F.softmax(logits.float(), dim=1).gather(1, targets[:, None]).squeeze(1)
        rce = (-self.log_zero * (1.0 - p_y)).mean()
        return self.alpha * ce + self.beta * rce
