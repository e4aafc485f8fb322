"""NASNet-A Mobile 4@1056 (Zoph et al. 2018), layer for layer as Cadene's pretrainedmodels ``nasnetamobile``
(the model timm ``nasnetamobile`` ports): stem conv of 32 filters, CellStem0/CellStem1, three stacks of four
normal cells separated by two reduction cells, penultimate width 1056, 1000 classes, 224x224 input.

Module names follow the reference, so its state dict loads. TensorFlow's 'SAME' padding for stride-2 ops on
even sizes is reproduced as the reference does it: pad one zero row and column at the top/left, run the op,
drop the first row and column. Every pad and crop is static. One change: global pooling is adaptive (the
reference pools with a fixed 7x7 window), which is the same at 224x224 and lets smaller inputs run.
As in the reference, the fixed pads and crops line up only for sides of 31 to 34 modulo 32 (224 works, so
do 32 and 64; 30 or 48 do not).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STEM_FILTERS = 32
PENULTIMATE_FILTERS = 1056
NUM_CLASSES = 1000


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.1)


def _relu_conv_bn(cin: int, cout: int) -> nn.Sequential:
    """The 1x1 input adapter of every cell (keys ``conv.weight``, ``bn.*`` as in the reference)."""
    seq = nn.Sequential()
    seq.add_module("relu", nn.ReLU())
    seq.add_module("conv", nn.Conv2d(cin, cout, 1, bias=False))
    seq.add_module("bn", _bn(cout))
    return seq


def _shifted(op: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``op`` on ``x`` zero-padded by one row and column at the top/left, with those dropped again."""
    return op(F.pad(x, (1, 0, 1, 0)))[:, :, 1:, 1:]


class Shifted(nn.Module):
    """A pooling op with TF 'SAME' alignment (the reference's MaxPoolPad / AvgPoolPad)."""

    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _shifted(self.pool, x)


def _max_pool(stride: int, shift: bool = False) -> nn.Module:
    pool = nn.MaxPool2d(3, stride=stride, padding=1)
    return Shifted(pool) if shift else pool


def _avg_pool(stride: int, shift: bool = False) -> nn.Module:
    pool = nn.AvgPool2d(3, stride=stride, padding=1, count_include_pad=False)
    return Shifted(pool) if shift else pool


class SeparableConv2d(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.depthwise_conv2d = nn.Conv2d(
            cin, cin, kernel, stride=stride, padding=kernel // 2, groups=cin, bias=False
        )
        self.pointwise_conv2d = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise_conv2d(self.depthwise_conv2d(x))


class BranchSeparables(nn.Module):
    """relu, separable conv (strided), bn, relu, separable conv, bn.

    ``stem`` widens in the first separable conv (the reference's BranchSeparablesStem); ``shift`` gives the
    first one TF 'SAME' alignment (BranchSeparablesReduction and ``name='specific'``).
    """

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, shift: bool = False, stem: bool = False
    ) -> None:
        super().__init__()
        mid = cout if stem else cin
        self.shift = shift
        self.relu = nn.ReLU()
        self.separable_1 = SeparableConv2d(cin, mid, kernel, stride)
        self.bn_sep_1 = _bn(mid)
        self.relu1 = nn.ReLU()
        self.separable_2 = SeparableConv2d(mid, cout, kernel, 1)
        self.bn_sep_2 = _bn(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(x)
        x = _shifted(self.separable_1, x) if self.shift else self.separable_1(x)
        x = self.relu1(self.bn_sep_1(x))
        return self.bn_sep_2(self.separable_2(x))


class _FactorizedReduction(nn.Module):
    """Base of cells whose previous input is halved: two offset 1x1 stride-2 paths, concatenated, bn."""

    def _init_paths(self, cin: int, cout: int) -> None:
        self.relu = nn.ReLU()
        self.path_1 = nn.Sequential()
        self.path_1.add_module("avgpool", nn.AvgPool2d(1, stride=2, count_include_pad=False))
        self.path_1.add_module("conv", nn.Conv2d(cin, cout // 2, 1, bias=False))
        self.path_2 = nn.Sequential()
        self.path_2.add_module("avgpool", nn.AvgPool2d(1, stride=2, count_include_pad=False))
        self.path_2.add_module("conv", nn.Conv2d(cin, cout // 2, 1, bias=False))
        self.final_path_bn = _bn(cout)

    def _paths(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(x)
        x1 = self.path_1(x)
        x2 = self.path_2(F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:])  # shifted by one pixel
        return self.final_path_bn(torch.cat([x1, x2], 1))


class _ReductionOps(_FactorizedReduction):
    """The five stride-2 combinations shared by both stem cells and the reduction cells."""

    def _init_ops(self, channels: int, b_in: int, shift: bool) -> None:
        stem = b_in != channels
        c = channels
        self.comb_iter_0_left = BranchSeparables(c, c, 5, 2, shift=shift)
        self.comb_iter_0_right = BranchSeparables(b_in, c, 7, 2, shift=shift, stem=stem)
        self.comb_iter_1_left = _max_pool(2, shift)
        self.comb_iter_1_right = BranchSeparables(b_in, c, 7, 2, shift=shift, stem=stem)
        self.comb_iter_2_left = _avg_pool(2, shift)
        self.comb_iter_2_right = BranchSeparables(b_in, c, 5, 2, shift=shift, stem=stem)
        self.comb_iter_3_right = _avg_pool(1)
        self.comb_iter_4_left = BranchSeparables(c, c, 3, 1, shift=shift)
        self.comb_iter_4_right = _max_pool(2, shift)

    def _combine(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c0 = self.comb_iter_0_left(a) + self.comb_iter_0_right(b)
        c1 = self.comb_iter_1_left(a) + self.comb_iter_1_right(b)
        c2 = self.comb_iter_2_left(a) + self.comb_iter_2_right(b)
        c3 = self.comb_iter_3_right(c0) + c1
        c4 = self.comb_iter_4_left(c0) + self.comb_iter_4_right(a)
        return torch.cat([c1, c2, c3, c4], 1)


class CellStem0(_ReductionOps):
    def __init__(self, stem_filters: int, num_filters: int) -> None:
        super().__init__()
        self.conv_1x1 = _relu_conv_bn(stem_filters, num_filters)
        self._init_ops(num_filters, stem_filters, shift=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._combine(self.conv_1x1(x), x)


class CellStem1(_ReductionOps):
    def __init__(self, stem_filters: int, num_filters: int) -> None:
        super().__init__()
        self.conv_1x1 = _relu_conv_bn(2 * num_filters, num_filters)
        self._init_paths(stem_filters, num_filters)
        self._init_ops(num_filters, num_filters, shift=True)

    def forward(self, x_conv0: torch.Tensor, x_stem_0: torch.Tensor) -> torch.Tensor:
        return self._combine(self.conv_1x1(x_stem_0), self._paths(x_conv0))


class ReductionCell(_ReductionOps):
    """ReductionCell0 and ReductionCell1 of the reference (they differ only in how padding is spelled)."""

    def __init__(self, in_left: int, out_left: int, in_right: int, out_right: int) -> None:
        super().__init__()
        self.conv_prev_1x1 = _relu_conv_bn(in_left, out_left)
        self.conv_1x1 = _relu_conv_bn(in_right, out_right)
        self._init_ops(out_right, out_left, shift=True)

    def forward(self, x: torch.Tensor, x_prev: torch.Tensor) -> torch.Tensor:
        return self._combine(self.conv_1x1(x), self.conv_prev_1x1(x_prev))


class _NormalOps(_FactorizedReduction):
    """The five stride-1 combinations of a normal cell; output is six times ``out_right`` channels."""

    def _init_ops(self, out_left: int, out_right: int) -> None:
        self.conv_1x1 = _relu_conv_bn(self.in_right, out_right)
        self.comb_iter_0_left = BranchSeparables(out_right, out_right, 5, 1)
        self.comb_iter_0_right = BranchSeparables(out_left, out_left, 3, 1)
        self.comb_iter_1_left = BranchSeparables(out_left, out_left, 5, 1)
        self.comb_iter_1_right = BranchSeparables(out_left, out_left, 3, 1)
        self.comb_iter_2_left = _avg_pool(1)
        self.comb_iter_3_left = _avg_pool(1)
        self.comb_iter_3_right = _avg_pool(1)
        self.comb_iter_4_left = BranchSeparables(out_right, out_right, 3, 1)

    def _combine(self, x_left: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x_right = self.conv_1x1(x)
        c0 = self.comb_iter_0_left(x_right) + self.comb_iter_0_right(x_left)
        c1 = self.comb_iter_1_left(x_left) + self.comb_iter_1_right(x_left)
        c2 = self.comb_iter_2_left(x_right) + x_left
        c3 = self.comb_iter_3_left(x_left) + self.comb_iter_3_right(x_left)
        c4 = self.comb_iter_4_left(x_right) + x_right
        return torch.cat([x_left, c0, c1, c2, c3, c4], 1)


class FirstCell(_NormalOps):
    """A normal cell whose previous input has twice the resolution (factorized reduction on the left)."""

    def __init__(self, in_left: int, out_left: int, in_right: int, out_right: int) -> None:
        super().__init__()
        self.in_right = in_right
        self._init_paths(in_left, 2 * out_left)
        self._init_ops(2 * out_left, out_right)

    def forward(self, x: torch.Tensor, x_prev: torch.Tensor) -> torch.Tensor:
        return self._combine(self._paths(x_prev), x)


class NormalCell(_NormalOps):
    def __init__(self, in_left: int, out_left: int, in_right: int, out_right: int) -> None:
        super().__init__()
        self.in_right = in_right
        self.conv_prev_1x1 = _relu_conv_bn(in_left, out_left)
        self._init_ops(out_left, out_right)

    def forward(self, x: torch.Tensor, x_prev: torch.Tensor) -> torch.Tensor:
        return self._combine(self.conv_prev_1x1(x_prev), x)


class NASNetAMobile(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, stem_filters: int = STEM_FILTERS) -> None:
        super().__init__()
        f = PENULTIMATE_FILTERS // 24  # 44
        self.conv0 = nn.Sequential()
        self.conv0.add_module("conv", nn.Conv2d(3, stem_filters, 3, stride=2, padding=0, bias=False))
        self.conv0.add_module("bn", _bn(stem_filters))
        self.cell_stem_0 = CellStem0(stem_filters, f // 4)
        self.cell_stem_1 = CellStem1(stem_filters, f // 2)
        # (in_left, out_left, in_right, out_right) per cell; names as in the reference.
        stacks = [
            ("cell_0", FirstCell, (f, f // 2, 2 * f, f)),
            ("cell_1", NormalCell, (2 * f, f, 6 * f, f)),
            ("cell_2", NormalCell, (6 * f, f, 6 * f, f)),
            ("cell_3", NormalCell, (6 * f, f, 6 * f, f)),
            ("reduction_cell_0", ReductionCell, (6 * f, 2 * f, 6 * f, 2 * f)),
            ("cell_6", FirstCell, (6 * f, f, 8 * f, 2 * f)),
            ("cell_7", NormalCell, (8 * f, 2 * f, 12 * f, 2 * f)),
            ("cell_8", NormalCell, (12 * f, 2 * f, 12 * f, 2 * f)),
            ("cell_9", NormalCell, (12 * f, 2 * f, 12 * f, 2 * f)),
            ("reduction_cell_1", ReductionCell, (12 * f, 4 * f, 12 * f, 4 * f)),
            ("cell_12", FirstCell, (12 * f, 2 * f, 16 * f, 4 * f)),
            ("cell_13", NormalCell, (16 * f, 4 * f, 24 * f, 4 * f)),
            ("cell_14", NormalCell, (24 * f, 4 * f, 24 * f, 4 * f)),
            ("cell_15", NormalCell, (24 * f, 4 * f, 24 * f, 4 * f)),
        ]
        self.cell_names = [name for name, _, _ in stacks]
        for name, cls, channels in stacks:
            self.add_module(name, cls(*channels))
        self.relu = nn.ReLU()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.last_linear = nn.Linear(24 * f, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x_conv0 = self.conv0(x)
        x_prev = self.cell_stem_0(x_conv0)
        x = self.cell_stem_1(x_conv0, x_prev)
        for name in self.cell_names:  # every cell takes the two previous outputs
            x, x_prev = getattr(self, name)(x, x_prev), x
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avg_pool(self.relu(self.features(x)))
        return self.last_linear(torch.flatten(x, 1))  # the reference's dropout is a no-op in eval


def build() -> nn.Module:
    return NASNetAMobile()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    # 32 is the smallest side that runs, but the zoo sets batch-norm statistics from the small input, and
    # statistics taken at 32 (or 64) blow full-size activations up by orders of magnitude; 96 keeps them sane.
    size = 96 if small else 224
    return (torch.randn(batch, 3, size, size),)
