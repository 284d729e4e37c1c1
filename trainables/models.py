"""Small classifiers for label-noise studies: an MLP, a small CNN and the CIFAR ResNet-18."""

from __future__ import annotations

import math

import torch
from torch import nn


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Build a freshly initialised model.

    Args:
        name: "mlp", "cnn" or "resnet18".
        input_shape: one sample's shape without the batch axis: (C, H, W) or (D,).
        num_classes: number of output logits.
    Returns:
        An `nn.Module` mapping (B, *input_shape) float32 to (B, num_classes) logits.
    Raises:
        ValueError: unknown name, or an image model asked for flat (D,) inputs.
    """
    if name == "mlp":
        return MLP(math.prod(input_shape), num_classes)
    if len(input_shape) != 3:
        raise ValueError(f"model={name!r} needs (C, H, W) images, got input shape {input_shape}; use model='mlp'")
    if name == "cnn":
        return SmallCNN(input_shape[0], num_classes)
    if name == "resnet18":
        return ResNet18(input_shape[0], num_classes)
    raise ValueError(f"model={name!r} is not one of mlp, cnn, resnet18")


class MLP(nn.Module):
    def __init__(self, in_features: int, num_classes: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head; adaptive pooling makes it fit 8x8 and 32x32 alike."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1),
            nn.BatchNorm2d(4 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 inputs (He et al. 2016): 3x3 stem, no max-pool, as in most CIFAR work."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, in_planes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1)]
            in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes))

    def forward(self, x):
        return self.head(self.layers(self.stem(x)))
