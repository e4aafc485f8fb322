"""Static work, critical path and parallelism of small hand-built graphs.

Expected numbers follow the rule in analyze/cost.py, worked out by hand: a convolution weighs its kernel
area (3x3 -> 9, 1x1 -> 1), a max pool its window, every other op 1 (views too), ``getitem`` 0 and merged
into its producer; the critical path adds EDGE_COST = 1 per edge along it, total work adds nothing.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pathweave.analysis.analyze import analyze_captured, static_stats
from pathweave.analysis.cost import EDGE_COST
from pathweave.analysis.dag import build_dag
from pathweave.frontend.capture import capture
from pathweave.meta import COST


class Diamond(nn.Module):
    """x -> conv3x3 a, conv1x1 b in parallel -> add."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


class Chain(nn.Module):
    """conv3x3 -> relu -> conv1x1 -> relu -> flatten."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(4, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1)


class TwoBranches(nn.Module):
    """Independent outputs: conv3x3 -> relu -> conv3x3, and conv1x1."""

    def __init__(self) -> None:
        super().__init__()
        self.a1 = nn.Conv2d(4, 4, 3, padding=1)
        self.a2 = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a2(torch.relu(self.a1(x))), self.b(x)


class ConvBnPool(nn.Module):
    """conv3x3 -> batch norm -> relu_ -> maxpool 2x2 -> (+ a conv1x1 of x, pooled by 2x2 avg pool).

    The in-place relu makes torch.export emit batch norm as a tuple-output op read through getitem.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.side = nn.Conv2d(4, 4, 1)
        self.avg = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x)))) + self.avg(self.side(x))


def _captured(cls: type[nn.Module]):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls().eval()
        x = torch.randn(1, 4, 6, 6)
    return capture(model, x)


def test_edge_cost_is_one() -> None:
    assert EDGE_COST == 1.0  # the literals below assume it


def test_diamond() -> None:
    captured = _captured(Diamond)
    s = static_stats(captured)
    assert (s.nodes, s.edges) == (3, 2)
    assert s.total_work == 11.0  # 9 + 1 + 1
    assert s.critical_path == 11.0  # conv3x3 9, edge 1, add 1
    assert s.parallelism == pytest.approx(1.0)
    assert s.max_width == 2 and s.width_per_depth == (2, 1)
    assert s.critical_nodes == ("conv2d", "add")
    assert s.speedup_bound(1) == pytest.approx(1.0)
    assert s.speedup_bound(2) == pytest.approx(1.0)  # 11 / max(5.5, 11)
    s0 = static_stats(captured, edge_cost=0.0)
    assert s0.total_work == 11.0 and s0.critical_path == 10.0
    assert s0.parallelism == pytest.approx(1.1)
    assert s0.speedup_bound(2) == pytest.approx(1.1)  # 11 / max(5.5, 10)
    assert s0.speedup_bound(16) == pytest.approx(1.1)


def test_chain() -> None:
    s = static_stats(_captured(Chain))
    assert (s.nodes, s.edges) == (5, 4)
    assert s.total_work == 13.0  # 9 + 1 + 1 + 1 + 1 (flatten is a view: 1)
    assert s.critical_path == 17.0  # 13 + 4 edges
    assert s.parallelism == pytest.approx(13 / 17)
    assert s.max_width == 1 and s.width_per_depth == (1, 1, 1, 1, 1)
    assert s.critical_nodes == ("conv2d", "relu", "conv2d_1", "relu_1", "flatten")
    assert s.speedup_bound(8) == pytest.approx(13 / 17)
    s0 = static_stats(_captured(Chain), edge_cost=0.0)
    assert s0.critical_path == 13.0 and s0.parallelism == pytest.approx(1.0)


def test_two_branches_of_different_lengths() -> None:
    captured = _captured(TwoBranches)
    s = static_stats(captured)
    assert (s.nodes, s.edges) == (4, 2)
    assert s.total_work == 20.0  # 9 + 1 + 9 on one branch, 1 on the other
    assert s.critical_path == 21.0  # 19 + 2 edges
    assert s.parallelism == pytest.approx(20 / 21)
    assert s.max_width == 2 and s.width_per_depth == (2, 1, 1)
    assert s.critical_nodes == ("conv2d", "relu", "conv2d_1")
    s0 = static_stats(captured, edge_cost=0.0)
    assert s0.critical_path == 19.0
    assert s0.speedup_bound(2) == pytest.approx(20 / 19)  # 20 / max(10, 19)


def test_tuple_output_op_merges_getitem() -> None:
    captured = _captured(ConvBnPool)
    getitems = [n for n in captured.gm.graph.nodes if n.op == "call_function" and "getitem" in n.name]
    assert getitems, "batch norm (and max pool) should be read through getitem here"
    dag = build_dag(captured.gm)
    assert not any("getitem" in n for n in dag.nodes)
    s = static_stats(captured)
    # conv 9, bn 1, relu 1, maxpool 2x2 4 | conv1x1 1, avgpool 2x2 4 | add 1
    assert (s.nodes, s.edges) == (7, 6)
    assert s.total_work == 21.0
    assert s.critical_path == 20.0  # 9 + 1 + 1 + 4 + 1 plus 4 edges
    assert s.parallelism == pytest.approx(21 / 20)
    assert s.max_width == 2 and s.width_per_depth == (2, 2, 1, 1, 1)
    assert s.critical_nodes[0] == "conv2d" and s.critical_nodes[-1] == "add"
    assert len(s.critical_nodes) == 5
    # the getitem nodes cost nothing and the merged producer keeps its successors
    for node in getitems:
        assert node.meta[COST].weight == 0.0
    bn = next(n for n in dag.nodes if "batch_norm" in n)
    assert len(dag.succs[bn]) == 1 and "relu" in dag.succs[bn][0]


def test_analysis_to_dict_matches_static() -> None:
    analysis = analyze_captured(_captured(Diamond))
    d = analysis.to_dict()
    assert d["model"] == "Diamond"
    assert (d["total_work"], d["critical_path"], d["max_width"]) == (11.0, 11.0, 2)
    assert d["parallelism"] == pytest.approx(1.0)
    assert d["width_per_depth"] == [2, 1]
    assert d["critical_nodes"] == ["conv2d", "add"]
    assert set(d["speedup_bound"]) == {"2", "4", "8", "16"}
    # conv3x3 4->4 on 6x6: 2*144*4*9; conv1x1: 2*144*4*1; add: 144 output elements
    assert d["flops"] == 2 * 144 * 4 * 9 + 2 * 144 * 4 + 144
    assert "measured" not in d and analysis.measured is None


def test_static_stats_are_deterministic() -> None:
    a = static_stats(_captured(TwoBranches)).to_dict()
    b = static_stats(_captured(TwoBranches)).to_dict()
    assert a == b
