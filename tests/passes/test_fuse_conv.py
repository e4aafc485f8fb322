"""fuse_conv: conv2d (+ residual add) (+ activation but ReLU) as one oneDNN kernel with prepacked weights."""

from __future__ import annotations

import copy

import torch
from torch import nn

from pathweave.frontend.capture import capture
from pathweave.passes import fuse_conv
from pathweave.passes.fuse_conv import FuseConv
from pathweave.passes.pipeline import apply_pass
from pathweave.sequential import SequentialExecutor

RTOL = 1e-4
_mkldnn = torch.ops.mkldnn


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Residual(nn.Module):
    """relu(conv2(relu(conv1(x))) + x): the add is fused into conv2 as a binary post-op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + x)


class AddOfTwoConvs(nn.Module):
    """relu(conv_a(x) + conv_b(x)): the add can be fused once only."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x) + self.b(x))


class ConvTwoUsers(nn.Module):
    """The conv output is read by its relu and by the second output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return torch.relu(y), y * 2


class Activations(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(4, 4, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.convs
        return torch.sigmoid(c[0](x)), torch.tanh(c[1](x)), nn.functional.silu(c[2](x)), c[3](x) * 3


def _capture(model: nn.Module, shape: tuple[int, ...]):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model.eval()
        x = torch.randn(*shape)
    return capture(model, x), x


def _fused(captured, matches):
    gm = copy.deepcopy(captured.gm)
    apply_pass(gm, fuse_conv, matches)
    return gm


def _assert_same(gm, captured, x) -> None:
    with torch.no_grad():
        got, want = gm(x), captured.gm(x)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=RTOL * w.abs().max().item())


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_conv_relu_keeps_its_relu() -> None:
    """oneDNN's ReLU post-op maps NaN to 0 where torch.relu keeps it: the ReLU stays outside."""
    captured, x = _capture(ConvRelu(), (2, 3, 8, 8))
    matches = fuse_conv.propose(captured.gm)
    assert matches == [FuseConv("conv2d", None, None, None, "none")]
    gm = _fused(captured, matches)
    assert _targets(gm) == [_mkldnn._convolution_pointwise.default, torch.ops.aten.relu.default]
    _assert_same(gm, captured, x)
    x[0, 0, 3, 3] = float("nan")
    with torch.no_grad():
        (got,), (want,) = gm(x), captured.gm(x)
    assert want.isnan().any() and torch.equal(got.isnan(), want.isnan())


def test_residual_add_is_fused() -> None:
    captured, x = _capture(Residual(), (1, 4, 8, 8))
    matches = fuse_conv.propose(captured.gm)
    assert matches == [
        FuseConv("conv2d", None, None, None, "none"),
        FuseConv("conv2d_1", "add", "x", None, "none"),
    ]
    gm = _fused(captured, matches)
    relu = torch.ops.aten.relu.default
    assert _targets(gm) == [_mkldnn._convolution_pointwise.default, relu,
                            _mkldnn._convolution_pointwise.binary, relu]  # fmt: skip
    _assert_same(gm, captured, x)


def test_add_of_two_convs_is_fused_once() -> None:
    captured, x = _capture(AddOfTwoConvs(), (1, 4, 8, 8))
    matches = fuse_conv.propose(captured.gm)
    assert matches == [
        FuseConv("conv2d", "add", "conv2d_1", None, "none"),
        FuseConv("conv2d_1", None, None, None, "none"),
    ]
    gm = _fused(captured, matches)
    assert sorted(map(str, _targets(gm))) == sorted(
        map(str, [_mkldnn._convolution_pointwise.default, _mkldnn._convolution_pointwise.binary,
                  torch.ops.aten.relu.default])
    )  # fmt: skip
    _assert_same(gm, captured, x)


def test_conv_with_two_users_keeps_its_relu() -> None:
    captured, x = _capture(ConvTwoUsers(), (1, 3, 8, 8))
    matches = fuse_conv.propose(captured.gm)
    assert matches == [FuseConv("conv2d", None, None, None, "none")]
    gm = _fused(captured, matches)
    assert torch.ops.aten.relu.default in _targets(gm)
    _assert_same(gm, captured, x)


def test_other_activations() -> None:
    captured, x = _capture(Activations(), (1, 4, 6, 6))
    matches = fuse_conv.propose(captured.gm)
    assert [m.attr for m in matches] == ["sigmoid", "tanh", "swish", "none"]
    assert [m.unary for m in matches] == ["sigmoid", "tanh", "silu", None]
    _assert_same(_fused(captured, matches), captured, x)


def test_nothing_to_fuse_without_conv() -> None:
    captured, _ = _capture(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (2, 4))
    assert fuse_conv.propose(captured.gm) == []


def test_float64_conv_is_left_alone() -> None:
    model = ConvRelu().double()
    captured = capture(model.eval(), torch.randn(1, 3, 8, 8, dtype=torch.float64))
    assert fuse_conv.propose(captured.gm) == []


def test_fuse_conv_leaves_scaled_adds_alone() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.add(self.conv(x), x, alpha=2)

    captured = capture(Scaled().eval(), torch.randn(1, 3, 4, 4))
    assert [m.add for m in fuse_conv.propose(captured.gm)] == [None]
    ex = SequentialExecutor(captured)
    assert ex.passes and any(p.name == "fuse_conv" and p.rewrites == 1 for p in ex.passes)
