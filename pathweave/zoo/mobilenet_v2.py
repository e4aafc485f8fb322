"""MobileNetV2 (width 1.0), matching torchvision ``mobilenet_v2``: inverted residual blocks of a 1x1
expansion, a 3x3 depthwise convolution and a 1x1 projection, ReLU6.

Reference: torchvision.models.mobilenet_v2 (Sandler et al. 2018).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from pathweave.zoo.blocks import conv_bn

#: the block's convolution, batch norm and activation
_cbn = partial(conv_bn, act=nn.ReLU6)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        layers = [_cbn(cin, hidden)] if expand != 1 else []
        layers += [_cbn(hidden, hidden, 3, stride, groups=hidden), _cbn(hidden, cout, act=None)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


#: (expansion, output channels, repeats, first stride) per stage, as in the paper's Table 2
STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1)]  # fmt: skip


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, 32, 3, 2)]
        cin = 32
        for expand, cout, repeats, stride in STAGES:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(_cbn(cin, 1280))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def build() -> nn.Module:
    return MobileNetV2()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 64 if small else 224
    return (torch.randn(batch, 3, size, size),)
