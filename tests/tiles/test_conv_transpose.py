"""tiles.conv_transpose: a transposed convolution rewritten by its phase decomposition equals eager's (any
kernel, stride, padding, output_padding, dilation, groups, bias; odd sizes; channels_last input; NaN and
Inf where eager puts them), runs whole in the tiles, and its plan refuses a decomposition that misses a
tap; the zoo U-Net then runs as one tile program. Tolerance: 1e-4 of the output's largest magnitude."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import pathweave
from pathweave import zoo
from pathweave.errors import PlanError
from pathweave.frontend.capture import capture
from pathweave.passes.pipeline import run_pipeline
from pathweave.tiles import conv_transpose
from pathweave.tiles.conv_transpose import axis
from pathweave.tiles.strategy import TilesStrategy

REL = 1e-4
#: (kernel, stride, padding, output_padding, dilation, groups, bias)
CASES = [
    (2, 2, 0, 0, 1, 1, True),  # U-Net: one 1x1 convolution and a pixel shuffle
    (4, 2, 1, 0, 1, 1, True),  # GAN / segmentation decoders
    (3, 2, 1, 1, 1, 1, False),  # phases of different tap counts
    (3, 1, 1, 0, 1, 2, True),  # stride 1: one flipped convolution
    (1, 3, 0, 2, 1, 1, True),  # phases without a tap: the bias alone
    (5, 3, 2, 1, 1, 2, True),
    (3, 2, 0, 1, 2, 1, True),  # dilation: taps of a phase 1 apart in the input
    (4, 3, 2, 2, 2, 2, True),
    (7, 2, 3, 1, 1, 1, True),
]
SIZES = (1, 3, 17, 33)


def _model(k: Any, s: Any, p: Any, op: Any, d: Any, g: int, bias: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ConvTranspose2d(4, 6, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g,
                                    bias=bias).eval()  # fmt: skip


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    finite = want.isfinite()
    assert torch.equal(got[~finite & ~want.isnan()], want[~finite & ~want.isnan()])  # the infinities
    scale = want[finite].abs().max().item() if finite.any() else 1.0
    torch.testing.assert_close(got[finite], want[finite], rtol=0, atol=REL * max(scale, 1e-6))


def _tiles(model: torch.nn.Module, x: torch.Tensor) -> TilesStrategy:
    opt = pathweave.optimize(model, x, strategy="tiles")
    assert isinstance(opt, TilesStrategy)  # the whole model in one tile program
    assert not any(conv_transpose.transposed_args(n) for n in opt.gm.graph.nodes)
    return opt


@pytest.mark.parametrize("case", CASES, ids=lambda c: "k{}s{}p{}op{}d{}g{}".format(*c))
@pytest.mark.parametrize("size", SIZES)
def test_matches_eager(case: tuple, size: int) -> None:
    model = _model(*case)
    x = torch.randn(2, 4, size, size + 2)
    want = model(x)
    if want.numel() == 0:
        pytest.skip("an empty output")
    opt = _tiles(model, x)
    with torch.no_grad():
        _close(opt(x), want)
        y = torch.randn_like(x)  # another input than the one the build checked
        _close(opt(y), model(y))


def test_channels_last_input() -> None:
    model = _model(4, 2, 1, 0, 1, 2, True)
    x = torch.randn(1, 4, 17, 33).to(memory_format=torch.channels_last)
    with torch.no_grad():
        _close(_tiles(model, x)(x), model(x))


@pytest.mark.parametrize(
    "case", [CASES[0], CASES[1], CASES[2], CASES[4]], ids=["k2s2", "k4s2", "k3s2", "k1s3"]
)
def test_nan_and_inf_propagate(case: tuple) -> None:
    """A NaN or an infinity reaches exactly the outputs eager's taps carry it to (a phase without a tap
    stays the bias)."""
    model = _model(*case)
    x = torch.randn(1, 4, 9, 11)
    opt = _tiles(model, x)
    x[0, 1, 4, 5] = float("nan")
    x[0, 2, 0, 0] = float("inf")
    x[0, 3, 8, 10] = float("-inf")
    with torch.no_grad():
        _close(opt(x), model(x))


@pytest.mark.parametrize(
    "case", [((3, 4), (2, 1), (1, 0), (1, 0), (1, 2), 2, True), ((2, 3), (3, 2), 0, (1, 0), 1, 1, True)]
)
def test_rectangular_strides_in_the_graph(case: tuple) -> None:
    """Different strides per dim cannot use pixel_shuffle: the rewritten graph still equals eager."""
    model = _model(*case)
    x = torch.randn(2, 4, 9, 7)
    captured = capture(model, x, name="ct")
    reports = run_pipeline(captured.gm, (conv_transpose,))
    assert reports[0].rewrites == 1
    with torch.no_grad():
        _close(captured.gm(x)[0], model(x))


def test_conv_transpose_as_convolution() -> None:
    """``aten.convolution`` with ``transposed`` (a .pt2 after run_decompositions) is rewritten as well."""
    model = _model(4, 2, 1, 0, 1, 1, True)
    x = torch.randn(1, 4, 5, 3)
    captured = capture(model, x, name="ct")
    for node in captured.gm.graph.nodes:
        if node.target == torch.ops.aten.conv_transpose2d.input:
            x_node, w, b = node.args[:3]
            node.target = torch.ops.aten.convolution.default
            node.args = (x_node, w, b, [2, 2], [1, 1], [1, 1], True, [0, 0], 1)
    captured.gm.recompile()
    assert len(conv_transpose.propose(captured.gm)) == 1
    run_pipeline(captured.gm, (conv_transpose,))
    with torch.no_grad():
        _close(captured.gm(x)[0], model(x))


def test_plan_covers_every_tap_once() -> None:
    for length, k, s, p, op, d in [
        (5, 4, 2, 1, 0, 1),
        (3, 3, 2, 1, 1, 1),
        (7, 5, 3, 2, 1, 2),
        (1, 1, 4, 0, 3, 1),
    ]:
        a = axis(length, k, s, p, op, d)
        a.verify()
        assert a.size == (length - 1) * s - 2 * p + d * (k - 1) + op + 1
    good = axis(5, 4, 2, 1, 0, 1)
    with pytest.raises(PlanError, match="taps"):
        dataclasses.replace(good, taps=((0, 2), (1,))).verify()
    with pytest.raises(PlanError, match="outside"):
        dataclasses.replace(good, starts=(good.starts[0] + 5, good.starts[1])).verify()


def test_runtime_weight_stays_aten() -> None:
    """A weight given at run time is not a constant to split into phases: the node is left alone."""

    class Functional(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.conv_transpose2d(x, w, stride=2)

    captured = capture(Functional(), torch.randn(1, 2, 3, 3), torch.randn(2, 3, 2, 2), name="f")
    assert conv_transpose.propose(captured.gm) == []


def test_unet_runs_whole_in_tiles() -> None:
    """The zoo U-Net's four 2x2/2 transposed convolutions were its only ops outside the tiles."""
    entry = zoo.get("unet")
    model, (x,) = entry.build().eval(), entry.example_inputs(1, True)
    opt = pathweave.optimize(model, x, strategy="tiles")
    assert isinstance(opt, TilesStrategy)
    assert opt.coverage.share == 1.0
    with torch.no_grad():
        _close(opt(x), model(x))
