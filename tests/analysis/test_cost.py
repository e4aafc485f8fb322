"""Per-node static cost: FLOPs and bytes against the textbook formulas, and the Ramiel weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pathweave.analysis.cost import annotate, node_cost, total_flops
from pathweave.frontend.capture import capture
from pathweave.meta import COST


def _only(captured, kind_of: str):
    calls = [n for n in captured.gm.graph.nodes if n.op in ("call_function", "call_module")]
    nodes = [n for n in calls if kind_of in n.name]
    assert len(nodes) == 1, [n.name for n in captured.gm.graph.nodes]
    return nodes[0]


def _captured(model: nn.Module, x: torch.Tensor, method: str = "export"):
    return capture(model.eval(), x, method=method)


@pytest.mark.parametrize("method", ["export", "fx"])
def test_conv_flops_textbook(method: str) -> None:
    # grouped, strided, non-square kernel: out = 2 x 8 x 5 x 5 (H: (9+2-3)//2+1, W: (11+2-5)//2+1)
    conv = nn.Conv2d(4, 8, (3, 5), stride=2, padding=1, groups=2)
    captured = _captured(nn.Sequential(conv), torch.randn(2, 4, 9, 11), method)
    cost = node_cost(_only(captured, "conv" if method == "export" else "0"), captured.gm)
    n, c_out, h, w, c_in_per_group, kh, kw = 2, 8, 5, 5, 2, 3, 5
    assert cost.flops == 2 * n * c_out * h * w * c_in_per_group * kh * kw == 24_000
    assert cost.weight == 15.0 and cost.kind == "conv"
    # output 1600 B + input 3168 B + weight 960 B + bias 32 B
    assert cost.bytes == 4 * (2 * 8 * 5 * 5 + 2 * 4 * 9 * 11 + 8 * 2 * 3 * 5 + 8) == 5760


@pytest.mark.parametrize("method", ["export", "fx"])
def test_linear_flops_textbook(method: str) -> None:
    captured = _captured(nn.Sequential(nn.Linear(16, 10)), torch.randn(2, 3, 16), method)
    cost = node_cost(_only(captured, "linear" if method == "export" else "0"), captured.gm)
    assert cost.flops == 2 * (2 * 3) * 10 * 16 == 1920
    assert cost.weight == 1.0 and cost.kind == "matmul"


def test_elementwise_view_and_total() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).reshape(4, 6) + 1

    captured = capture(M(), torch.randn(2, 3, 4))
    annotate(captured.gm)
    costs = {n.name: n.meta[COST] for n in captured.gm.graph.nodes if COST in n.meta}
    relu = next(c for name, c in costs.items() if name.startswith("relu"))
    view = next(c for name, c in costs.items() if name.startswith(("view", "reshape")))
    add = next(c for name, c in costs.items() if name.startswith("add"))
    assert (relu.flops, relu.weight, relu.kind) == (24, 1.0, "elementwise")
    assert (view.flops, view.bytes, view.weight, view.kind) == (0, 0, 1.0, "view")
    assert (add.flops, add.weight) == (24, 1.0)
    assert total_flops(captured.gm) == 48


def test_pool_weight_is_window() -> None:
    captured = capture(nn.MaxPool2d(3, stride=1), torch.randn(1, 2, 5, 5))
    cost = node_cost(_only(captured, "max_pool"), captured.gm)
    assert cost.weight == 9.0
    assert cost.flops == 2 * 3 * 3 * 9  # 18 outputs x 9-element window


def test_adaptive_pool_window_is_input_over_output() -> None:
    captured = capture(nn.AdaptiveAvgPool2d(1), torch.randn(1, 4, 8, 8))
    cost = node_cost(_only(captured, "adaptive"), captured.gm)
    assert cost.weight == 64.0
    assert cost.flops == 4 * 64


def test_attention_counts_its_two_products_and_softmax() -> None:
    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 32, 8), torch.randn(2, 4, 32, 6)
    gm = capture(Attention(), q, k, v).gm
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    cost = node_cost(node, gm)
    assert cost.kind == "matmul"
    assert cost.flops == 2 * 4 * 16 * 32 * (2 * 8 + 2 * 6 + 5)  # Q K^T, P V, softmax over 32 keys


def test_transposed_convolution_counts_each_input_against_the_kernel() -> None:
    up = nn.ConvTranspose2d(8, 4, 2, stride=2)
    x = torch.randn(1, 8, 5, 5)
    gm = capture(nn.Sequential(up), x).gm
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    cost = node_cost(node, gm)
    assert cost.kind == "conv" and cost.flops == 2 * (8 * 5 * 5) * 4 * (2 * 2)
