"""EfficientNet-B0, matching torchvision ``efficientnet_b0`` in structure: MBConv blocks (1x1 expansion,
3x3 or 5x5 depthwise convolution, squeeze-excitation, 1x1 projection), SiLU; stochastic depth is the
identity at inference.

Reference: torchvision.models.efficientnet_b0 (Tan and Le 2019).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from pathweave.zoo.blocks import conv_bn

#: the block's convolution, batch norm and activation
_cbn = partial(conv_bn, act=nn.SiLU)


class SqueezeExcitation(nn.Module):
    """Global average pool -> 1x1 convolution -> SiLU -> 1x1 convolution -> sigmoid -> scale the input."""

    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(s))))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        layers = [_cbn(cin, hidden)] if expand != 1 else []
        layers += [
            _cbn(hidden, hidden, kernel, stride, groups=hidden),
            SqueezeExcitation(hidden, max(1, cin // 4)),
            _cbn(hidden, cout, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


#: (expansion, kernel, first stride, output channels, repeats) per stage of B0
STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # fmt: skip


class EfficientNetB0(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, 32, 3, 2)]
        cin = 32
        for expand, kernel, stride, cout, repeats in STAGES:
            for i in range(repeats):
                layers.append(MBConv(cin, cout, kernel, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(_cbn(cin, 1280))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.uniform_(m.weight, -(1280**-0.5), 1280**-0.5)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def build() -> nn.Module:
    return EfficientNetB0()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 64 if small else 224
    return (torch.randn(batch, 3, size, size),)
