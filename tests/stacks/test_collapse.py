"""BrainSlug's stacks: detection on small graphs, generated kernels against eager, no compiler."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pathweave.errors import UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.passes.pipeline import run_pipeline
from pathweave.stacks import collapse as stacks
from pathweave.stacks.module import StackModule

#: the kernels fold batch norm into one multiply-add: float rounding differs from eager's
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "stack-cache"))


def _bn(c: int, seed: int) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(c)
    bn.running_mean.copy_(torch.rand(c, generator=g) * 2 - 1)
    bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
    bn.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
    bn.bias.data.copy_(torch.rand(c, generator=g) - 0.5)
    return bn


class Mixed(nn.Module):
    """conv -> [pool, bn, relu] -> conv -> relu (one layer: no stack) -> + skip -> [pool, relu6]."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.pool, self.bn = nn.MaxPool2d(3, 2, 1), _bn(8, 0)
        self.pool2 = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.pool(self.c1(x))))
        z = torch.relu(self.c2(y)) + y
        return nn.functional.relu6(self.pool2(z))


def _ops(gm: torch.fx.GraphModule, stack: stacks.Stack) -> list[str]:
    nodes = {n.name: n for n in gm.graph.nodes}
    return [nodes[n].target._opname for n in stack.nodes]


def test_detection_finds_the_maximal_chains() -> None:
    x = torch.randn(1, 3, 15, 15)
    gm = capture(Mixed().eval(), x).gm
    found = stacks.propose(gm)
    assert [_ops(gm, s) for s in found] == [["max_pool2d", "batch_norm", "relu"], ["avg_pool2d", "relu6"]]
    first = found[0]
    assert [(s.pool is not None, len(s.ops)) for s in first.steps] == [(True, 2)]
    assert first.in_shape == (1, 8, 15, 15) and first.out_shape == (1, 8, 8, 8)


class Branchy(nn.Module):
    """The pool's output is read twice, so the chain stops there; relu -> *2 -> +1 is one stack."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = nn.functional.max_pool2d(x, 3, 1, 1)
        return torch.relu(p) * 2.0 + 1.0, p.sigmoid()


def test_a_value_read_twice_ends_the_chain() -> None:
    gm = capture(Branchy(), torch.randn(1, 4, 9, 9)).gm
    found = stacks.propose(gm)
    assert [_ops(gm, s) for s in found] == [["relu", "mul", "add"]]
    assert [(s.pool, len(s.ops)) for s in found[0].steps] == [(None, 3)]


class Chain(nn.Module):
    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


CASES = {
    "pool_bn_relu x3": lambda c: [m for i in range(3) for m in (nn.MaxPool2d(3, 1, 1), _bn(c, i), nn.ReLU())],
    "stride 2, ceil": lambda c: [nn.MaxPool2d(3, 2, 1, ceil_mode=True), _bn(c, 1), nn.ReLU6()],
    "dilation": lambda c: [nn.MaxPool2d(3, 1, 1, dilation=2), nn.ReLU(), nn.MaxPool2d(2)],
    "avg, pad counted": lambda c: [nn.AvgPool2d(3, 2, 1), _bn(c, 2), nn.ReLU()],
    "avg, pad not counted, ceil": lambda c: [
        nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
        nn.Hardtanh(-0.5, 0.5),
    ],  # fmt: skip
    "avg, divisor": lambda c: [nn.AvgPool2d(2, divisor_override=3), nn.ReLU()],
    "bn, relu, no pool": lambda c: [_bn(c, 3), nn.ReLU()],
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("max_steps", [1, None])
def test_kernels_match_eager(case: str, layout: str, max_steps: int | None, outputs_close) -> None:
    c = 5
    model = Chain(*CASES[case](c)).eval()
    x = torch.randn(2, c, 17, 13, generator=torch.Generator().manual_seed(0))
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    gm = capture(model, x).gm
    found = stacks.propose(gm)
    assert len(found) == 1 and found[0].layers == len(CASES[case](c))
    run_pipeline(gm, (stacks.Policy(max_steps),))
    assert sum(isinstance(m, StackModule) for m in gm.modules()) == 1
    with torch.no_grad():
        want = model(x)
        got = gm(x)[0]
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_nan_passes_through_max_pooling_like_eager() -> None:
    x = torch.randn(1, 4, 7, 7)
    x[0, 1, 3, 3] = float("nan")
    model = Chain(nn.MaxPool2d(3, 1, 1), nn.ReLU()).eval()
    gm = capture(model, x).gm
    run_pipeline(gm, (stacks.Policy(),))
    torch.testing.assert_close(gm(x)[0], model(x), equal_nan=True)


def test_no_compiler_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path))
    gm = capture(Chain(nn.MaxPool2d(3, 1, 1), nn.ReLU()).eval(), torch.randn(1, 4, 8, 8)).gm
    with pytest.raises(UnsupportedError, match="need a C compiler.*no-such-compiler-xyz"):
        run_pipeline(gm, (stacks.Policy(),))


def test_optimize_stacks_on_the_synthetic_network(outputs_close) -> None:
    from pathweave import optimize
    from pathweave.stacks.strategy import StacksStrategy
    from pathweave.zoo.load import load_model

    loaded = load_model("poolstack:4", batch=2, small=True)
    fast = optimize(loaded.model, *loaded.inputs, strategy="stacks")
    assert isinstance(fast, StacksStrategy) and len(fast.stacks) == 1
    assert "1 stacks, 4 steps" in fast.summary()
    with torch.no_grad():
        outputs_close(fast(*loaded.inputs), loaded.model(*loaded.inputs), 1e-4, 1e-5)


def test_stacks_without_a_compiler_fall_back_loudly(monkeypatch, tmp_path, outputs_close) -> None:
    from pathweave import optimize
    from pathweave.zoo.load import load_model

    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path))
    loaded = load_model("poolstack:2", small=True)
    with pytest.warns(UserWarning, match="stacks not used.*C compiler"):
        fast = optimize(loaded.model, *loaded.inputs, strategy="stacks")
    assert fast.stacks == []
    with torch.no_grad():
        outputs_close(fast(*loaded.inputs), loaded.model(*loaded.inputs), 1e-4, 1e-5)
