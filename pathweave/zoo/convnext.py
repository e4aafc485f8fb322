"""ConvNeXt-T, matching torchvision ``convnext_tiny`` in structure: 7x7 depthwise convolution, layer
norm over channels (channels last), an MLP of 4x width with GELU, layer scale, residual; layer-normed
downsampling between stages. Stochastic depth is the identity at inference.

Reference: torchvision.models.convnext_tiny (Liu et al. 2022).
"""

from __future__ import annotations

import torch
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """Layer norm over the channels of an NCHW tensor (permuted to channels last and back)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        # layer scale: trained models hold small values; random ones of that size keep the signal
        self.gamma = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(self.dwconv(x).permute(0, 2, 3, 1)))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (96, 192, 384, 768), depths: tuple[int, ...] = (3, 3, 9, 3),
                 num_classes: int = 1000) -> None:  # fmt: skip
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            if i:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
            layers += [Block(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(self.norm(torch.flatten(x, 1)))


def build() -> nn.Module:
    return ConvNeXt()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 64 if small else 224
    return (torch.randn(batch, 3, size, size),)
