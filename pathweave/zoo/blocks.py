"""Layers shared by several zoo models."""

from __future__ import annotations

import torch
from torch import nn


class BasicConv2d(nn.Module):
    """Convolution without bias, batch norm (eps 0.001), ReLU: torchvision's GoogLeNet and Inception
    v3 block. The ReLU is not in place, so torch.export's graph needs no functionalization."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs: object) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def conv_bn(
    cin: int,
    cout: int,
    kernel: int = 1,
    stride: int = 1,
    groups: int = 1,
    act: type[nn.Module] | None = nn.ReLU,
) -> nn.Sequential:
    """Convolution without bias ("same" padding for odd kernels), batch norm, then ``act`` (None: none):
    torchvision's Conv2dNormActivation, as MobileNetV2 and EfficientNet use it."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)
