"""Strategy "tiles" on transposes its consumers cannot read in place: ConvNeXt's NCHW -> NHWC permute
before a layer norm over channels and the permute back before a conv become copy layers, so the model
runs whole as tiles; Swin's 6-D window views copy as 4-D runs; MobileViT's unfold into 2x2 patches and
fold back copy as 5-D and 6-D views. Against eager PyTorch, NaN included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pathweave
from pathweave.tiles.rows import View, coalesced
from pathweave.tiles.strategy import TilesStrategy
from tests.conftest import assert_nonfinite_close

CHANNELS, HEIGHT, WIDTH, WINDOW = 17, 9, 11, 4


class _ConvNeXtBlock(torch.nn.Module):
    """dwconv 7x7 -> permute -> LayerNorm -> Linear -> GELU -> Linear -> scale -> permute -> residual
    add, then a channels-first layer norm (permute, norm, permute back) and a downsampling conv."""

    def __init__(self) -> None:
        super().__init__()
        self.dwconv = torch.nn.Conv2d(CHANNELS, CHANNELS, 7, padding=3, groups=CHANNELS)
        self.norm = torch.nn.LayerNorm(CHANNELS, eps=1e-6)
        self.up = torch.nn.Linear(CHANNELS, 4 * CHANNELS)
        self.down = torch.nn.Linear(4 * CHANNELS, CHANNELS)
        self.scale = torch.nn.Parameter(torch.rand(CHANNELS) + 0.5)
        self.down_norm = torch.nn.LayerNorm(CHANNELS, eps=1e-6)
        self.downsample = torch.nn.Conv2d(CHANNELS, 2 * CHANNELS, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x).permute(0, 2, 3, 1)
        h = self.scale * self.down(torch.nn.functional.gelu(self.up(self.norm(h))))
        x = x + h.permute(0, 3, 1, 2)
        x = self.down_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.downsample(x)


class _Windows(torch.nn.Module):
    """Swin's window partition (6-D view, permute, contiguous, 4-D view), attention-free mixing in each
    window, and the reverse."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(CHANNELS)
        self.mix = torch.nn.Linear(CHANNELS, CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        win = x.view(b, h // WINDOW, WINDOW, w // WINDOW, WINDOW, c).permute(0, 1, 3, 2, 4, 5)
        win = win.contiguous().view(-1, WINDOW * WINDOW, c)
        win = self.mix(self.norm(win)) + win
        out = win.view(b, h // WINDOW, w // WINDOW, WINDOW, WINDOW, c).permute(0, 1, 3, 2, 4, 5)
        return x + out.contiguous().view(b, h, w, c)


class _Patches(torch.nn.Module):
    """MobileViT's block without attention: conv, unfold into 2x2 patches (a 6-D permute and reshape),
    layer norm and linear over the tokens, fold back (another), conv over the concatenation."""

    def __init__(self) -> None:
        super().__init__()
        self.local = torch.nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
        self.norm = torch.nn.LayerNorm(CHANNELS)
        self.mix = torch.nn.Linear(CHANNELS, CHANNELS)
        self.fuse = torch.nn.Conv2d(2 * CHANNELS, CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from pathweave.zoo.mobilevit import fold, unfold

        h, w = x.shape[-2:]
        y = fold(self.mix(self.norm(unfold(self.local(x)))), h, w)
        return self.fuse(torch.cat([x, y], dim=1))


def _check(model: torch.nn.Module, x: torch.Tensor, outputs_close, **options) -> TilesStrategy:
    strat = pathweave.optimize(model, x, strategy="tiles", options=options)
    assert isinstance(strat, TilesStrategy), f"ran as {type(strat).__name__}, not whole as tiles"
    for seed in range(2):
        xs = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = model(xs)
        outputs_close(strat(xs), want, rtol=1e-4, atol_scale=1e-5)
    return strat


@pytest.mark.parametrize(("threads", "work"), [(1, 2e3), (2, 2e3), (2, 1e9)])
def test_convnext_block_runs_whole_as_tiles(threads: int, work: float, outputs_close) -> None:
    torch.manual_seed(0)
    model = _ConvNeXtBlock().eval()
    strat = _check(model, torch.randn(2, CHANNELS, HEIGHT, WIDTH), outputs_close, threads=threads,
                   work_per_tile=work)  # fmt: skip
    ops = list(strat.graph.layer_ops)
    assert ops.count("permute") == 3  # before both norms and before the downsampling conv
    assert ops.count("layer_norm") == 2 and ops.count("conv2d") == 2
    strat.close()


def test_convnext_block_propagates_nan_as_eager() -> None:
    torch.manual_seed(0)
    model = _ConvNeXtBlock().eval()
    x = torch.randn(1, CHANNELS, HEIGHT, WIDTH)
    strat = pathweave.optimize(model, x, strategy="tiles")
    assert isinstance(strat, TilesStrategy)
    x[0, 3, 4, 5] = float("nan")
    x[0, 7, 0, 0] = float("inf")
    with torch.no_grad():
        want = model(x)
    got = strat(x)
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    strat.close()


def test_swin_windows_copy_as_4d_runs(outputs_close) -> None:
    torch.manual_seed(0)
    strat = _check(_Windows().eval(), torch.randn(2, 8, 12, CHANNELS), outputs_close, threads=2,
                   work_per_tile=2e3)  # fmt: skip
    assert list(strat.graph.layer_ops).count("view") == 2  # the two window copies
    strat.close()


@pytest.mark.parametrize(("batch", "height", "width"), [(1, 2, 2), (3, 6, 10), (1, 34, 18)])
def test_mobilevit_patches_copy_as_6d_views(batch: int, height: int, width: int, outputs_close) -> None:
    """Batch 1 merges nothing but the batch away (5 dims), batch 3 keeps all 6; both copies run whole."""
    torch.manual_seed(0)
    model = _Patches().eval()
    x = torch.randn(batch, CHANNELS, height, width)
    strat = _check(model, x, outputs_close, threads=2, work_per_tile=2e3)
    ops = list(strat.graph.layer_ops)
    copies = ops.count("reshape") + ops.count("view") + ops.count("_unsafe_view")
    assert copies == (1 if height * width == 4 else 2), ops  # one patch: the fold is a view the cat reads
    x = x.contiguous(memory_format=torch.channels_last)
    x[0, 3, height - 1, width - 1] = float("nan")
    x[-1, 0, 0, 1] = float("inf")
    with torch.no_grad():
        want = model(x)
    got = strat(x)
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    strat.close()


def test_mobilevit_xs_runs_whole_as_tiles(zoo_cache, outputs_close) -> None:
    strat = TilesStrategy(zoo_cache.captured("mobilevit_xs"), threads=2)
    (x,) = zoo_cache.inputs("mobilevit_xs")
    with torch.no_grad():
        want = zoo_cache.model("mobilevit_xs")(x)
    outputs_close(strat(x), want, rtol=1e-3, atol_scale=1e-4)
    strat.close()


class _TokensToImage(torch.nn.Module):
    """SegFormer's Mix-FFN: tokens (N, H*W, C) -> transpose -> reshape to (N, C, H, W) -> depthwise conv;
    the reshape views the transposed tensor, which the convolution cannot read where it lies."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x).transpose(1, 2).reshape(x.shape[0], 32, 6, 5)
        return self.down(torch.nn.functional.gelu(self.dw(h)).flatten(2).transpose(1, 2))


def test_a_reshape_of_a_transpose_copies_for_a_convolution(outputs_close) -> None:
    torch.manual_seed(0)
    strat = _check(_TokensToImage().eval(), torch.randn(2, 30, 16), outputs_close, threads=2)
    assert "reshape" in strat.graph.layer_ops or "view" in strat.graph.layer_ops  # the copy layer
    strat.close()


class _PositionalConv(torch.nn.Module):
    """wav2vec2's positional embedding: a grouped Conv1d over the transposed hidden states."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)
        self.conv = torch.nn.Conv1d(32, 32, 9, padding=4, groups=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.fc(x).transpose(1, 2))


def test_a_conv1d_of_a_transpose_copies(outputs_close) -> None:
    torch.manual_seed(0)
    strat = _check(_PositionalConv().eval(), torch.randn(1, 17, 32), outputs_close, threads=2)
    assert "transpose" in strat.graph.layer_ops  # the copy layer before the convolution
    strat.close()


def test_a_transpose_read_in_place_stays_a_view(outputs_close) -> None:
    """A matmul and an element-wise op read any strides: no copy layer for their transposes."""
    model = torch.nn.Linear(CHANNELS, 5).eval()

    class _M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return model(x.transpose(1, 2)) + x.transpose(1, 2)[..., :1]

    strat = _check(_M().eval(), torch.randn(2, CHANNELS, 6), outputs_close, threads=1)
    assert "transpose" not in strat.graph.layer_ops
    strat.close()


class _StridedSlices(torch.nn.Module):
    """Convolutions of strided and offset slices (``x[:, :, ::2, ::2].contiguous()``: export drops the
    ``contiguous``), and an element-wise op of a slice, which reads it in place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(32, 32, 1)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.a(x)
        return self.a(y[:, :, ::2, ::2].contiguous()), self.b(y[:, 3:19, 1:7, :]), y[:, :, 1::3, ::2] * 2


def test_a_slice_copies_for_a_convolution(outputs_close) -> None:
    torch.manual_seed(0)
    model = _StridedSlices().eval()
    x = torch.randn(2, 32, 9, 8)
    strat = _check(model, x, outputs_close, threads=2)
    assert (
        list(strat.graph.layer_ops).count("slice") == 2
    )  # the convolutions' two; the multiply reads its own
    x[1, 5, 2, 2], x[0, 7, 4, 6] = float("nan"), float("inf")
    with torch.no_grad():
        for got, want in zip(strat(x), model(x), strict=True):
            assert_nonfinite_close(got, want, rtol=1e-4, atol=1e-4)
    strat.close()


def test_coalesced_merges_dims_that_step_as_one() -> None:
    base = np.zeros(1, np.float32)
    t = torch.empty(2, 3, 4, 5, 6, 7).permute(0, 1, 3, 2, 4, 5)  # Swin's window partition
    dims, strides = coalesced(View(base, 0, t.stride(), tuple(t.shape), False))
    assert dims == (6, 5, 4, 42) and strides == (t.stride(1), t.stride(2), t.stride(3), 1)
    assert coalesced(View(base, 0, (5, 1, 1), (1, 5, 1), True)) == ((5,), (1,))
    # MobileViT's unfold of a (3, 17, 6, 10) map: nothing merges, 6 dims
    t = torch.empty(3, 17, 3, 2, 5, 2).permute(0, 3, 5, 2, 4, 1)
    assert coalesced(View(base, 0, t.stride(), tuple(t.shape), False)) == (tuple(t.shape), t.stride())
