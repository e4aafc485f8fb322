"""Depthwise convolution tiles (native/tile_depthwise.c) against eager at every instruction set level this
CPU runs: 3x3, 5x5 and 7x7 windows, strides 1, 2 and 3, dilation 2, padding 0 to 4, a channel multiplier
of 2, channels 1, 3, 17, 33 and maps of 1, 5, 17 (and 33 wide: vector tails of both widths), small maps
on the flat path (stride 1, at most 16 wide, 32 for 3x3: a NaN in a row's last column unseen by the next
row's first), the epilogue's bias, activations and a residual, NaN and +-inf propagating as eager's; the
layers split into channel tiles that two workers share."""

from __future__ import annotations

import pytest
import torch

import pathweave
from pathweave.tiles.abi import K_DEPTHWISE, S_OP
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy
from tests.conftest import assert_nonfinite_close, nonfinite_input

ACTS = {
    "none": torch.nn.Identity,
    "relu": torch.nn.ReLU,
    "relu6": torch.nn.ReLU6,
    "silu": torch.nn.SiLU,
    "hardswish": torch.nn.Hardswish,
}
#: (channels, height, width, kernel, stride, padding, dilation, multiplier, activation)
CASES = [
    (1, 1, 1, 3, 1, 1, 1, 1, "none"),
    (3, 5, 5, 3, 1, 1, 1, 1, "relu"),
    (17, 17, 17, 3, 2, 1, 1, 1, "relu6"),
    (33, 17, 33, 3, 1, 1, 1, 1, "relu6"),
    (17, 5, 17, 5, 1, 2, 1, 1, "silu"),
    (33, 17, 17, 5, 2, 2, 1, 1, "hardswish"),
    (3, 17, 33, 7, 1, 3, 1, 1, "none"),
    (17, 17, 5, 7, 2, 3, 1, 2, "relu"),
    (17, 17, 17, 3, 1, 2, 2, 1, "relu6"),
    (3, 17, 17, 5, 2, 4, 2, 1, "none"),
    (3, 5, 17, 3, 3, 0, 1, 1, "none"),
    (17, 1, 5, 3, 2, 1, 1, 1, "relu6"),
    (5, 16, 16, 3, 2, 1, 1, 1, "relu"),  # rows of whole vectors at both widths: no masked tail
    (5, 8, 8, 3, 1, 1, 1, 1, "none"),
    # maps at most 16 wide, stride 1, as wide as their input: the flat path (PW_DW_FLAT_MAX)
    (7, 7, 7, 3, 1, 1, 1, 1, "relu6"),
    (9, 14, 14, 5, 1, 2, 1, 1, "silu"),
    (4, 16, 16, 3, 1, 1, 1, 2, "relu"),
    (3, 6, 11, 3, 1, 1, 1, 1, "none"),
    (5, 3, 2, 5, 1, 2, 1, 1, "none"),
    (3, 9, 13, 5, 1, 2, 1, 1, "hardswish"),
    (5, 11, 28, 3, 1, 1, 1, 1, "relu6"),  # 3x3 up to 32 wide: masks repeat every 7 vectors
    (3, 5, 30, 3, 1, 1, 1, 1, "none"),
    (3, 4, 20, 5, 1, 2, 1, 1, "none"),  # 5x5 over 20: the padded copy
]


class _Depthwise(torch.nn.Module):
    """One depthwise convolution and its activation, plus its input where the shapes allow (a residual
    that the epilogue fusion may take into the store)."""

    def __init__(self, c: int, k: int, s: int, p: int, d: int, mult: int, act: str, residual: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c * mult, k, stride=s, padding=p, dilation=d, groups=c)
        self.act = ACTS[act]()
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.act(y + x if self.residual else y)


def _check(net: torch.nn.Module, shape: tuple[int, ...], outputs_close) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert kernel_names(strat.program.layers).count("depthwise") == 1
        for seed in range(2):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        x = nonfinite_input(shape, 7)
        with torch.no_grad():
            got, want = strat(x), net(x)
        assert_nonfinite_close(got, want, rtol=1e-5, atol=1e-5)
    finally:
        strat.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}_{}x{}_k{}s{}p{}d{}m{}_{}".format(*c))
def test_depthwise_matches_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, h, w, k, s, p, d, mult, act = case
    net = _Depthwise(c, k, s, p, d, mult, act, residual=False).eval()
    with torch.no_grad():
        net.conv.weight.mul_(3.0)  # sums well above the rounding of their terms
    _check(net, (2, c, h, w), outputs_close)


@pytest.mark.parametrize("act", ["none", "relu6", "silu"])
@pytest.mark.parametrize("size", [(17, 33), (7, 9)], ids=["padded", "flat"])
def test_depthwise_with_a_residual(level: str, act: str, size: tuple[int, int], outputs_close) -> None:  # noqa: ANN001
    net = _Depthwise(17, 3, 1, 1, 1, 1, act, residual=True).eval()
    _check(net, (1, 17, *size), outputs_close)


def test_depthwise_layers_split_channels_for_two_workers() -> None:
    """A layer small enough for one tile by its work still takes two, each a block of whole channels (no
    input row read by both)."""
    net = _Depthwise(64, 3, 1, 1, 1, 1, "relu6", residual=False).eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(1, 64, 7, 7)), threads=2)
    try:
        layer = int((strat.program.layers[:, S_OP] == K_DEPTHWISE).nonzero()[0][0])
        g = strat.graph
        lo, hi = g.layer_tile_start[layer], g.layer_tile_start[layer + 1]
        assert hi - lo >= 2
        assert (g.tile_lo[lo:hi, 2] == 0).all() and (g.tile_hi[lo:hi, 2] == 7).all()
        assert (g.tile_lo[lo:hi, 1] % 8 == 0).all()
    finally:
        strat.close()


def test_depthwise_reads_a_channels_last_input(level: str, outputs_close) -> None:  # noqa: ANN001
    net = _Depthwise(17, 3, 2, 1, 1, 1, "relu6", residual=False).eval()
    x = torch.randn(2, 17, 17, 33).to(memory_format=torch.channels_last)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()
