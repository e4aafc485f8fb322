"""An average pool commuted with the 1x1 convolution that alone reads it (tiles/commute_pool.py, the pool's
epilogue in native/tile_kernels.c) against eager at every instruction set level this CPU runs: both divisor
rules, a divisor override, ceil mode, windows 3x3 and 5x3, maps of 1, 8 and 17 x 29, a map the pool shrinks,
channels not multiples of 16, batch 2, the epilogue's activations, NaN and +-inf propagating as eager's; the
pairs the pass must leave alone; and the other order, a pool after a 1x1 convolution pooled first
(DenseNet's transitions)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles import commute_pool
from pathweave.tiles.strategy import TilesStrategy
from tests.conftest import assert_nonfinite_close, nonfinite_input

ACTS = {"none": torch.nn.Identity, "relu": torch.nn.ReLU, "silu": torch.nn.SiLU, "sigmoid": torch.nn.Sigmoid}
#: (channels, outputs, height, width, pool keywords, act, batch norm)
CASES = [
    (40, 12, 17, 29, {"kernel_size": 3, "stride": 1, "padding": 1}, "relu", True),
    (33, 8, 8, 8, {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False}, "silu", True),
    (24, 20, 9, 7, {"kernel_size": (5, 3), "stride": 1, "padding": (2, 1), "divisor_override": 4}, "none", 0),
    (17, 9, 1, 1, {"kernel_size": 3, "stride": 1, "padding": 1}, "sigmoid", True),
    (20, 6, 8, 11, {"kernel_size": 3, "stride": 1, "padding": 1, "ceil_mode": True}, "relu", False),
    (64, 4, 9, 9, {"kernel_size": 3, "stride": 1}, "relu", False),  # a smaller map: the product on 81 not 49
]


class _PoolBranch(torch.nn.Module):
    """Inception-v3's pool branch: an average pool, a 1x1 convolution, its batch norm (or bias) and an
    activation."""

    def __init__(self, c: int, o: int, pool: dict, act: str, bn: bool) -> None:
        super().__init__()
        self.pool = pool
        self.conv = torch.nn.Conv2d(c, o, 1, bias=not bn)
        self.bn = torch.nn.BatchNorm2d(o) if bn else torch.nn.Identity()
        self.act = ACTS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(F.avg_pool2d(x, **self.pool))))


def _net(case: tuple) -> torch.nn.Module:
    c, o, _, _, pool, act, bn = case
    torch.manual_seed(0)
    net = _PoolBranch(c, o, pool, act, bn)
    with torch.no_grad():
        if bn:
            net.bn.running_mean.uniform_(-0.5, 0.5)
            net.bn.running_var.uniform_(0.5, 2.0)
            net.bn.bias.uniform_(-1.0, 1.0)  # a bias the epilogue must add
        else:
            net.conv.bias.uniform_(-1.0, 1.0)
    return net.eval()


def _commuted(strat: TilesStrategy) -> int:
    return sum(n.target == torch.ops.pathweave.avg_pool2d_act.default for n in strat.gm.graph.nodes)


def _pooled_first(strat: TilesStrategy) -> int:
    """avg pools whose output a convolution reads."""
    return sum(
        n.target == torch.ops.aten.conv2d.default and n.args[0].target == torch.ops.aten.avg_pool2d.default
        for n in strat.gm.graph.nodes
    )


def _check(
    net: torch.nn.Module, shape: tuple[int, ...], outputs_close, commuted: int, pooled_first: int
) -> None:  # noqa: ANN001
    """The tiles' outputs against eager's on two random inputs and one with NaN and +-inf, after the pass
    made ``commuted`` pools with epilogues and ``pooled_first`` pools before convolutions."""
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert _commuted(strat) == commuted and _pooled_first(strat) == pooled_first
        for seed in range(2):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        x = nonfinite_input(shape, 7, ((0, 0), (0, 1), (1, 2)))
        with torch.no_grad():
            got, want = strat(x), net(x)
        assert want.isnan().any()
        assert_nonfinite_close(got, want, rtol=1e-4, atol=1e-4)
    finally:
        strat.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}o{}_{}x{}_{act}".format(*c[:4], act=c[5]))
def test_commuted_branch_matches_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    net = _net(case)
    shape = (2, case[0], case[2], case[3])
    _check(net, shape, outputs_close, commuted=1, pooled_first=0)


class _LeftAlone(torch.nn.Module):
    """Pairs that must not commute: a 1x1 convolution with as many outputs as inputs, one after a strided
    pool, one after a pool that a sum reads too, a 3x3 convolution, a strided 1x1 convolution, a max pool."""

    def __init__(self) -> None:
        super().__init__()
        self.same = torch.nn.Conv2d(16, 16, 1)
        self.after_stride = torch.nn.Conv2d(16, 4, 1)
        self.shared = torch.nn.Conv2d(16, 16, 1)
        self.window = torch.nn.Conv2d(16, 4, 3, padding=1)
        self.strided = torch.nn.Conv2d(16, 4, 1, stride=2)
        self.after_max = torch.nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def pool(t: torch.Tensor) -> torch.Tensor:
            return F.avg_pool2d(t, 3, 1, 1)

        p = pool(x)
        strided = self.after_stride(F.avg_pool2d(x, 2))
        return (self.same(pool(x)), strided, self.shared(p) + p, self.window(pool(x)), self.strided(pool(x)),
                self.after_max(F.max_pool2d(x, 3, 1, 1)))  # fmt: skip


def test_pairs_left_alone(outputs_close) -> None:  # noqa: ANN001
    net = _LeftAlone().eval()
    x = torch.randn(1, 16, 9, 9)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        assert _commuted(strat) == 0
        with torch.no_grad():
            for got, want in zip(strat(x), net(x), strict=True):
                outputs_close(got, want, rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()


def test_the_custom_op_is_the_pair_it_replaces() -> None:
    """avg_pool2d_act(conv(x)) is conv(avg_pool(x)) + bias, activated, within float rounding."""
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 24, 7, 9), torch.randn(6, 24, 1, 1), torch.randn(6)
    want = torch.relu(F.conv2d(F.avg_pool2d(x, 3, 1, 1, count_include_pad=False), w, b))
    got = commute_pool.avg_pool2d_act(F.conv2d(x, w), [3, 3], [1, 1], [1, 1], False, False, None, b, "relu")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _Transition(torch.nn.Module):
    """DenseNet's transition: batch norm, ReLU, a 1x1 convolution halving the channels (with a bias where
    ``bias``), then an average pool (2x2 of stride 2 by default)."""

    def __init__(self, c: int, bias: bool, pool: dict | None = None) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(c)
        self.conv = torch.nn.Conv2d(c, c // 2, 1, bias=bias)
        self.pool = pool or {"kernel_size": 2, "stride": 2}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(torch.relu(self.bn(x))), **self.pool)


#: DenseNet's transitions: (channels, map size, the convolution's bias, the pool's keywords: 2x2/2 if None)
POOLED_FIRST = [
    (34, 16, False, None),
    (24, 10, True, None),
    (40, 12, False, {"kernel_size": 3, "stride": 2, "padding": 1}),
    (48, 8, True, {"kernel_size": 4, "stride": 4}),
]


@pytest.mark.parametrize(("c", "size", "bias", "pool"), POOLED_FIRST)
def test_a_transition_is_pooled_first_and_matches_eager(
    level: str, c: int, size: int, bias: bool, pool: dict | None, outputs_close
) -> None:  # noqa: ANN001
    torch.manual_seed(2)
    net = _Transition(c, bias, pool)
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        if bias:
            net.conv.bias.uniform_(-1.0, 1.0)
    net.eval()
    shape = (2, c, size, size + 4)  # pools that reach the last row and column (the NaN's, the inf's)
    _check(net, shape, outputs_close, commuted=0, pooled_first=1)


class _KeepOrder(torch.nn.Module):
    """Convolutions before a pool that must stay first: one with a bias before a padded pool (its average
    would take the padding's zeros with the bias), one with a ReLU after it, one that a sum reads too, and
    one with fewer outputs than inputs before a pool that keeps the map (pooled first, the pool would
    average more channels)."""

    def __init__(self) -> None:
        super().__init__()
        self.biased = torch.nn.Conv2d(16, 8, 1)
        self.activated = torch.nn.Conv2d(16, 8, 1, bias=False)
        self.shared = torch.nn.Conv2d(16, 8, 1, bias=False)
        self.narrow = torch.nn.Conv2d(16, 8, 1, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = self.shared(x)
        return (F.avg_pool2d(self.biased(x), 3, 2, 1), F.avg_pool2d(torch.relu(self.activated(x)), 2),
                F.avg_pool2d(s, 2) + s[:, :, ::2, ::2], F.avg_pool2d(self.narrow(x), 3, 1, 1))  # fmt: skip


def test_convolutions_kept_before_their_pool(outputs_close) -> None:  # noqa: ANN001
    net = _KeepOrder().eval()
    x = torch.randn(1, 16, 10, 10)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        assert _pooled_first(strat) == 0 and _commuted(strat) == 0
        with torch.no_grad():
            for got, want in zip(strat(x), net(x), strict=True):
                outputs_close(got, want, rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()
