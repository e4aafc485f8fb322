"""MobileViT-XS (Mehta and Rastegari 2021, "MobileViT: light-weight, general-purpose, and mobile-friendly
vision transformer", Table 4 / Figure 1), 256x256: MobileNetV2 inverted residual blocks (expansion 4) and
three MobileViT blocks, SiLU everywhere; 2,317,848 parameters with a 1000-class head, as HF
``MobileViTForImageClassification`` with the apple/mobilevit-x-small config.

A MobileViT block keeps convolutions for local structure and adds global structure with a transformer
over patches: a 3x3 convolution, a 1x1 projection to the transformer width ``d``, an unfold of the map
into 2x2 patches (pixel ``p`` of every patch forms one sequence, so attention mixes patches, not the
pixels inside one), ``L`` pre-norm encoder layers (LayerNorm, multi-head attention, LayerNorm, MLP of
width 2d with SiLU), a LayerNorm, the fold back, a 1x1 projection to the block's channels, the
concatenation with the block's input and a 3x3 fusion convolution. Attention is written out (one qkv
linear, matmul, scale, softmax, matmul). Dropout is left out: it is the identity at inference.

The unfold and fold are reshapes and permutes, so the feature maps at the three MobileViT stages (1/8,
1/16 and 1/32 of the input) must have even sides: inputs are multiples of 64 pixels.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from pathweave.zoo.blocks import conv_bn

#: the model's convolution, batch norm and activation
_cbn = partial(conv_bn, act=nn.SiLU)

#: side of the square patches the transformer sees (h = w = 2 in the paper)
PATCH = 2
#: attention heads of every transformer layer, and the MLP's width over the transformer's
HEADS, MLP_RATIO = 4, 2
#: expansion of the inverted residual blocks (4 for XS and S, 2 for XXS)
EXPAND = 4


class InvertedResidual(nn.Module):
    """MobileNetV2's block with SiLU: 1x1 expansion, 3x3 depthwise (stride 1 or 2), linear 1x1 projection."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        hidden = cin * EXPAND
        self.residual = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            _cbn(cin, hidden), _cbn(hidden, hidden, 3, stride, groups=hidden), _cbn(hidden, cout, act=None)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.head_dim = dim // HEADS
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (sequences, tokens, 3, heads, head_dim) -> three of (sequences, heads, tokens, head_dim)
        q, k, v = self.qkv(x).unflatten(-1, (3, HEADS, self.head_dim)).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim**-0.5
        heads = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(heads.transpose(1, 2).flatten(2))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, MLP_RATIO * dim), nn.SiLU(), nn.Linear(MLP_RATIO * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def unfold(x: torch.Tensor) -> torch.Tensor:
    """(B, d, H, W) -> (B * PATCH^2, N, d): sequence ``b * PATCH^2 + p`` holds pixel ``p`` of each of the
    N = HW / PATCH^2 patches of image ``b``, in row-major patch order."""
    b, d, h, w = x.shape
    x = x.reshape(b, d, h // PATCH, PATCH, w // PATCH, PATCH)
    return x.permute(0, 3, 5, 2, 4, 1).reshape(b * PATCH * PATCH, (h // PATCH) * (w // PATCH), d)


def fold(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """The inverse of :func:`unfold` for an (H, W) map."""
    d = x.shape[-1]
    x = x.reshape(-1, PATCH, PATCH, h // PATCH, w // PATCH, d)
    return x.permute(0, 5, 3, 1, 4, 2).reshape(-1, d, h, w)


class MobileViTBlock(nn.Module):
    def __init__(self, channels: int, dim: int, layers: int) -> None:
        super().__init__()
        self.local = nn.Sequential(
            _cbn(channels, channels, 3), nn.Conv2d(channels, dim, 1, bias=False)
        )  # the 1x1 projection has neither norm nor activation
        self.transformer = nn.Sequential(*(EncoderLayer(dim) for _ in range(layers)), nn.LayerNorm(dim))
        self.project = _cbn(dim, channels)
        self.fuse = _cbn(2 * channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        y = fold(self.transformer(unfold(self.local(x))), h, w)
        return self.fuse(torch.cat([x, self.project(y)], dim=1))


#: MobileViT-XS per stage: (output channels, first stride, inverted residual blocks, (d, L) of the
#: MobileViT block that ends the stage or None)
STAGES = [(32, 1, 1, None), (48, 2, 3, None), (64, 2, 1, (96, 2)), (80, 2, 1, (120, 4)), (96, 2, 1, (144, 3))]
STEM, HEAD = 16, 384


class MobileViT(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, STEM, 3, 2)]
        cin = STEM
        for cout, stride, repeats, vit in STAGES:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1))
                cin = cout
            if vit is not None:
                layers.append(MobileViTBlock(cout, *vit))
        layers.append(_cbn(cin, HEAD))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(HEAD, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def build() -> nn.Module:
    return MobileViT()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    size = 128 if small else 256
    return (torch.randn(batch, 3, size, size),)
