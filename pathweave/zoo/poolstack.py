"""BrainSlug's synthetic network: blocks of (MaxPool 3x3 stride 1 pad 1, BatchNorm, ReLU).

Reference: Weber et al., "BrainSlug: Transparent Acceleration of Deep Learning Through Depth-First
Parallelism" (2018), Sec. 5, Fig. 10. Every layer keeps the shape, so the whole network is one chain
of memory-bound layers. Load it as ``poolstack`` (10 blocks) or ``poolstack:N``.
"""

from __future__ import annotations

import torch
from torch import nn

CHANNELS, SIZE = 64, 56


def build(blocks: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.MaxPool2d(3, stride=1, padding=1), nn.BatchNorm2d(CHANNELS), nn.ReLU()]
    return nn.Sequential(*layers)


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 17 if small else SIZE
    return (torch.randn(batch, CHANNELS, size, size),)
