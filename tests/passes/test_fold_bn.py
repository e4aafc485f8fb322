"""fold_bn: inference batch norm folded into the convolution that feeds it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from pathweave.frontend.capture import capture
from pathweave.passes import fold_bn
from pathweave.passes.fold_bn import FoldBN
from pathweave.passes.pipeline import apply_pass

RTOL, ATOL = 1e-4, 1e-5
_BN = torch.ops.aten._native_batch_norm_legit_no_training.default
_BN_PLAIN = torch.ops.aten.batch_norm.default


def _randomise_stats(model: nn.Module) -> None:
    """Non-trivial running statistics and affine terms, so folding changes the weights."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            if m.affine:
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.5, 0.5)


class ConvBnRelu(nn.Module):
    """With an in-place relu (as torchvision writes it) export emits batch norm as a tuple op read by
    getitem; without, as one aten.batch_norm. Both forms fold."""

    def __init__(self, bias: bool = True, affine: bool = True, inplace: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(6, affine=affine)
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class ConvUsedTwice(nn.Module):
    """The conv output also feeds the result: folding would change that second use."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.relu(self.bn(y)) + y


class BnFirst(nn.Module):
    """Batch norm on the input, then a conv: nothing to fold into."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.relu = nn.ReLU(inplace=inplace)
        self.conv = nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.relu(self.bn(x)))


def _capture(model: nn.Module):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model.eval()
        _randomise_stats(model)
        x = torch.randn(2, 3, 8, 8)
    return capture(model, x), x


def _apply(captured, matches):
    gm = copy.deepcopy(captured.gm)
    apply_pass(gm, fold_bn, matches)
    return gm


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("inplace", [True, False])
def test_folds_conv_bn(bias: bool, affine: bool, inplace: bool) -> None:
    captured, x = _capture(ConvBnRelu(bias, affine, inplace))
    bn_op, bn_name = (_BN, "_native_batch_norm_legit_no_training") if inplace else (_BN_PLAIN, "batch_norm")
    assert any(n.target == bn_op for n in captured.gm.graph.nodes)
    matches = fold_bn.propose(captured.gm)
    assert matches == [FoldBN("conv2d", bn_name)]
    gm = _apply(captured, matches)
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == [
        "aten.conv2d.default",
        "aten.relu.default",
    ]
    with torch.no_grad():
        torch.testing.assert_close(gm(x), captured.gm(x), rtol=RTOL, atol=ATOL)
        other = torch.randn_like(x)
        torch.testing.assert_close(gm(other), captured.gm(other), rtol=RTOL, atol=ATOL)


def test_propose_is_pure() -> None:
    captured, _ = _capture(ConvBnRelu())
    before = captured.gm.code
    assert fold_bn.propose(captured.gm) == fold_bn.propose(captured.gm)
    assert captured.gm.code == before


@pytest.mark.parametrize("inplace", [True, False])
def test_conv_with_two_users_is_not_folded(inplace: bool) -> None:
    captured, _ = _capture(ConvUsedTwice(inplace))
    assert any(n.target in (_BN, _BN_PLAIN) for n in captured.gm.graph.nodes)  # the pattern is there
    assert fold_bn.propose(captured.gm) == []


@pytest.mark.parametrize("inplace", [True, False])
def test_bn_without_conv_is_not_folded(inplace: bool) -> None:
    captured, _ = _capture(BnFirst(inplace))
    assert any(n.target in (_BN, _BN_PLAIN) for n in captured.gm.graph.nodes)
    assert fold_bn.propose(captured.gm) == []
