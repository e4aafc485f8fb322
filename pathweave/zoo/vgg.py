"""VGG-16 with batch norm, matching torchvision ``vgg16_bn`` (configuration "D").

Reference: torchvision.models.vgg16_bn (Simonyan & Zisserman 2014).
"""

from __future__ import annotations

import torch
from torch import nn

# Configuration "D": output channels of each 3x3 convolution, "M" for a 2x2 max pool.
CFG_D: list[int | str] = [
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
]


def make_layers(cfg: list[int | str]) -> nn.Sequential:
    layers: list[nn.Module] = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            out_channels = int(v)
            conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
            layers += [conv, nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True)]
            in_channels = out_channels
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, features: nn.Module, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build() -> nn.Module:
    return VGG(make_layers(CFG_D))


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 64 if small else 224
    return (torch.randn(batch, 3, size, size),)
