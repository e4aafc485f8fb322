import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pathweave.frontend.capture import capture
from pathweave.passes import dedupe
from pathweave.passes.pipeline import run_pipeline
from pathweave.passes.util import aten


class Branches(nn.Module):
    """NASNet-style: each branch applies its own relu to the same input, two pad and pool it alike."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p1 = F.avg_pool2d(F.pad(torch.relu(x), (1, 1, 1, 1)), 3, 1, count_include_pad=False)
        p2 = F.avg_pool2d(F.pad(torch.relu(x), (1, 1, 1, 1)), 3, 1, count_include_pad=False)
        p3 = F.avg_pool2d(F.pad(torch.relu(x), (1, 1, 1, 1)), 3, 1, count_include_pad=True)  # another pool
        return (
            self.a(torch.relu(x)) + self.b(torch.relu(x)) + self.b(p1) - self.b(p2) + p3.sum(1, keepdim=True)
        )


def _ops(gm: torch.fx.GraphModule, name: str) -> int:
    return sum(n.op == "call_function" and str(n.target).startswith(f"aten.{name}.") for n in gm.graph.nodes)


@pytest.mark.parametrize("shape", [(1, 3, 1, 1), (1, 3, 17, 33), (2, 3, 3, 17)])
def test_repeats_are_computed_once_with_the_same_result(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = Branches().eval()
    x = torch.randn(shape)
    captured = capture(model, x)
    relus, pools = _ops(captured.gm, "relu"), _ops(captured.gm, "avg_pool2d")
    assert relus == 5 and pools == 3
    run_pipeline(captured.gm, (dedupe,))
    assert _ops(captured.gm, "relu") == 1
    assert _ops(captured.gm, "avg_pool2d") == 2  # the chain pad -> pool merged; count_include_pad differs
    assert _ops(captured.gm, "constant_pad_nd") + _ops(captured.gm, "pad") == 1
    for seed in range(2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        x[0, 0, 0, 0] = float("nan")
        with torch.no_grad():
            got, want = captured.gm(x)[0], model(x)
        torch.testing.assert_close(got, want, equal_nan=True)


def _graph(build) -> torch.fx.GraphModule:  # noqa: ANN001 - build(graph, x) returns the outputs
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(build(g, x))
    return torch.fx.GraphModule(nn.Module(), g)


def test_a_graph_with_an_in_place_op_is_left_alone() -> None:
    def build(g: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
        a, b = g.call_function(aten.relu.default, (x,)), g.call_function(aten.relu.default, (x,))
        g.call_function(aten.add_.Tensor, (a, 1))  # merging a and b would let b see this write
        return g.call_function(aten.mul.Tensor, (a, b))

    assert dedupe.propose(_graph(build)) == []


def test_random_ops_and_outputs_are_not_merged() -> None:
    def build(g: torch.fx.Graph, x: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
        noise = [g.call_function(aten.rand_like.default, (x,)) for _ in range(2)]
        drop = [g.call_function(aten.dropout.default, (x, 0.5, True)) for _ in range(2)]
        total = g.call_function(aten.add.Tensor, (noise[0], noise[1]))
        return (
            total,
            *drop,
            g.call_function(aten.sigmoid.default, (x,)),
            g.call_function(aten.sigmoid.default, (x,)),
        )

    gm = _graph(build)
    assert dedupe.propose(gm) == []


def test_repeats_of_repeats_merge_in_one_pass() -> None:
    def build(g: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
        ends = []
        for _ in range(3):
            r = g.call_function(aten.relu.default, (x,))
            ends.append(g.call_function(aten.mul.Tensor, (r, 2.0)))
        return g.call_function(
            aten.add.Tensor, (g.call_function(aten.add.Tensor, (ends[0], ends[1])), ends[2])
        )

    gm = _graph(build)
    want = gm(torch.tensor([-1.0, 2.0]))
    nodes = {n.name: n for n in gm.graph.nodes}
    found = [(nodes[m.node].target, nodes[m.keep].target) for m in dedupe.propose(gm)]
    relu, mul = aten.relu.default, aten.mul.Tensor
    assert found == [(relu, relu), (mul, mul), (relu, relu), (mul, mul)]
    run_pipeline(gm, (dedupe,))
    assert _ops(gm, "relu") == 1 and _ops(gm, "mul") == 1
    torch.testing.assert_close(gm(torch.tensor([-1.0, 2.0])), want)
