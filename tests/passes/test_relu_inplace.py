"""A ReLU after a oneDNN convolution or linear runs in place on its fresh output: eager's NaN kept, and
lanes still take the graph (the write is private)."""

from __future__ import annotations

import torch

import pathweave
from pathweave.analysis.ops import mutates, shared_mutation
from pathweave.frontend.capture import capture
from pathweave.passes.pipeline import FAST_CPU, run_pipeline

aten = torch.ops.aten


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        shared = self.conv(x)  # read twice: its ReLU must not write into it
        z = torch.relu(shared) + shared
        return torch.relu(self.fc((y + z).flatten(1)))


def test_relu_after_fresh_kernel_runs_in_place_and_keeps_nan() -> None:
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 6, 6)
    gm = capture(model, x).gm
    reports = {r.name: r.rewrites for r in run_pipeline(gm, FAST_CPU)}
    assert reports["relu_inplace"] == 2  # the first conv's and the linear's; not the shared one's
    inplace = [n for n in gm.graph.nodes if n.target == aten.relu_.default]
    assert len(inplace) == 2 and all(mutates(n) and not shared_mutation(n) for n in inplace)
    assert any(n.target == aten.relu.default for n in gm.graph.nodes)
    x[0, 0, 2, 2] = float("nan")
    x[1, 1, 0, 0] = float("inf")
    want = model(x)
    for strategy in ("sequential", "lanes"):
        got = pathweave.optimize(model, x, strategy=strategy)(x)
        assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
        torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), rtol=1e-4, atol=1e-4)


def test_a_write_into_a_shared_value_still_counts() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    r = graph.call_function(aten.relu_.default, (x,))
    graph.output(r)
    assert shared_mutation(r)  # a graph input: the caller sees the write
