"""tiles.resize and native/tile_resize.c: nearest and bilinear upsampling (sizes and scale factors,
align_corners both ways, as F.interpolate exports them) and pixel_shuffle equal eager on odd shapes,
channels_last inputs, NaN and Inf, and run inside the tile program; the source tables are eager's own
indices; a segmentation-style model (encoder, head, bilinear upsampling back) runs whole in the tiles.
Tolerance: 1e-5 of the output's largest magnitude (bilinear blends in eager's order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.analysis.ops import op_name
from pathweave.frontend.capture import capture
from pathweave.tiles.maps import bound_args
from pathweave.tiles.ops import TILE_OPS
from pathweave.tiles.resize import linear_tables, nearest_index
from pathweave.tiles.strategy import TilesStrategy
from tests.tiles.brute import dependency_mask

REL = 1e-5
#: F.interpolate keyword arguments
CASES = [
    {"scale_factor": 2, "mode": "nearest"},
    {"size": (17, 33), "mode": "nearest"},
    {"scale_factor": 1.7, "mode": "nearest"},
    {"scale_factor": (3, 0.5), "mode": "nearest"},
    {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
    {"scale_factor": 2.5, "mode": "bilinear", "align_corners": False},
    {"size": (33, 17), "mode": "bilinear", "align_corners": False},
    {"size": (33, 1), "mode": "bilinear", "align_corners": True},
    {"scale_factor": 1.5, "mode": "bilinear", "align_corners": True},
    {"size": (3, 5), "mode": "bilinear", "align_corners": False},  # shrinking
]
SIZES = (1, 3, 17)


class _Resize(torch.nn.Module):
    """A convolution (so the resize reads a layer's output), the resize, an element-wise op after it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 5, 1)
        self.kwargs = kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.conv(x), **self.kwargs) * 2.0 + 1.0


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    finite = want.isfinite()
    torch.testing.assert_close(got[~finite & ~want.isnan()], want[~finite & ~want.isnan()])
    scale = want[finite].abs().max().item() if finite.any() else 1.0
    torch.testing.assert_close(got[finite], want[finite], rtol=0, atol=REL * max(scale, 1.0))


def _tiles(model: torch.nn.Module, x: torch.Tensor) -> TilesStrategy:
    opt = pathweave.optimize(model, x, strategy="tiles")
    assert isinstance(opt, TilesStrategy)  # the resize inside the one tile program
    return opt


@pytest.mark.parametrize("kwargs", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("size", SIZES)
def test_matches_eager(kwargs: dict[str, Any], size: int) -> None:
    model = _Resize(**kwargs).eval()
    x = torch.randn(2, 3, size, size + 2)
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), model(x))
        y = torch.randn_like(x)
        _close(opt(y), model(y))


@pytest.mark.parametrize("kwargs", [CASES[2], CASES[5], CASES[8]], ids=["nearest", "bilinear", "corners"])
def test_channels_last_input(kwargs: dict[str, Any]) -> None:
    class Direct(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, **kwargs) + 1.0

    x = torch.randn(1, 4, 17, 33).to(memory_format=torch.channels_last)
    model = Direct()
    with torch.no_grad():
        _close(_tiles(model, x)(x), model(x))


@pytest.mark.parametrize("kwargs", [CASES[0], CASES[4], CASES[8]], ids=["nearest", "bilinear", "corners"])
def test_nan_and_inf_propagate(kwargs: dict[str, Any]) -> None:
    model = _Resize(**kwargs).eval()
    x = torch.randn(1, 3, 9, 11)
    opt = _tiles(model, x)
    x[0, :, 4, 5] = float("nan")
    x[0, :, 0, 0] = float("inf")
    x[0, :, 8, 10] = float("-inf")
    with torch.no_grad():
        _close(opt(x), model(x))


@pytest.mark.parametrize("n", (1, 3, 17, 33))
@pytest.mark.parametrize("m", (1, 2, 5, 34, 66, 100))
def test_nearest_table_is_eagers(n: int, m: int) -> None:
    """Eager's nearest upsampling of a ramp reads back the source index of every output."""
    ramp = torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1)
    for scale in (None, m / n, m / n + 0.01):
        if scale is not None and int(n * scale) != m:
            continue
        kwargs = {"size": (m, 1)} if scale is None else {"scale_factor": (scale, 1.0)}
        want = F.interpolate(ramp, mode="nearest", **kwargs).reshape(-1).long().numpy()
        np.testing.assert_array_equal(nearest_index(n, m, scale), want)


@pytest.mark.parametrize("align", (False, True))
@pytest.mark.parametrize("n", (1, 3, 17))
@pytest.mark.parametrize("m", (1, 4, 33, 51))
def test_linear_table_reproduces_eager(align: bool, n: int, m: int) -> None:
    """The tables blend a 1-D signal exactly as eager's bilinear upsampling does along that dim."""
    x = torch.randn(1, 1, n, 1)
    want = F.interpolate(x, size=(m, 1), mode="bilinear", align_corners=align).reshape(-1).numpy()
    index, weights = linear_tables(n, m, align, None)
    v = x.reshape(-1).numpy()
    np.testing.assert_allclose(v[index[:, 0]] * weights[:, 0] + v[index[:, 1]] * weights[:, 1], want,
                               rtol=1e-6, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("r", (1, 2, 3))
@pytest.mark.parametrize("size", (1, 3, 17))
def test_pixel_shuffle(r: int, size: int) -> None:
    class Shuffle(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 4 * r * r, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.pixel_shuffle(self.conv(x), r)

    model, x = Shuffle().eval(), torch.randn(2, 3, size, size + 2)
    with torch.no_grad():
        _close(_tiles(model, x)(x), model(x))


class _Segmenter(torch.nn.Module):
    """A small segmentation net: a strided encoder, a head, logits upsampled back to the input size."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        )  # fmt: skip
        self.head = torch.nn.Conv2d(32, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.enc(x))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def test_segmentation_model_runs_whole() -> None:
    model, x = _Segmenter().eval(), torch.randn(1, 3, 65, 47)
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), model(x))


_RESIZE_OPS = {"upsample_nearest2d", "upsample_bilinear2d", "pixel_shuffle"}


def _op(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.fx.Node, Any]:
    """The captured graph's one resize node, and its range map's window."""
    captured = capture(model, x, name="resize")
    node = next(n for n in captured.gm.graph.nodes if n.op == "call_function" and op_name(n) in _RESIZE_OPS)
    ((source, window),) = TILE_OPS[op_name(node)].maps(node, bound_args(node))
    assert source.op == "placeholder"
    return node, window


class _Functional(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


_FUNCTIONS = [
    *[lambda x, kw=kw: F.interpolate(x, **kw) for kw in CASES],
    lambda x: F.pixel_shuffle(x, 2),
    lambda x: F.pixel_shuffle(x, 3),
]


@pytest.mark.parametrize("fn", _FUNCTIONS, ids=[*(str(i) for i in range(len(CASES))), "shuffle2", "shuffle3"])
def test_range_map_covers_every_read(fn: Any) -> None:
    """Each output element's mapped input region holds every input element it depends on (a NaN set
    there reaches it: bilinear's zero weights included)."""
    x = torch.randn(1, 36, 3, 4)
    node, window = _op(_Functional(fn), x)
    mask = dependency_mask(fn, [x], 0)
    out_shape = tuple(node.meta["val"].shape)
    for o, index in enumerate(np.ndindex(*out_shape)):
        region = window(tuple((i, i + 1) for i in index))
        for i in np.nonzero(mask[o])[0]:
            pos = np.unravel_index(i, x.shape)
            assert all(lo <= p < hi for p, (lo, hi) in zip(pos, region, strict=True)), (index, pos, region)


@pytest.mark.parametrize("fn", _FUNCTIONS, ids=[*(str(i) for i in range(len(CASES))), "shuffle2", "shuffle3"])
def test_many_small_tiles(fn: Any) -> None:
    """Many small tiles (a row or a few each, a channel's rows split between tiles) give eager's result."""
    model, x = _Functional(fn), torch.randn(1, 36, 7, 9)
    captured = capture(model, x, name="resize")
    many = {
        n.name: 97 for n in captured.gm.graph.nodes if n.op == "call_function" and op_name(n) in _RESIZE_OPS
    }
    tiles = TilesStrategy(captured, threads=2, tiles_per_layer=lambda n: many.get(n.name, 1))
    assert max(tiles.graph.layer_tile_start[1:] - tiles.graph.layer_tile_start[:-1]) > 8
    with torch.no_grad():
        _close(tiles(x), model(x))
