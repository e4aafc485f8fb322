"""A depthwise convolution fused into the 1x1 convolution that alone reads it (tiles/fuse_depthwise.py,
native/tile_depthwise.c's ``pw_dwpw_tile``) against eager at every instruction set level this CPU runs:
maps of 1, 3, 17 and 33, channels and output channels not multiples of 16, strides 1 and 2, dilation 2,
3x3 and 5x5 windows, a channel multiplier of 2, both epilogues (bias, activations, a residual), batch 2,
NaN and +-inf propagating as eager's; the pairs the pass must leave alone; the fused layer's tiles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import pathweave
from pathweave.tiles import fuse_depthwise
from pathweave.tiles.abi import K_DWPW, S_OP
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
#: (channels, outputs, height, width, kernel, stride, dilation, multiplier, dw act, pw act, residual)
CASES = [
    (17, 9, 1, 1, 3, 1, 1, 1, "relu6", "none", False),
    (3, 8, 3, 3, 3, 1, 1, 1, "relu", "relu", False),
    (17, 20, 17, 17, 3, 2, 1, 1, "relu6", "none", False),
    (33, 33, 17, 33, 3, 1, 1, 1, "relu6", "none", True),
    (20, 24, 33, 17, 5, 2, 1, 1, "silu", "hardswish", False),
    (17, 17, 17, 17, 3, 1, 2, 1, "none", "relu6", True),
    (9, 40, 17, 5, 3, 1, 1, 2, "hardswish", "silu", False),
    (40, 16, 33, 33, 5, 1, 1, 1, "relu", "none", False),
]


class _Separable(torch.nn.Module):
    """A depthwise convolution, its batch norm and activation, then a 1x1 convolution, its activation and
    (where the shapes allow) the block's input added before it: MobileNet's and NASNet's pair."""

    def __init__(self, c: int, o: int, k: int, s: int, d: int, mult: int, acts: tuple[str, str], res: bool):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c * mult, k, stride=s, padding=d * (k // 2), dilation=d, groups=c)
        self.bn = torch.nn.BatchNorm2d(c * mult)
        self.act = ACTS[acts[0]]()
        self.pw = torch.nn.Conv2d(c * mult, o, 1)
        self.out = ACTS[acts[1]]()
        self.residual = res

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw(self.act(self.bn(self.dw(x))))
        return self.out(y + x if self.residual else y)


@pytest.fixture
def fuse_all(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every eligible pair fused, whatever its size (the default rule fuses large maps only)."""
    monkeypatch.setattr(fuse_depthwise, "MIN_BYTES", 0)
    monkeypatch.setattr(fuse_depthwise, "MIN_ROWS", 1)
    monkeypatch.setenv(fuse_depthwise.ENV, "1")
    yield


def _net(case: tuple) -> torch.nn.Module:
    c, o, _, _, k, s, d, mult, act_dw, act_pw, res = case
    torch.manual_seed(0)
    net = _Separable(c, o, k, s, d, mult, (act_dw, act_pw), res)
    with torch.no_grad():
        net.dw.weight.mul_(3.0)  # sums well above the rounding of their terms
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


def _fused(strat: TilesStrategy) -> int:
    return kernel_names(strat.program.layers).count("depthwise+1x1")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}o{}_{}x{}_k{}s{}d{}m{}_{}_{}_r{:d}".format(*c))
def test_fused_pair_matches_eager(level: str, case: tuple, fuse_all: None, outputs_close) -> None:  # noqa: ANN001
    net = _net(case)
    shape = (2, case[0], case[2], case[3])
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert _fused(strat) == 1 and len(strat.program.layers) == 1
        for seed in range(2):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        x = nonfinite_input(shape, 7)
        with torch.no_grad():
            got, want = strat(x), net(x)
        assert want.isnan().any() or case[2] * case[3] == 1  # a 1x1 map keeps the last value set: -inf
        assert_nonfinite_close(got, want, rtol=1e-4, atol=1e-4)
    finally:
        strat.close()


def test_fused_tiles_split_rows_only(fuse_all: None, outputs_close) -> None:  # noqa: ANN001
    """Tiles asked for by count still span every channel and whole rows; each is a block of rows that two
    workers share, blocks of the kernel smaller than a tile where its channels are many."""
    net = _net((96, 24, 33, 33, 3, 1, 1, 1, "relu6", "none", False))
    x = torch.randn(1, 96, 33, 33)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2, tiles_per_layer=5)
    try:
        g = strat.graph
        layer = int((strat.program.layers[:, S_OP] == K_DWPW).nonzero()[0][0])
        lo, hi = g.layer_tile_start[layer], g.layer_tile_start[layer + 1]
        assert hi - lo == 5
        assert (g.tile_lo[lo:hi, 1] == 0).all() and (g.tile_hi[lo:hi, 1] == 24).all()
        assert (g.tile_lo[lo:hi, 3] == 0).all() and (g.tile_hi[lo:hi, 3] == 33).all()
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()


class _Shared(torch.nn.Module):
    """A depthwise output read twice (the 1x1 convolution and a sum), and a 1x1 convolution of stride 2
    after another depthwise convolution: neither pair may be fused."""

    def __init__(self) -> None:
        super().__init__()
        self.dw1 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw1 = torch.nn.Conv2d(16, 16, 1)
        self.dw2 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw2 = torch.nn.Conv2d(16, 16, 1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw1(x)
        z = self.pw1(y) + y
        return self.pw2(self.dw2(z))


def test_pairs_left_alone(fuse_all: None, outputs_close) -> None:  # noqa: ANN001
    net = _Shared().eval()
    x = torch.randn(1, 16, 17, 17)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        assert _fused(strat) == 0
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()


@pytest.mark.parametrize("setting", [None, "0"])
def test_off_unless_the_environment_asks(
    fuse_all: None, monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    if setting is None:
        monkeypatch.delenv(fuse_depthwise.ENV)
    else:
        monkeypatch.setenv(fuse_depthwise.ENV, setting)
    net = _net(CASES[3])
    strat = TilesStrategy(pathweave.capture(net, torch.randn(1, 33, 17, 33)), threads=2)
    try:
        assert _fused(strat) == 0
        assert kernel_names(strat.program.layers).count("depthwise") == 1
    finally:
        strat.close()


def test_rule_fuses_large_maps_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switched on, the pass fuses a pair where one image's depthwise output is at least ``MIN_BYTES``:
    32 channels of 112 x 112 (1.6 MB) are, 32 of 28 x 28 are not."""
    monkeypatch.setenv(fuse_depthwise.ENV, "1")
    for size, fused in ((112, 1), (28, 0)):
        net = _net((32, 16, size, size, 3, 1, 1, 1, "relu6", "none", False))
        strat = TilesStrategy(pathweave.capture(net, torch.randn(1, 32, size, size)), threads=2)
        try:
            assert _fused(strat) == fused
        finally:
            strat.close()


def test_fused_pair_reads_a_channels_last_input(level: str, fuse_all: None, outputs_close) -> None:  # noqa: ANN001
    net = _net((17, 20, 17, 33, 3, 2, 1, 1, "relu6", "none", False))
    x = torch.randn(2, 17, 17, 33).to(memory_format=torch.channels_last)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        assert _fused(strat) == 1
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()
