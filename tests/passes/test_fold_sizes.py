"""fold_sizes: ops whose value follows from sizes alone become constants, and prune then folds what
reads only them (BERT's token-type and GPT-2's position embeddings)."""

from __future__ import annotations

import copy

import torch

import pathweave
from pathweave.passes import fold_sizes, prune
from pathweave.passes.pipeline import run_pipeline


class _Positions(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = torch.nn.Embedding(16, 4)
        self.types = torch.nn.Embedding(2, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        return ids.float().unsqueeze(-1) + self.pos(positions) + self.types(torch.zeros_like(ids))


def test_sizes_folded_then_their_embeddings() -> None:
    model = _Positions().eval()
    ids = torch.randint(0, 9, (2, 5))
    gm = copy.deepcopy(pathweave.capture(model, ids).gm)
    reports = run_pipeline(gm, (fold_sizes, prune))
    assert [(r.name, r.rewrites) for r in reports][0] == ("fold_sizes", 2)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert not {"aten.arange.default", "aten.zeros_like.default", "aten.embedding.default"} & targets
    other = torch.randint(0, 9, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(gm(other)[0], model(other))
