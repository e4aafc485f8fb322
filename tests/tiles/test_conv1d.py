"""tiles.conv1d: 1-D convolutions (plain, strided, padded, dilated, grouped, "same"/"valid", transposed)
rewritten as unit-height 2-D ones equal eager's and run whole in the tiles; an odd "same" padding stays
an ATen node; a small 1-D CNN (a wav2vec2-like stem, a causal convolution) runs as one tile program.
Tolerance: 1e-4 of the output's largest magnitude."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.frontend.capture import capture
from pathweave.tiles import conv1d
from pathweave.tiles.strategy import TilesStrategy

REL = 1e-4
#: Conv1d keyword arguments (in 6 channels, out 4 unless "out" says)
CASES = [
    {"kernel_size": 3},
    {"kernel_size": 10, "stride": 5},
    {"kernel_size": 3, "padding": 2, "dilation": 2, "groups": 2},
    {"kernel_size": 5, "padding": "same", "bias": False},
    {"kernel_size": 4, "padding": "valid", "stride": 3},
    {"kernel_size": 3, "padding": 1, "groups": 6, "out": 6},  # depthwise
    {"kernel_size": 1},
]
SIZES = (1, 3, 17, 33)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    finite = want.isfinite()
    torch.testing.assert_close(got[~finite & ~want.isnan()], want[~finite & ~want.isnan()])
    scale = want[finite].abs().max().item() if finite.any() else 1.0
    torch.testing.assert_close(got[finite], want[finite], rtol=0, atol=REL * max(scale, 1e-6))


def _tiles(model: torch.nn.Module, x: torch.Tensor) -> TilesStrategy:
    opt = pathweave.optimize(model, x, strategy="tiles")
    assert isinstance(opt, TilesStrategy)
    assert conv1d.propose(opt.gm) == []  # no 1-D convolution left
    return opt


def _conv(case: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs = {k: v for k, v in case.items() if k != "out"}
    return torch.nn.Conv1d(6, case.get("out", 4), **kwargs).eval()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("length", SIZES)
def test_matches_eager(case: dict[str, Any], length: int) -> None:
    model = _conv(case)
    x = torch.randn(2, 6, length)
    reach = (case.get("dilation", 1) * (case["kernel_size"] - 1)) + 1
    padding = case.get("padding", 0)
    if padding != "same" and length + 2 * (padding if isinstance(padding, int) else 0) < reach:
        pytest.skip("input shorter than the kernel")
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), model(x))
        y = torch.randn_like(x)
        _close(opt(y), model(y))


@pytest.mark.parametrize("length", (1, 17))
def test_transposed(length: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.ConvTranspose1d(
        6, 4, 4, stride=2, padding=1, output_padding=1, dilation=1, groups=2
    ).eval()
    x = torch.randn(2, 6, length)
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), model(x))


def test_nan_and_inf_propagate() -> None:
    model = _conv({"kernel_size": 3, "padding": 1, "stride": 2})
    x = torch.randn(1, 6, 17)
    opt = _tiles(model, x)
    x[0, 1, 4], x[0, 2, 0], x[0, 3, 16] = float("nan"), float("inf"), float("-inf")
    with torch.no_grad():
        _close(opt(x), model(x))


def test_odd_same_padding_stays_aten() -> None:
    """An even kernel with ``padding="same"`` pads one more after than before: no 2-D padding says so."""
    model = torch.nn.Conv1d(3, 3, 4, padding="same").eval()
    captured = capture(model, torch.randn(1, 3, 9), name="same")
    assert conv1d.propose(captured.gm) == []


class _Audio(torch.nn.Module):
    """A wav2vec2-like feature stem, a grouped dilated block, a causal convolution (padded, then cut)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv1d(1, 16, 10, stride=5)
        self.block = torch.nn.Conv1d(16, 16, 3, stride=2, padding=2, dilation=2, groups=4)
        self.causal = torch.nn.Conv1d(16, 8, 3, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.stem(x))
        h = F.relu(self.block(h))
        return self.causal(h)[..., : h.shape[-1]]


def test_small_1d_cnn_runs_whole() -> None:
    torch.manual_seed(0)
    model, x = _Audio().eval(), torch.randn(2, 1, 400)
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), model(x))
