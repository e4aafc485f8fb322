"""1x1 layers on channel-blocked activations (tiles/blocked.py, native/tile_gemm_b.c) against eager: which
values stay blocked, ResNet-style bottlenecks with identity and stride-2 shortcuts whose inputs, outputs and
residuals are blocked or NCHW in every mix, maps whose positions are no multiple of the kernel's 4, output
channels of 1, 2 and 3 vectors (and more), a batch of 2, NaN and +-inf propagating as eager's; and a
program built at AVX2 then run at the generic level (the kernel's C loops). Inverted residuals: 1x1 layers
of any activation, depthwise layers reading and writing blocks between them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.errors import PlanError
from pathweave.tiles import blocked as tile_blocked
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.abi import BLK_IN, BLK_OUT, BLK_RES, S_LAYOUT, WINDOW_FOLD
from pathweave.tiles.blocked import BLOCKED_ISAS, WINDOW_ISAS, blocked_values
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy
from tests.conftest import assert_nonfinite_close


class _Bottleneck(torch.nn.Module):
    """ResNet's bottleneck: 1x1 down, 3x3, 1x1 up, plus the input or a 1x1 shortcut of the same stride."""

    def __init__(self, c_in: int, mid: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.reduce = torch.nn.Conv2d(c_in, mid, 1)
        self.conv = torch.nn.Conv2d(mid, mid, 3, stride=stride, padding=1)
        self.expand = torch.nn.Conv2d(mid, c_out, 1)
        self.short = torch.nn.Conv2d(c_in, c_out, 1, stride=stride) if stride > 1 or c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(torch.relu(self.conv(torch.relu(self.reduce(x)))))
        return torch.relu(y + (self.short(x) if self.short is not None else x))


class _Net(torch.nn.Module):
    """A stem, bottlenecks (the second of stride 2), two plain 1x1 layers (one without ReLU) and a 3x3
    head: values written and read by 1x1 layers only stay blocked, the rest NCHW."""

    def __init__(self, c: int, mid: int, wide: int) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1)
        self.blocks = torch.nn.Sequential(
            _Bottleneck(c, mid, wide, 1),
            _Bottleneck(wide, mid, wide, 1),
            _Bottleneck(wide, mid, wide, 2),
            _Bottleneck(wide, mid, wide, 1),
        )
        self.a = torch.nn.Conv2d(wide, mid, 1)
        self.b = torch.nn.Conv2d(mid, wide, 1)
        self.head = torch.nn.Conv2d(wide, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(torch.relu(self.stem(x)))
        return self.head(self.b(torch.relu(self.a(y))))


#: (channels after the stem, bottleneck width, block width, height, width): widths of 1, 2, 3, 4, 5 and 7
#: vectors of 8 (a last group of 16 after 24; the last 32 channels as two groups of 16), maps of 63, 9,
#: 196 and 30 positions (tails of 3, 1, none and 2)
CASES = [(16, 8, 40, 9, 7), (24, 16, 24, 3, 3), (8, 24, 64, 14, 14), (16, 16, 32, 5, 11), (8, 32, 56, 6, 5)]


def _matches_eager(strat: TilesStrategy, net: torch.nn.Module, shape: tuple, outputs_close) -> None:  # noqa: ANN001
    """Two random inputs close to eager's outputs, and one with NaN and +-inf where eager has them."""
    for seed in range(2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    with torch.no_grad():
        got, want = strat(_nonfinite(shape)), net(_nonfinite(shape))
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    for g, w in pairs:
        assert_nonfinite_close(g, w, rtol=1e-4, atol=1e-4)


def _nonfinite(shape: tuple[int, ...]) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    x[0, 0, 0, -1] = float("nan")
    x[-1, 1, -1, 0] = float("inf")
    x[0, 2, shape[2] // 2, 0] = float("-inf")
    return x


@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}_m{}_w{}_{}x{}".format(*c))
def test_blocked_1x1_layers_match_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, mid, wide, h, w = case
    torch.manual_seed(0)
    net = _Net(c, mid, wide).eval()
    shape = (2, 3, h, w)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        names = kernel_names(strat.program.layers)
        bits = [
            int(r[S_LAYOUT]) for r, n in zip(strat.program.layers, names, strict=True) if n == "1x1 blocked"
        ]
        if level in BLOCKED_ISAS:  # every mix the model has: in, out and residual blocked or not
            assert {BLK_IN, BLK_IN | BLK_OUT} <= set(bits)  # b, a
            assert any(b & BLK_RES for b in bits) and any(b & (BLK_OUT | BLK_IN) == BLK_OUT for b in bits)
        else:
            assert not bits
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


def test_which_values_stay_blocked() -> None:
    """Blocked: written and read by 1x1 layers only, as their input or residual. Not: read by the 3x3
    layer, the head, a graph output, 12 channels (no multiple of 8)."""

    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(16, 16, 1), torch.nn.Conv2d(16, 16, 1)
            self.c, self.d = torch.nn.Conv2d(16, 12, 1), torch.nn.Conv2d(12, 16, 1)
            self.k = torch.nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a = self.a(x)  # read by b (as input and residual): blocked
            b = self.b(a) + a  # read by c and by k: NCHW
            d = self.d(self.c(b))  # c's 12 channels: NCHW
            return self.k(b), d  # d: a graph output

    strat = TilesStrategy(pathweave.capture(Pair().eval(), torch.randn(1, 16, 6, 6)), threads=1)
    try:
        kept = blocked_values(strat.gm, strat.graph, "avx2")
        targets = {n.name: n.target for n in strat.gm.graph.nodes}
        assert len(kept) == 1
        assert kept == blocked_values(strat.gm, strat.graph, "avx2")
        assert not blocked_values(strat.gm, strat.graph, "generic")
        assert "conv" in str(targets[next(iter(kept))])
    finally:
        strat.close()


class _Head(torch.nn.Module):
    """A classifier head: a 1x1 layer, a global pool, a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.conv = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(F.relu(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def test_global_pools_read_blocked_values(level: str, outputs_close) -> None:  # noqa: ANN001
    """A 1x1 layer whose one reader is a global pool keeps its output blocked; the pool reads blocks."""
    torch.manual_seed(0)
    net = _Head().eval()
    shape = (2, 3, 7, 9)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        rows = dict(zip((str(n) for n in strat.graph.layer_names), strat.program.layers, strict=True))
        (pool,) = [n for n in strat.gm.graph.nodes if "adaptive_avg_pool2d" in str(n.target)]
        blocked = level in BLOCKED_ISAS
        assert (pool.args[0].name in blocked_values(strat.gm, strat.graph, level)) == blocked
        assert int(rows[pool.name][S_LAYOUT]) == (BLK_IN if blocked else 0)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _Inverted(torch.nn.Module):
    """MobileNetV2 / EfficientNet inverted residuals: a 1x1 expansion with an activation (ReLU6 applied as
    the kernel stores; SiLU, hard swish after the store), a depthwise 3x3 with the same activation, a 1x1
    projection whose output the next block's expansion and projection read: with ReLU6 (or ReLU) the
    whole block stays blocked, the depthwise layer reading and writing blocks; with the others the
    expansion's and the depthwise layer's outputs are NCHW."""

    def __init__(self, c: int, wide: int, acts: tuple[Callable[[torch.Tensor], torch.Tensor], ...]) -> None:
        super().__init__()
        self.stem, self.acts = torch.nn.Conv2d(3, c, 3, padding=1), acts
        self.expand = torch.nn.ModuleList(torch.nn.Conv2d(c, wide, 1) for _ in acts)
        self.dw = torch.nn.ModuleList(torch.nn.Conv2d(wide, wide, 3, padding=1, groups=wide) for _ in acts)
        self.project = torch.nn.ModuleList(torch.nn.Conv2d(wide, c, 1) for _ in acts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        for act, e, d, p in zip(self.acts, self.expand, self.dw, self.project, strict=True):
            y = p(act(d(act(e(y))))) + y
        return y


@pytest.mark.parametrize(
    "acts",
    [(F.relu6, F.relu6, F.relu6), (F.silu, F.hardswish, F.relu6), (torch.sigmoid, F.relu6, F.gelu)],
    ids=["relu6", "silu_hardswish_relu6", "sigmoid_relu6_gelu"],
)
def test_expansions_of_any_activation_take_the_kernel(level: str, acts: tuple, outputs_close) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    net = _Inverted(16, 48, acts).eval()
    shape = (2, 3, 9, 7)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        names = kernel_names(strat.program.layers)
        rows = dict(zip((str(n) for n in strat.graph.layer_names), strat.program.layers, strict=True))
        kept = blocked_values(strat.gm, strat.graph, level)
        # the 1x1 layers of 48 outputs (the depthwise layers have 48 too)
        layers = [n for n in strat.gm.graph.nodes if n.name in rows and "depthwise" not in _kernel(strat, n)]
        expansions = [n for n in layers if _out_channels(n) == 48]
        assert len(expansions) == len(acts)
        for node in expansions:
            blocked = level in BLOCKED_ISAS
            assert (_kernel(strat, node) == "1x1 blocked") == blocked, node.name
            # the input of each expansion after the first is the last projection's output: blocked where
            # the kernel is; its output too, whatever the activation (after the store where it is not a
            # clamp: OTHER_ACTS_BLOCKED)
            assert (node.name in kept) == blocked, node.name
            if blocked and node is not expansions[0]:
                assert int(rows[node.name][S_LAYOUT]) & BLK_IN
        assert names.count("1x1 blocked") == (2 * len(acts) if level in BLOCKED_ISAS else 0)
        assert names.count("depthwise blocked") == (len(acts) if level in BLOCKED_ISAS else 0)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _DepthwiseBetween(torch.nn.Module):
    """A depthwise layer between two 1x1 layers (ReLU6, none or ReLU after it): blocked in and out."""

    def __init__(self, c: int, k: int, stride: int, pad: int, act: Callable | None) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(16, c, 1), torch.nn.Conv2d(c, 8, 1)
        self.dw = torch.nn.Conv2d(c, c, k, stride=stride, padding=pad, groups=c)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(F.relu6(self.a(x)))
        return self.b(self.act(y) if self.act is not None else y)


#: (channels, kernel, stride, padding, height, width, activation): 3x3, 5x5 and 7x7 windows, strides 1 and 2,
#: padding none, half and narrower, maps narrower than a window's 4 positions at once, as wide as the
#: window, odd and even; 8 and 40 channels (one and five blocks)
DEPTHWISE_CASES = [
    (48, 3, 1, 1, 9, 7, F.relu6), (48, 3, 2, 1, 14, 14, F.relu6), (8, 5, 1, 2, 6, 11, None),
    (40, 5, 2, 2, 13, 9, torch.relu), (16, 7, 1, 3, 7, 7, None), (16, 3, 1, 0, 5, 3, F.relu6),
    (24, 3, 2, 0, 3, 3, None), (16, 5, 1, 1, 4, 13, F.relu6),
]  # fmt: skip


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=lambda c: "c{}_k{}_s{}_p{}_{}x{}".format(*c[:6]))
def test_depthwise_layers_read_and_write_blocks(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, k, stride, pad, h, w, act = case
    torch.manual_seed(0)
    net = _DepthwiseBetween(c, k, stride, pad, act).eval()
    shape = (2, 16, h, w)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        names = kernel_names(strat.program.layers)
        assert names.count("depthwise blocked") == (1 if level in BLOCKED_ISAS else 0), names
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


@pytest.mark.parametrize("other_acts_blocked", [True, False], ids=["silu_blocked", "silu_nchw"])
def test_depthwise_layers_kept_blocked_split_rows(
    level: str,
    other_acts_blocked: bool,
    outputs_close,
    monkeypatch,  # noqa: ANN001
) -> None:
    """A depthwise layer kept blocked (between 1x1 layers) splits rows, every channel in each tile
    (``row_split_depthwise``), and its first tile waits for the expansion tiles of its rows only, not for
    the whole expansion; a depthwise layer on the NCHW kernel (SiLU without ``OTHER_ACTS_BLOCKED``) splits
    channels, every row in each."""
    monkeypatch.setattr(tile_blocked, "OTHER_ACTS_BLOCKED", other_acts_blocked)
    torch.manual_seed(0)
    net = _Inverted(24, 144, (F.relu6, F.silu)).eval()
    shape = (1, 3, 56, 56)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        g = strat.graph
        names = [str(n) for n in g.layer_names]
        kinds = dict(zip(names, kernel_names(strat.program.layers), strict=True))
        depthwise = [n for n in names if kinds[n].startswith("depthwise")]
        kept = (2 if other_acts_blocked else 1) if level in BLOCKED_ISAS else 0
        assert [kinds[n] for n in depthwise].count("depthwise blocked") == kept
        for name in depthwise:
            i = names.index(name)
            lo, hi = int(g.layer_tile_start[i]), int(g.layer_tile_start[i + 1])
            channels = {(int(g.tile_lo[t, 1]), int(g.tile_hi[t, 1])) for t in range(lo, hi)}
            rows = {(int(g.tile_lo[t, 2]), int(g.tile_hi[t, 2])) for t in range(lo, hi)}
            assert hi - lo >= 2, name
            if kinds[name] == "depthwise blocked":
                assert channels == {(0, 144)} and len(rows) == hi - lo, (channels, rows)
                parents = g.parents_indices[g.parents_indptr[lo] : g.parents_indptr[lo + 1]]
                producer = {int(g.tile_layer[t]) for t in parents}
                assert len(producer) == 1, producer
                (p,) = producer
                assert 0 < len(parents) < g.layer_tile_start[p + 1] - g.layer_tile_start[p]
            else:
                assert rows == {(0, 56)} and len(channels) == hi - lo, (channels, rows)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


def test_depthwise_stays_nchw_where_a_neighbour_does() -> None:
    """A depthwise layer whose input comes from a 3x3 layer, or whose output goes to a graph output or an
    element-wise multiply, or of 12 channels, keeps the NCHW kernel, and so do the values around it."""

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k, self.p = torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 1)
            self.d = torch.nn.ModuleList(torch.nn.Conv2d(16, 16, 3, padding=1, groups=16) for _ in range(3))
            self.q, self.r = torch.nn.Conv2d(16, 12, 1), torch.nn.Conv2d(12, 12, 3, padding=1, groups=12)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a = self.p(self.d[0](self.k(x)))  # d[0]'s input: a 3x3 window's (NCHW)
            b = self.d[1](self.p(a)) * a  # d[1]'s output: read by an element-wise multiply
            c = self.d[2](self.p(b))  # d[2]'s output: a graph output
            return c, self.r(self.q(a))  # r: 12 channels

    strat = TilesStrategy(pathweave.capture(Mixed().eval(), torch.randn(1, 16, 6, 6)), threads=1)
    try:
        names = [str(n) for n in strat.graph.layer_names]
        kinds = dict(zip(names, kernel_names(strat.program.layers), strict=True))
        depthwise = {n for n, k in kinds.items() if k.startswith("depthwise")}
        assert len(depthwise) == 4 and all(kinds[n] == "depthwise" for n in depthwise)
        kept = blocked_values(strat.gm, strat.graph, "avx2")
        assert not depthwise & kept
        # nor their inputs: the 1x1 layers before d[1] and d[2] write NCHW
        inputs = {n.args[0].name for n in strat.gm.graph.nodes if n.name in depthwise}
        assert not inputs & kept
    finally:
        strat.close()


def _out_channels(node: torch.fx.Node) -> int:
    return int(node.meta["val"].shape[1]) if "val" in node.meta else -1


def _kernel(strat: TilesStrategy, node: torch.fx.Node) -> str:
    names = [str(n) for n in strat.graph.layer_names]
    return kernel_names(strat.program.layers)[names.index(node.name)]


class _InPlace(torch.nn.Module):
    """NCHW residual 1x1 layers (their outputs read by 3x3 layers): one the plan writes over its residual,
    whose other reader is a side branch no tile of the convolution descends from (its tiles must wait for
    that branch), one whose residual is also its input and one whose residual is read again after it
    (neither in place). ``_Net``'s bottlenecks have blocked ones, chained."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.stem, self.side = torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.Conv2d(c, c, 3, padding=1)
        self.other = torch.nn.Conv2d(3, c, 1)
        self.e = torch.nn.ModuleList(torch.nn.Conv2d(c, c, 1) for _ in range(3))
        self.k = torch.nn.ModuleList(torch.nn.Conv2d(c, c, 3, padding=1) for _ in range(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.relu(self.stem(x))
        s = self.side(a)  # a's other reader, on no path into e[0]
        z = torch.relu(self.other(x))
        b = torch.relu(self.e[0](z) + a)  # over a, after s's tiles
        k = torch.relu(self.k[0](b))
        c = torch.relu(self.e[1](k) + k)  # k is its input too
        d = torch.relu(self.e[2](c) + b)  # b is read again below
        return d + b + self.k[1](c), s


def test_residuals_written_in_place_match_eager(level: str, outputs_close) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    net = _InPlace(16).eval()
    shape = (2, 3, 9, 7)
    # no other reuse (distance 100): the only added edges are the in-place ones
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, work_per_tile=2e3,
                          buffer_distance=100)  # fmt: skip
    try:
        plan = strat.buffers
        names = [str(n) for n in strat.graph.layer_names]
        pairs = [(names[i], names[a]) for i, a in plan.inplace.items()]
        if level not in BLOCKED_ISAS:
            assert not pairs
        else:
            ((conv, residual),) = pairs
            node = next(n for n in strat.gm.graph.nodes if n.name == conv)
            assert node.args[0].args[0].name == "x" and plan.offsets[names.index(conv)] == plan.offsets[
                names.index(residual)]  # fmt: skip
            plan.verify()
            with pytest.raises(PlanError, match="in place without waiting"):
                replace(plan, graph=plan.source).verify()
        for seed in range(12):  # many runs on two engines: an overwrite before a read shows as a wrong result
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        with torch.no_grad():
            got, want = strat(_nonfinite(shape)), net(_nonfinite(shape))
        for g, w in zip(got, want, strict=True):
            assert_nonfinite_close(g, w, rtol=1e-4, atol=1e-4)
    finally:
        strat.close()


class _Windows(torch.nn.Module):
    """Inception-style windows on the same kernel (``window_capable``): 1x7 and 7x1 with their padding,
    a 3x3 of stride 2 without padding, a 5x5, a 1x3 with a residual and a 3x3 of stride 2 with padding
    and SiLU (an activation the kernel leaves to the epilogue)."""

    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(c, mid, (1, 7), padding=(0, 3))
        self.b = torch.nn.Conv2d(mid, c, (7, 1), padding=(3, 0))
        self.five = torch.nn.Conv2d(c, mid, 5, padding=2)
        self.wide = torch.nn.Conv2d(mid, c, (1, 3), padding=(0, 1))
        self.down = torch.nn.Conv2d(c, mid, 3, stride=2)
        self.down_pad = torch.nn.Conv2d(mid, c, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b(torch.relu(self.a(x))))
        y = self.wide(torch.relu(self.five(y))) + y
        return torch.nn.functional.silu(self.down_pad(torch.relu(self.down(y))))


#: (channels, middle channels, height, width): 1, 3 and 5 vectors of 8 (groups of 24 and a last of 16),
#: maps whose rows are no multiple of the kernel's 4 positions, odd maps under the stride-2 windows
WINDOW_CASES = [(8, 24, 9, 7), (16, 40, 17, 17), (24, 8, 11, 13)]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: "c{}_m{}_{}x{}".format(*c))
def test_windows_on_the_blocked_kernel_match_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, mid, h, w = case
    torch.manual_seed(0)
    windows = 6 if level in WINDOW_ISAS else 0
    _windows_match_eager(_Windows(c, mid).eval(), (2, c, h, w), windows, outputs_close)


def _windows_match_eager(net: torch.nn.Module, shape: tuple, windows: int, outputs_close) -> None:  # noqa: ANN001
    """``net`` built at 2 workers has ``windows`` layers on the window kernel and matches eager."""
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert kernel_names(strat.program.layers).count("window blocked") == windows
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _Stems(torch.nn.Module):
    """Stems whose few input channels fold with their taps into one sum (``window_folded``): ResNet's 7x7
    of stride 2 with padding 3 (64 outputs: groups of 24, 24 and 16), Inception's 3x3 of stride 2 without
    padding (32: 16 + 16), a 5x5 with padding, a 1x3 with padding and the 5x5's output as its residual, and
    AlexNet's 11x11 of stride 4 (121 taps: more than a blocked window takes)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.resnet = torch.nn.Conv2d(c, 64, 7, stride=2, padding=3)
        self.inception = torch.nn.Conv2d(c, 32, 3, stride=2)
        self.five = torch.nn.Conv2d(c, 8, 5, padding=2)
        self.row = torch.nn.Conv2d(c, 8, (1, 3), padding=(0, 1))
        self.alexnet = torch.nn.Conv2d(c, 16, 11, stride=4, padding=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.row(x) + self.five(x)
        return torch.relu(self.resnet(x)), torch.relu(self.inception(x)), y, torch.relu(self.alexnet(x))


@pytest.mark.parametrize("c", [3, 5])
def test_stems_folded_with_their_taps_match_eager(level: str, c: int, outputs_close) -> None:  # noqa: ANN001
    """3 and 5 input channels (147 and 245 terms of the 7x7: the last block of 8 part zeros, read from the
    copy's plane of zeros), maps whose rows are no multiple of 4 positions, a batch of 2, NaN and +-inf."""
    torch.manual_seed(0)
    net = _Stems(c).eval()
    shape = (2, c, 23, 19)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert kernel_names(strat.program.layers).count("window folded") == (5 if level in WINDOW_ISAS else 0)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


class _StemThenBlocks(torch.nn.Module):
    """MobileNetV2's start: a 3x3 stem of ``stride`` (ReLU6, or SiLU after the store) whose readers read
    blocks (a depthwise layer, and a 1x1 layer with the stem's output as its residual), so the stem writes
    its output blocked."""

    def __init__(
        self, c: int, stride: int, act: Callable[[torch.Tensor], torch.Tensor], c_in: int = 3
    ) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(c_in, c, 3, stride=stride, padding=1)
        self.dw = torch.nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pw, self.act = torch.nn.Conv2d(c, c, 1), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.stem(x))
        return self.pw(F.relu6(self.dw(y))) + y


@pytest.mark.parametrize(
    ("c", "stride", "act", "c_in"),
    [(16, 2, F.relu6, 3), (40, 1, F.silu, 3), (16, 1, F.relu6, 1)],
    ids=["c16_s2_relu6", "c40_s1_silu", "grey_c16"],
)
def test_stems_write_blocks_where_their_readers_read_them(
    level: str,
    c: int,
    stride: int,
    act: Callable,
    c_in: int,
    outputs_close,  # noqa: ANN001
) -> None:
    """3 input channels, and 1 (a grey image: one channel of one group, which counts as depthwise, stays
    off the stems: its own window kernel, NCHW output)."""
    torch.manual_seed(0)
    net = _StemThenBlocks(c, stride, act, c_in).eval()
    shape = (2, c_in, 23, 19)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        names = kernel_names(strat.program.layers)
        bits = [
            int(r[S_LAYOUT]) for r, n in zip(strat.program.layers, names, strict=True) if n == "window folded"
        ]
        assert bits == ([WINDOW_FOLD | BLK_OUT] if level in WINDOW_ISAS and c_in > 1 else [])
        if c_in > 1:
            _matches_eager(strat, net, shape, outputs_close)
        else:  # _nonfinite's inf lies in channel 1
            x = torch.randn(shape)
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()


def test_a_stem_off_the_window_kernel_writes_nchw(level: str, monkeypatch, outputs_close) -> None:  # noqa: ANN001
    """The same stem without the window kernel (its A/B switch): another kernel, its output NCHW."""
    monkeypatch.setattr(tile_blocked, "WINDOW_ISAS", ())
    torch.manual_seed(0)
    net = _StemThenBlocks(16, 1, F.relu6).eval()
    shape = (1, 3, 12, 12)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        stem = next(n for n in strat.gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target))
        assert "window folded" not in kernel_names(strat.program.layers)
        assert stem.name not in blocked_values(strat.gm, strat.graph, level)
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


#: (input channels, map size, stride): a 3x3 window whose groups of 24 output channels hold more weights than
#: the kernel's share (PW_SHARE_BYTES, 128 KB: 152 input channels x 9 taps x 24 x 4 bytes), so each quad's
#: sums run over the input channels in shares and are kept between them: 160 channels in two shares, 328 in
#: three (14, 14 and 13 blocks of 8), stride 2 with padding; 40 outputs: a group of 24 and one of 16
SHARE_CASES = [(160, 7, 1), (328, 9, 2)]


@pytest.mark.parametrize("case", SHARE_CASES, ids=lambda c: f"c{c[0]}_{c[1]}x{c[1]}_s{c[2]}")
def test_windows_in_shares_of_input_channels_match_eager(level: str, case: tuple, outputs_close) -> None:  # noqa: ANN001
    c, size, stride = case
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(c, 40, 3, stride=stride, padding=1), torch.nn.ReLU()).eval()
    _windows_match_eager(net, (1, c, size, size), 1 if level in WINDOW_ISAS else 0, outputs_close)


def test_a_large_window_tile_in_shares_matches_eager(outputs_close) -> None:  # noqa: ANN001
    """One tile of 576 positions in shares: the sums kept between shares live in the worker's scratch
    (once a stack buffer of 341 positions' sums, past which a tile ran in one pass)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(160, 40, 3, stride=2, padding=1), torch.nn.ReLU()).eval()
    shape = (1, 160, 48, 48)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, tiles_per_layer=1)
    try:
        graph = strat.graph
        assert int((graph.tile_hi[0, 2] - graph.tile_lo[0, 2]) * graph.tile_hi[0, 3]) == 576
        windows = 1 if tile_runtime.gemm_isa() in WINDOW_ISAS else 0
        assert kernel_names(strat.program.layers).count("window blocked") == windows
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()


def test_windows_split_into_channel_tiles_match_eager(outputs_close) -> None:  # noqa: ANN001
    """Many channels over few rows: a layer's tiles split its channels, each tile reading the worker's
    kept copy of the input rows (or making its own where the rows differ)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 192, (7, 1), padding=(3, 0)), torch.nn.ReLU()).eval()
    x = torch.randn(1, 64, 17, 17)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        graph = strat.graph
        channel_starts = {int(v) for v in graph.tile_lo[: graph.layer_tile_start[1], 1]}
        assert len(channel_starts) > 1
        with torch.no_grad():
            for _ in range(3):
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
    finally:
        strat.close()


@pytest.mark.parametrize("padding", [3, 50, 1000])
def test_a_padding_wider_than_every_window(padding: int, outputs_close) -> None:  # noqa: ANN001
    """One output column whose window lies in the padding (Wp = kw < the padding): the copy wrote the
    padding's zeros past each row and past the scratch (found by a hostile test: heap corruption)."""
    net = torch.nn.Conv2d(8, 8, 2, stride=2 * padding + 1, padding=(0, padding)).eval()
    x = torch.randn(1, 8, 2, 1)
    for _ in range(3):
        strat = TilesStrategy(pathweave.capture(net, x), threads=1)
        try:
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        finally:
            strat.close()


def test_which_windows_take_the_blocked_kernel() -> None:
    """Not: channels no multiple of 8 (but fewer than 8: folded), groups, dilation, unequal strides,
    Winograd's 3x3 layers."""
    layers = {
        "odd_channels": torch.nn.Conv2d(12, 16, 3, padding=1),
        "folded": torch.nn.Conv2d(3, 16, 7, stride=2, padding=3),
        "groups": torch.nn.Conv2d(16, 16, 3, padding=1, groups=2),
        "dilated": torch.nn.Conv2d(16, 16, 3, padding=2, dilation=2),
        "strides": torch.nn.Conv2d(16, 16, 3, stride=(1, 2)),
        "winograd": torch.nn.Conv2d(32, 32, 3, padding=1),
        "taken": torch.nn.Conv2d(16, 16, (1, 7), padding=(0, 3)),
    }
    for name, layer in layers.items():
        x = torch.randn(1, layer.in_channels, 16, 16)
        strat = TilesStrategy(pathweave.capture(layer.eval(), x), threads=1)
        try:
            names = kernel_names(strat.program.layers)
            window = tile_runtime.gemm_isa() in WINDOW_ISAS
            assert ("window blocked" in names) == (name == "taken" and window)
            assert ("window folded" in names) == (name == "folded" and window)
        finally:
            strat.close()


@pytest.mark.parametrize(
    ("kernel", "make", "shape"),
    [
        ("1x1 blocked", lambda: _Net(16, 8, 40), (1, 3, 9, 7)),
        ("1x1 blocked", lambda: _Net(8, 32, 56), (1, 3, 9, 7)),  # groups of 16 + 16
        ("window blocked", lambda: _Windows(16, 24), (1, 16, 9, 11)),
        ("window folded", lambda: _Stems(3), (1, 3, 13, 11)),
        ("window folded", lambda: _StemThenBlocks(16, 2, F.relu6), (2, 3, 13, 11)),
        ("depthwise blocked", lambda: _DepthwiseBetween(40, 5, 2, 2, F.relu6), (2, 16, 13, 9)),
        ("depthwise blocked", lambda: _Inverted(16, 48, (F.relu6, F.relu6)), (1, 3, 9, 7)),
        ("depthwise blocked", lambda: _Inverted(16, 48, (F.silu, F.hardswish)), (1, 3, 9, 7)),
    ],
    ids=["1x1", "1x1_16+16", "window", "folded", "stem_blocked", "depthwise_s2", "inverted", "inverted_silu"],
)
def test_a_program_built_at_avx2_runs_at_the_generic_level(
    avx2: None,
    kernel: str,
    make: Callable[[], torch.nn.Module],
    shape: tuple,
    outputs_close,  # noqa: ANN001
) -> None:
    """The kernels' C loops, for a program whose level was lowered after it was built (their groups of
    output channels as the packing's: 24, 16, 8, and the last 32 as 16 + 16; the depthwise one's)."""
    torch.manual_seed(0)
    net = make().eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        assert kernel in kernel_names(strat.program.layers)
        tile_runtime.use_gemm_isa("generic")  # the fixture restores the level chosen before
        _matches_eager(strat, net, shape, outputs_close)
    finally:
        strat.close()
