"""run_pipeline: propose, apply and lint each pass in order; reports what each rewrote."""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

from pathweave.errors import PlanError
from pathweave.frontend.capture import capture
from pathweave.passes import channels_last, fold_bn, fuse_conv
from pathweave.passes.pipeline import FAST_CPU, PassReport, run_pipeline

BASE = (fold_bn, fuse_conv, channels_last)


class Block(nn.Module):
    """conv-bn-relu twice with a residual, like a ResNet basic block."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


@pytest.fixture
def block():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Block().eval()
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        x = torch.randn(1, 4, 8, 8)
    return capture(model, x), x


def test_reports_and_outputs(block) -> None:
    captured, x = block
    gm = copy.deepcopy(captured.gm)
    reports = run_pipeline(gm, BASE)
    assert reports == [PassReport("fold_bn", 2), PassReport("fuse_conv", 2), PassReport("channels_last", 1)]
    gm.graph.lint()
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert ops == {"aten.clone.default", "mkldnn._convolution_pointwise.default",
                   "mkldnn._convolution_pointwise.binary", "aten.relu.default"}  # fmt: skip
    # the original and folded-but-unpacked weights are gone: packed weights and folded biases stay
    buffers = {name for name, _ in gm.named_buffers()}
    assert buffers == {"conv2d_packed", "conv2d_b", "conv2d_1_packed", "conv2d_1_b"}
    with torch.no_grad():
        (got,), (want,) = gm(x), captured.gm(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_fast_cpu_pipeline(block) -> None:
    """Whatever FAST_CPU holds today: one report per pass, in order, and the same outputs."""
    captured, x = block
    gm = copy.deepcopy(captured.gm)
    reports = run_pipeline(gm, FAST_CPU)
    assert [r.name for r in reports] == [p.__name__.rsplit(".", 1)[-1] for p in FAST_CPU]
    assert sum(r.rewrites for r in reports) > 0
    with torch.no_grad():
        (got,), (want,) = gm(x), captured.gm(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_pipeline_is_deterministic(block) -> None:
    captured, _ = block
    a, b = copy.deepcopy(captured.gm), copy.deepcopy(captured.gm)
    assert run_pipeline(a, BASE) == run_pipeline(b, BASE)
    assert a.code == b.code


def test_broken_pass_raises_plan_error(block) -> None:
    captured, _ = block
    broken = types.ModuleType("pathweave.passes.broken")

    def apply(gm, matches) -> None:  # moves the first op after the output: a use before its definition
        first = next(n for n in gm.graph.nodes if n.op == "call_function")
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.append(first)

    broken.propose = lambda gm: ["move"]
    broken.apply = apply
    with pytest.raises(PlanError, match="pass broken left an invalid graph"):
        run_pipeline(copy.deepcopy(captured.gm), (broken,))
