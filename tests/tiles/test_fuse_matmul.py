"""tile_fuse_matmul: linear + residual add, matmul + scale (+ a mask that broadcasts) become one
``pathweave::matmul_add``; what does not fit is left alone; the graph computes the same after."""

from __future__ import annotations

import copy

import torch

import pathweave
from pathweave.passes import prune
from pathweave.passes.pipeline import run_pipeline
from pathweave.tiles import fuse_matmul as tile_fuse_matmul


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q(x).unflatten(-1, (2, 4)).transpose(1, 2)
        scores = torch.matmul(q, q.transpose(-1, -2)) / 2.0 + mask  # scale and mask: fused
        probs = torch.softmax(scores, -1)
        heads = torch.matmul(probs, q) * 3.0  # scale only
        y = x + self.out(heads.transpose(1, 2).flatten(2))  # residual first: fused
        wide = torch.matmul(probs, probs) + torch.ones(2, 2, 5, 5)  # the add would widen: left alone
        return y, wide


def test_matches_and_results() -> None:
    model = _Attention().eval()
    x, mask = torch.randn(1, 5, 8), torch.randn(1, 1, 1, 5)
    gm = copy.deepcopy(pathweave.capture(model, x, mask).gm)
    run_pipeline(gm, (prune,))
    found = tile_fuse_matmul.propose(gm)
    assert [(m.layer, m.scale is not None, m.add is not None, m.alpha) for m in found] == [
        ("matmul", True, True, 0.5),
        ("matmul_1", True, False, 3.0),
        ("linear_1", False, True, 1.0),
    ]
    run_pipeline(gm, (tile_fuse_matmul,))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count("pathweave.matmul_add.default") == 3 and "aten.div.Tensor" not in targets
    assert targets.count("aten.matmul.default") == 1 and targets.count("aten.linear.default") == 1
    with torch.no_grad():
        torch.testing.assert_close(tuple(gm(x, mask)), model(x, mask), rtol=1e-5, atol=1e-5)
