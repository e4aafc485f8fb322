"""U-Net (the original's shape with same-padding, batch norm and 32 base channels): four levels down by
max pooling, four up by 2x2 transposed convolutions, each joined with its skip connection by
concatenation; one output map per class.

Reference: Ronneberger et al. 2015 (milesial/Pytorch-UNet's layout).
"""

from __future__ import annotations

import torch
from torch import nn

from pathweave.zoo.blocks import conv_bn


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(conv_bn(cin, cout, 3), conv_bn(cout, cout, 3))


class UNet(nn.Module):
    def __init__(self, base: int = 32, levels: int = 4, classes: int = 2) -> None:
        super().__init__()
        widths = [base * 2**i for i in range(levels + 1)]
        self.inc = double_conv(3, widths[0])
        self.down = nn.ModuleList(double_conv(widths[i], widths[i + 1]) for i in range(levels))
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2) for i in reversed(range(levels))
        )
        self.merge = nn.ModuleList(double_conv(2 * widths[i], widths[i]) for i in reversed(range(levels)))
        self.outc = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.down:
            skips.append(down(nn.functional.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up, merge in zip(self.up, self.merge, strict=True):
            x = merge(torch.cat([skips.pop(), up(x)], 1))
        return self.outc(x)


def build() -> nn.Module:
    return UNet()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 32 if small else 256
    return (torch.randn(batch, 3, size, size),)
