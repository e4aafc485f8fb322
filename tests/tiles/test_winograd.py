"""Winograd F(2x2, 3x3) convolution tiles (native/tile_winograd.c) against eager PyTorch: padding 0 and 1,
odd heights and widths, a residual and ReLU in the store, tiles whose rows start on odd rows (a pair
whose second row is discarded), channel tiles inside the weight panels, 1 and 2 engines, every
instruction set of the micro-kernels; and the layers that must not take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pathweave
from pathweave.tiles import blocked
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.abi import PACKS, S_WPACK_T
from pathweave.tiles.bind_cnn import winograd_weights
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy

WINOGRAD = PACKS["winograd"]


class _Blocks(torch.nn.Module):
    """Three Winograd layers (on maps at least 14 wide): padding 1 with ReLU, padding 0 (the map shrinks
    by 2), padding 1 with a residual and ReLU; then one 3x3 of 16 input channels that stays direct."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(32, 48, 3, padding=1)
        self.b = torch.nn.Conv2d(48, 40, 3)
        self.c = torch.nn.Conv2d(40, 40, 3, padding=1)
        self.d = torch.nn.Conv2d(40, 16, 1)
        self.e = torch.nn.Conv2d(16, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(torch.relu(self.a(x)))
        y = torch.relu(self.c(y) + y)
        return self.e(self.d(y))


def _layers(strat: TilesStrategy, kind: int) -> list[int]:
    return [i for i, k in enumerate(strat.program.layers[:, S_WPACK_T].tolist()) if k == kind]


@pytest.mark.parametrize(("shape", "tiles", "threads"), [
    ((1, 32, 16, 18), None, 2),  # the default tiles
    ((1, 32, 17, 17), None, 1),  # odd height and width: a discarded row and column
    ((2, 32, 19, 23), 40, 2),  # many tiles: row pieces of odd lengths and starts, two images
    ((1, 32, 9, 31), 300, 2),  # one row per tile where it can
])  # fmt: skip
def test_winograd_layers_match_eager(shape: tuple, tiles: int | None, threads: int, outputs_close) -> None:
    torch.manual_seed(0)
    net = _Blocks().eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=threads, tiles_per_layer=tiles)
    try:
        wino = _layers(strat, WINOGRAD)
        assert len(wino) == 3  # a, b, c; e has 16 input channels
        if tiles:
            g = strat.graph
            starts = [
                int(v)
                for i in wino
                for v in g.tile_lo[g.layer_tile_start[i] : g.layer_tile_start[i + 1]][:, 2]
            ]
            assert any(s % 2 for s in starts)  # some tile starts on an odd row
        for seed in range(3):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()


def test_winograd_on_every_instruction_set(outputs_close) -> None:
    torch.manual_seed(1)
    net = _Blocks().eval()
    x = torch.randn(1, 32, 13, 18)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2, tiles_per_layer=8)
    chosen = tile_runtime.gemm_isa()
    try:
        for isa in tile_runtime.runnable_gemm_isas():  # the weights stay packed; each level its own kernels
            tile_runtime.use_gemm_isa(isa)
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        tile_runtime.use_gemm_isa(chosen)
        strat.close()


def test_channel_tiles_share_the_transformed_input(outputs_close) -> None:
    """Tiles asked for beyond one per row split the channels too: the tiles after the first over the
    same rows reuse its transformed input (by default the row pieces span every channel)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 256, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 64, 14, 14)
    default = TilesStrategy(pathweave.capture(net, x), threads=1)
    assert len(default.graph.grid(0)[1]) == 2 and len(default.graph.grid(0)[2]) > 2  # rows only
    default.close()
    strat = TilesStrategy(pathweave.capture(net, x), threads=1, tiles_per_layer=56)
    try:
        g = strat.graph
        assert len(g.grid(0)[2]) == 15 and len(g.grid(0)[1]) == 5  # 14 row pieces x 4 channel pieces
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()


@pytest.mark.parametrize("conv", [
    torch.nn.Conv2d(32, 32, 3, padding=1, stride=2),
    torch.nn.Conv2d(32, 32, 3, padding=2, dilation=2),
    torch.nn.Conv2d(32, 32, 3, padding=2),
    torch.nn.Conv2d(32, 32, 3, padding=1, groups=2),
    torch.nn.Conv2d(32, 16, 3, padding=1),
    torch.nn.Conv2d(32, 32, 5, padding=2),
])  # fmt: skip
def test_other_convolutions_stay_direct(conv: torch.nn.Module) -> None:
    strat = TilesStrategy(pathweave.capture(conv.eval(), torch.randn(1, 32, 16, 16)), threads=1)
    try:
        assert not _layers(strat, WINOGRAD)
    finally:
        strat.close()


def test_seven_wide_maps_stay_direct() -> None:
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()
    strat = TilesStrategy(pathweave.capture(conv, torch.randn(1, 64, 7, 7)), threads=1)
    try:
        assert not _layers(strat, WINOGRAD)
    finally:
        strat.close()


def test_the_transform_is_rebuilt_for_each_image_and_run(outputs_close) -> None:
    """One tile spans both images (same rows: the kept transform is the other image's) and a second
    run brings new inputs (same layer, image and rows as the first run's)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()).eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(2, 32, 14, 14)), threads=1, tiles_per_layer=1)
    try:
        assert _layers(strat, WINOGRAD) == [0] and strat.graph.num_tiles == 1
        for seed in range(2):
            x = torch.randn(2, 32, 14, 14, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()


def test_a_weight_given_at_run_time_stays_direct(outputs_close) -> None:
    class _WeightInput(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.conv2d(torch.relu(x), w, padding=1)

    x, w = torch.randn(1, 32, 16, 16), torch.randn(32, 32, 3, 3)
    strat = TilesStrategy(pathweave.capture(_WeightInput(), x, w), threads=1)
    try:
        assert not _layers(strat, WINOGRAD)
        outputs_close(strat(x, w), _WeightInput()(x, w), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()


def test_weight_transform_is_g_g_gt() -> None:
    """U = G g G^T per point, packed in panels of 16 output channels, k-major over input channels."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((20, 3, 3, 3)).astype(np.float32)
    packed = winograd_weights(w)
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    assert packed.shape == (16 * 2, 3, 16)  # 16 points x 2 panels, C = 3, 16 rows per panel
    for o, c, a, b in [(0, 0, 0, 0), (19, 2, 3, 1), (7, 1, 2, 2)]:
        want = (g @ w[o, c].astype(np.float64) @ g.T)[a, b]
        assert packed[(a * 4 + b) * 2 + o // 16, c, o % 16] == pytest.approx(want, rel=1e-6)
    assert not packed[1::2, :, 4:].any()  # rows past the 20 channels are zero


def test_kernel_names_name_each_convolution_path(monkeypatch) -> None:  # noqa: ANN001
    net = torch.nn.Sequential(
        torch.nn.Conv2d(32, 32, 3, padding=1),  # winograd
        torch.nn.Conv2d(32, 64, 1),  # 1x1 on the input as it lies, or the blocked kernel
        torch.nn.Conv2d(64, 64, 3, padding=1, groups=64),  # depthwise
        torch.nn.Conv2d(64, 64, 3, stride=2, padding=1),  # padded (stride 2), or the blocked kernel's window
    ).eval()
    captured = pathweave.capture(net, torch.randn(1, 32, 16, 16))
    strat = TilesStrategy(captured, threads=1)
    window = "window blocked" if tile_runtime.gemm_isa() in blocked.WINDOW_ISAS else "padded"
    pointwise = "1x1 blocked" if tile_runtime.gemm_isa() in blocked.BLOCKED_ISAS else "1x1"
    monkeypatch.setattr(blocked, "WINDOW_ISAS", ())
    monkeypatch.setattr(blocked, "BLOCKED_ISAS", ())
    transposed = TilesStrategy(captured, threads=1)
    try:
        assert kernel_names(strat.program.layers) == ["winograd", pointwise, "depthwise", window]
        assert kernel_names(transposed.program.layers) == ["winograd", "1x1", "depthwise", "padded"]
    finally:
        strat.close()
        transposed.close()


def test_winograd_min_channels_turns_winograd_off(outputs_close) -> None:
    """The strategy option that replaced the module global: ``winograd_min_channels=10**9`` runs every
    3x3 layer direct (on their own row pieces, not Winograd's even ones), with the same results."""
    torch.manual_seed(0)
    net = _Blocks().eval()
    x = torch.randn(1, 32, 16, 18)
    captured = pathweave.capture(net, x)
    winograd = TilesStrategy(captured, threads=2)
    direct = TilesStrategy(captured, threads=2, winograd_min_channels=10**9)
    try:
        assert kernel_names(winograd.program.layers).count("winograd") == 3
        assert "winograd" not in kernel_names(direct.program.layers) and not _layers(direct, WINOGRAD)
        with torch.no_grad():
            want = net(x)
            outputs_close(direct(x), want, rtol=1e-4, atol_scale=1e-5)
            outputs_close(direct(x), winograd(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        winograd.close()
        direct.close()


def test_fewer_outputs_than_a_panel_run_direct_under_a_lowered_minimum(outputs_close) -> None:  # noqa: ANN001
    """96 -> 8 channels with ``winograd_min_channels=8``: its weights fill no panel of the transposed
    micro-kernel (16 rows), so the layer runs direct (once a build error; found by a hostile test)."""
    torch.manual_seed(0)
    net = torch.nn.Conv2d(96, 8, 3, padding=1).eval()
    x = torch.randn(2, 96, 31, 24)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2, winograd_min_channels=8)
    try:
        assert "winograd" not in kernel_names(strat.program.layers)
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()
