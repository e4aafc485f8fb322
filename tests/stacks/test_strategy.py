"""Stacks inside lanes: each stack one node to Ramiel's clustering, run on its lane's thread."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import pathweave
from pathweave.errors import InputError
from pathweave.lanes.strategy import HyperLanesStrategy, LanesStrategy, build_lanes
from pathweave.stacks.module import StackModule
from pathweave.stacks.strategy import StacksStrategy


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "stack-cache"))


class TwoTowers(nn.Module):
    """Two branches, each a convolution then a chain of pooling and element-wise layers (a stack)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.left, self.right = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        a = torch.relu(nn.functional.max_pool2d(self.left(y), 3, 1, 1)) * 0.5
        b = nn.functional.relu6(nn.functional.avg_pool2d(torch.relu(self.right(y)), 3, 1, 1)) * 2.0
        return a + b


def _stack_nodes(strat: LanesStrategy) -> list[str]:
    gm = strat.sequential.gm
    return [
        n.name
        for n in gm.graph.nodes
        if n.op == "call_module" and isinstance(gm.get_submodule(n.target), StackModule)
    ]


def test_each_stack_is_one_node_on_one_lane(outputs_close) -> None:
    model, x = TwoTowers().eval(), torch.randn(1, 3, 20, 20)
    strat = LanesStrategy(pathweave.capture(model, x), lanes=2, threads=2, stacks=True)
    try:
        stacked = _stack_nodes(strat)
        assert len(stacked) == 2 and isinstance(strat.sequential, StacksStrategy)
        lane_of = strat.plan.lane_of()
        assert all(name in lane_of for name in stacked)
        assert strat.summary().startswith("2 stacks; ")
        with torch.no_grad():
            for seed in range(2):
                x = torch.randn(1, 3, 20, 20, generator=torch.Generator().manual_seed(seed))
                outputs_close(strat(x), model(x), 1e-4, 1e-5)
    finally:
        strat.close()


def test_hyperclusters_with_stacks(outputs_close) -> None:
    model, x = TwoTowers().eval(), torch.randn(4, 3, 16, 16)
    strat = build_lanes(
        pathweave.capture(model, x), lambda sub: pathweave.capture(model, *sub), 2, stacks=True
    )
    try:
        assert isinstance(strat, HyperLanesStrategy) and len(_stack_nodes(strat)) == 2
        assert strat.summary().startswith("2 stacks; hyperclusters: 2 groups of 2")
        with torch.no_grad():
            outputs_close(strat(x), model(x), 1e-4, 1e-5)
    finally:
        strat.close()


def test_optimize_takes_stacks_where_they_run() -> None:
    model, x = TwoTowers().eval(), torch.randn(1, 3, 12, 12)
    assert isinstance(pathweave.optimize(model, x, strategy="sequential", stacks=True), StacksStrategy)
    lanes = pathweave.optimize(model, x, strategy="lanes", stacks=True)
    assert isinstance(lanes, LanesStrategy) and len(_stack_nodes(lanes)) == 2
    lanes.close()
    for strategy in ("tiles", "streams"):
        with pytest.raises(InputError, match=f"inside strategy '{strategy}'"):
            pathweave.optimize(model, x, strategy=strategy, stacks=True)


def test_lanes_without_a_compiler_run_without_stacks_loudly(monkeypatch, tmp_path, outputs_close) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path))
    model, x = TwoTowers().eval(), torch.randn(1, 3, 12, 12)
    with pytest.warns(UserWarning, match="stacks not used.*C compiler"):
        strat = LanesStrategy(pathweave.capture(model, x), lanes=2, threads=2, stacks=True)
    try:
        assert _stack_nodes(strat) == [] and strat.summary().startswith("0 stacks; ")
        with torch.no_grad():
            outputs_close(strat(x), model(x), 1e-4, 1e-5)
    finally:
        strat.close()
