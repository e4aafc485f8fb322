"""The element-wise kernel's activations and maths (native/tile_act.c) against eager PyTorch: odd shapes,
strided and channels_last inputs, NaN and +-inf where eager gives them, and as convolution and linear
epilogues (``fuse_epilogue``)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles import fuse_epilogue

Fn = Callable[[torch.Tensor], torch.Tensor]
SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 100.0, -100.0, 1e-30, -1e-30, 88.8, -104.0, 3.0, -3.0]

#: ops whose kernel computes eager's formula exactly (clamps, selects, IEEE sqrt and division)
EXACT: dict[str, Fn] = {
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "relu6": lambda x: torch.nn.ReLU6()(x),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 3.0),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "clamp": lambda x: x.clamp(-1.0, 2.0),
    "clamp_reversed": lambda x: x.clamp(2.0, 1.0),
    "clamp_min": lambda x: x.clamp_min(0.5),
    "clamp_max": lambda x: x.clamp(max=0.5),
    "neg": torch.neg,
    "abs": torch.abs,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "square": torch.square,
    "pow_2": lambda x: x**2,
    "pow_3": lambda x: x**3,
    "pow_minus_2": lambda x: x**-2,
    "pow_0": lambda x: x**0,
    "sign": torch.sign,
    "maximum": lambda x: torch.maximum(x, -0.5 * x),
    "minimum": lambda x: torch.minimum(x, x[:1]),
}
#: ops whose kernel approximates (tile_math.h, libm's powf) where eager uses SLEEF; eager's sqrt is SLEEF's
#: too, and 1 ulp off the correctly rounded one the kernel gives
APPROXIMATE: dict[str, Fn] = {
    "sqrt": torch.sqrt,
    "pow_half": lambda x: x**0.5,
    "silu": F.silu,
    "elu": F.elu,
    "elu_scaled": lambda x: torch.ops.aten.elu(x, 0.5, 2.0, 1.5),
    "exp": torch.exp,
    "log": torch.log,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "pow_1_7": lambda x: x**1.7,
}
#: rtol, atol of the approximated ops: a few float ulps (the kernels' bound is about 3e-7 relative)
RTOL, ATOL = 2e-6, 1e-6


class _Apply(torch.nn.Module):
    def __init__(self, fn: Fn, layout: str = "contiguous") -> None:
        super().__init__()
        self.fn, self.layout = fn, layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layout == "transposed":  # the kernel reads x through its strides
            x = x.transpose(0, -1)
        return self.fn(x * 1.0)


def _input(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Normal values times 4, eager's special values first, and a few large ones for sin and cos."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 4
    flat = x.view(-1)
    specials = torch.tensor([*SPECIALS, 1e6, -3e7])[: flat.numel()]
    flat[: len(specials)] = specials
    return x


def _tiles(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a layer left outside the tiles would warn
        fn = pathweave.optimize(model.eval(), x, strategy="tiles")
    return fn(x)


def _check(fn: Fn, x: torch.Tensor, exact: bool, layout: str = "contiguous") -> None:
    model = _Apply(fn, layout)
    got, want = _tiles(model, x), model(x)
    rtol, atol = (0.0, 0.0) if exact else (RTOL, ATOL)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_ops_match_eager_bit_for_bit(name: str) -> None:
    for shape in ((1,), (3, 17), (2, 33)):
        _check(EXACT[name], _input(shape), exact=True)


@pytest.mark.parametrize("name", sorted(APPROXIMATE))
def test_approximated_ops_match_eager_within_float_ulps(name: str) -> None:
    for shape in ((1,), (3, 17), (2, 33)):
        _check(APPROXIMATE[name], _input(shape), exact=False)


@pytest.mark.parametrize("name", ["silu", "hardswish", "clamp", "exp", "log", "maximum"])
def test_strided_and_channels_last_inputs(name: str) -> None:
    fn, exact = (EXACT[name], True) if name in EXACT else (APPROXIMATE[name], False)
    _check(fn, _input((3, 1, 5, 17)), exact, layout="transposed")
    _check(fn, _input((1, 3, 5, 17)).to(memory_format=torch.channels_last), exact)


def test_the_approximations_over_their_whole_range() -> None:
    """e^x into the subnormals and to +inf, ln x of subnormals, erf around 1, sin and cos up to 1e5."""
    x = torch.cat(
        [torch.linspace(-110, 90, 4001), torch.logspace(-44, 38, 999), torch.linspace(-1.2, 1.2, 999)]
    )
    for fn in (torch.exp, torch.log, torch.erf, F.silu, F.elu):
        _check(fn, x, exact=False)
    trig = torch.linspace(-1e5, 1e5, 4001)
    for fn in (torch.sin, torch.cos):
        torch.testing.assert_close(_tiles(_Apply(fn), trig), fn(trig), rtol=0, atol=ATOL)


def test_ops_left_to_aten_are_refused_as_the_kernels_cannot_take_them() -> None:
    """A tensor exponent or clamp bound stays outside the tiles (a warning), never a wrong result."""
    x = _input((3, 17))
    model = _Apply(lambda t: torch.pow(t.abs(), t))
    with pytest.warns(UserWarning, match="pow"):
        fn = pathweave.optimize(model.eval(), x, strategy="tiles")
    torch.testing.assert_close(fn(x), model(x), equal_nan=True)


def test_elu_with_a_negative_input_scale_stays_in_aten() -> None:
    """The kernel's expm1 takes arguments <= 0; a negative input_scale would feed it positive ones."""
    model = _Apply(lambda t: torch.ops.aten.elu(t, 1.0, 1.0, -1.0))
    with pytest.warns(UserWarning, match="elu"):
        fn = pathweave.optimize(model.eval(), _input((3, 17)), strategy="tiles")
    x = torch.tensor([-100.0, -200.0, -1e4, -float("inf"), 0.5]).repeat(11)[:51].reshape(3, 17)
    torch.testing.assert_close(fn(x), model(x))  # +inf where eager has it


@pytest.mark.parametrize(
    "act", [torch.nn.SiLU, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.ReLU6, torch.nn.LeakyReLU]
)
def test_activations_in_small_models(act: type[torch.nn.Module]) -> None:
    """conv -> act -> depthwise conv -> act, and linear -> act -> linear -> act, end to end."""
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), act(), torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), act()
    )
    mlp = torch.nn.Sequential(torch.nn.Linear(33, 64), act(), torch.nn.Linear(64, 17), act())
    for model, x in ((cnn, torch.randn(1, 3, 17, 33)), (mlp, torch.randn(3, 33))):
        torch.testing.assert_close(_tiles(model, x), model.eval()(x), rtol=1e-5, atol=1e-5)


def test_parameter_free_activations_fuse_into_epilogues() -> None:
    """silu, hardswish, hardsigmoid and ReLU6 join the convolution's epilogue; another hardtanh does not."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 1), torch.nn.SiLU(), torch.nn.Conv2d(8, 8, 1), torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 1), torch.nn.Hardswish(), torch.nn.Conv2d(8, 8, 1), torch.nn.Hardtanh(-2.0),
    )  # fmt: skip
    gm = pathweave.capture(model.eval(), torch.randn(1, 3, 5, 7)).gm
    acts = [m.act_name for m in fuse_epilogue.propose(gm)]
    assert acts == ["silu", "relu6", "hardswish"]


def test_gelu_tanh_of_huge_negatives_is_zero_as_eager() -> None:
    """Eager's 1 + tanh(u) is 0 once tanh rounds to -1; the tiles' x / (1 + e^-2u) with e^x clamped at e^88
    gave -1.8 at x = -3e38 (found by a hostile test)."""
    model = _Apply(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))
    fn = pathweave.optimize(model.eval(), _input((3, 17)), strategy="tiles")
    x = _input((3, 17))
    x[0, :8] = torch.tensor([-3.0e38, -3.4e38, -1e38, -1e30, -1e12, -100.0, -12.0, 3e38])
    torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-6)


def test_gelu_overflows_where_eager_does() -> None:
    """Eager computes x (1 + erf(x / sqrt 2)) before halving: above FLT_MAX / 2 that is +inf."""
    model = _Apply(torch.nn.functional.gelu)
    fn = pathweave.optimize(model.eval(), _input((3, 17)), strategy="tiles")
    x = torch.zeros(3, 17)
    x[0, :4] = torch.tensor([3.4e38, 2e38, -3.4e38, 1.5e38])
    torch.testing.assert_close(fn(x), model(x))
