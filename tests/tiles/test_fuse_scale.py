"""Squeeze-excitation gates folded into the 1x1 convolution after them (tiles/fuse_scale.py): EfficientNet's
blocks (1x1 expansion, depthwise, global pool, two 1x1 layers on the pooled vector, the gate's multiply,
1x1 projection) against eager at every level, NaN and +-inf included; where the blocked kernel runs the
multiply goes, the depthwise output stays blocked and the pool and the projection read it so; products the
pass must leave alone; a program built at AVX2 run at the generic level (the C loops)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles import blocked as tile_blocked
from pathweave.tiles import fuse_scale
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.abi import BLK_IN, S_LAYOUT, S_SCALE
from pathweave.tiles.blocked import BLOCKED_ISAS
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy
from tests.tiles.test_blocked import _matches_eager


class _SEBlock(torch.nn.Module):
    """An inverted residual with a squeeze-excitation: expansion (SiLU), depthwise k x k of ``stride``
    (SiLU), the gate (mean over the map, 1x1 down with SiLU, 1x1 up with a sigmoid), the depthwise output
    times the gate (``gate_first``: gate times output), the projection, plus the block's input where the
    shapes allow."""

    def __init__(self, c: int, wide: int, k: int = 3, stride: int = 1, gate_first: bool = False) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c, wide, 1)
        self.dw = torch.nn.Conv2d(wide, wide, k, stride=stride, padding=k // 2, groups=wide)
        self.down, self.up = (
            torch.nn.Conv2d(wide, max(1, wide // 4), 1),
            torch.nn.Conv2d(max(1, wide // 4), wide, 1),
        )
        self.project = torch.nn.Conv2d(wide, c, 1)
        self.residual, self.gate_first = stride == 1, gate_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.dw(F.silu(self.expand(x))))
        s = torch.sigmoid(self.up(F.silu(self.down(F.adaptive_avg_pool2d(y, 1)))))
        y = self.project(s * y if self.gate_first else y * s)
        return y + x if self.residual else y


class _SENet(torch.nn.Module):
    """A stem and SE blocks (the middle one of stride 2), as EfficientNet chains them."""

    def __init__(self, c: int, wide: int, k: int, gate_first: bool) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1)
        self.blocks = torch.nn.Sequential(
            _SEBlock(c, wide, k, 1, gate_first), _SEBlock(c, wide, k, 2), _SEBlock(c, wide, k, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(F.silu(self.stem(x)))


#: (channels, expanded channels, kernel, height, width, gate first): 1 to 18 blocks of 8 channels in the
#: gate, maps whose positions are no multiple of 4, 56 x 56 (the depthwise layers split rows), 5 x 5
#: windows
CASES = [
    (16, 48, 3, 9, 7, False),
    (8, 40, 5, 11, 13, True),
    (24, 144, 3, 56, 56, False),
    (16, 8, 3, 4, 4, False),
]


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "c{}_w{}_k{}_{}x{}{}".format(*c[:5], "_gate_first" * c[5])
)
def test_gated_blocks_match_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, wide, k, h, w, gate_first = case
    torch.manual_seed(0)
    net = _SENet(c, wide, k, gate_first).eval()
    shape = (2, 3, h, w)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        names = kernel_names(strat.program.layers)
        rows = dict(zip((str(n) for n in strat.graph.layer_names), strat.program.layers, strict=True))
        muls = [n for n in strat.gm.graph.nodes if n.target == torch.ops.aten.mul.Tensor]
        pools = [r for n, r in rows.items() if n.startswith("adaptive_avg_pool2d")]
        scaled = [r for r in strat.program.layers if int(r[S_SCALE])]
        assert len(pools) == 3
        if level in BLOCKED_ISAS:  # the multiplies go; the depthwise outputs stay blocked
            assert not muls and len(scaled) == 3
            assert names.count("depthwise blocked") == 3, names
            assert all(int(r[S_LAYOUT]) & BLK_IN for r in scaled + pools)
        else:
            assert len(muls) == 3 and not scaled
            assert not any(int(r[S_LAYOUT]) for r in pools)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _Product(torch.nn.Module):
    """``conv(x * s)`` in forms the pass leaves alone: ``kind`` says which."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.a = torch.nn.Conv2d(16, 16, 1)
        out = 12 if kind == "channels" else 16
        stride, k = (2, 1) if kind == "stride" else (1, 3) if kind == "window" else (1, 1)
        self.b = torch.nn.Conv2d(16, out, k, stride=stride, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.a(x))
        s = torch.sigmoid(y.mean((2, 3), keepdim=True))
        if self.kind == "batch":  # one gate for every image
            s = s[:1]
        if self.kind == "expand":  # the same, expanded to every image: a gate of the shape, not dense
            s = s[:1].expand(y.shape[0], -1, -1, -1)
        if self.kind == "slice":  # half the channels of a gate twice as wide: not dense
            s = torch.cat([s, s], 1)[:, ::2]
        if self.kind == "spatial":  # a gate per position, not per channel
            s = torch.sigmoid(y)
        p = y * s
        out = self.b(p)
        return out + p.sum() if self.kind == "read_twice" else out


@pytest.mark.parametrize(
    "kind", ["batch", "expand", "slice", "spatial", "stride", "window", "channels", "read_twice"]
)
def test_products_left_alone(avx2: None, kind: str, outputs_close) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    net = _Product(kind).eval()
    shape = (2, 16, 6, 6)
    gm = pathweave.capture(net, torch.randn(shape))
    strat = TilesStrategy(gm, threads=2)
    try:
        assert not [r for r in strat.program.layers if int(r[S_SCALE])]
        assert [n for n in strat.gm.graph.nodes if n.target == torch.ops.aten.mul.Tensor]
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


@pytest.mark.parametrize("switch", [(fuse_scale, "FOLD", False), (tile_blocked, "BLOCKED_ISAS", ())])
def test_switched_off_the_multiply_stays(avx2: None, switch: tuple, monkeypatch, outputs_close) -> None:  # noqa: ANN001
    """The pass off, or the blocked kernel off (its A/B switch): the multiplies stay layers of their own."""
    monkeypatch.setattr(*switch)
    torch.manual_seed(0)
    net = _SENet(16, 48, 3, False).eval()
    shape = (1, 3, 9, 9)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert not [r for r in strat.program.layers if int(r[S_SCALE])]
        assert len([n for n in strat.gm.graph.nodes if n.target == torch.ops.aten.mul.Tensor]) == 3
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


def test_tile_counts_asked_for_split_gates_on_blocks(avx2: None, outputs_close) -> None:  # noqa: ANN001
    """Counts asked for: the scaled layers' channel tiles still start on blocks of 8 (their kernel's), and
    the pools' tiles cut through blocks of 8 of their blocked input."""
    torch.manual_seed(0)
    net = _SENet(16, 48, 3, False).eval()
    shape = (2, 3, 9, 9)
    count = lambda node: 7 if node.name.startswith("adaptive_avg_pool2d") else 64  # noqa: E731
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, tiles_per_layer=count)
    try:
        g, names = strat.graph, [str(n) for n in strat.graph.layer_names]
        rows = dict(zip(names, strat.program.layers, strict=True))
        starts = {}
        for i, name in enumerate(names):
            lo, hi = int(g.layer_tile_start[i]), int(g.layer_tile_start[i + 1])
            starts[name] = {int(g.tile_lo[t, 1]) for t in range(lo, hi)}
        scaled = [n for n in names if int(rows[n][S_SCALE])]
        pools = [n for n in names if n.startswith("adaptive_avg_pool2d")]
        assert len(scaled) == 3 and all(int(rows[n][S_LAYOUT]) & BLK_IN for n in pools)
        assert all(c % 8 == 0 for n in scaled for c in starts[n]) and len(starts[scaled[0]]) > 1
        assert any(c % 8 for n in pools for c in starts[n])
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


@pytest.mark.parametrize("make", [lambda: _SENet(16, 48, 3, False), lambda: _SENet(8, 16, 5, True)])
def test_a_gated_program_built_at_avx2_runs_at_the_generic_level(
    avx2: None,
    make: Callable[[], torch.nn.Module],
    outputs_close,  # noqa: ANN001
) -> None:
    """``pw_block_scale``'s and ``pw_blocked_mean``'s C loops."""
    torch.manual_seed(0)
    net = make().eval()
    shape = (2, 3, 10, 9)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert [r for r in strat.program.layers if int(r[S_SCALE])]
        tile_runtime.use_gemm_isa("generic")
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _Chain(torch.nn.Module):
    """Gated 1x1 layers in a chain: each one's output is the activation the next gate scales."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Conv2d(16, 16, 1) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.a(x))
        for conv in (self.b, self.c):
            y = conv(y * torch.sigmoid(F.adaptive_avg_pool2d(y, 1)))
        return y


def test_gated_layers_in_a_chain(avx2: None, outputs_close) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    net = _Chain().eval()
    shape = (2, 16, 5, 7)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert len([r for r in strat.program.layers if int(r[S_SCALE])]) == 2
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()
