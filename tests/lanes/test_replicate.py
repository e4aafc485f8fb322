"""The replicated graph of hyperclustering (``lanes.replicate``) against the whole-batch model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pathweave.errors import UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.lanes import replicate
from pathweave.lanes.replicate import Split
from pathweave.meta import REPLICA


class TwoBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x) + self.b(y), torch.tanh(self.b(x)).view(x.shape[0], 2, 2)


class Pooled(nn.Module):
    """Its output sums over the batch, so groups cannot be concatenated."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=0)


def test_propose_splits_into_equal_groups() -> None:
    assert replicate.propose([torch.zeros(6, 3), torch.zeros(6)], 4) == Split(6, 3)
    assert replicate.propose([torch.zeros(4, 3)], 2) == Split(4, 2)
    assert replicate.propose([torch.zeros(5, 3)], 2) is None  # 5 does not split in two
    assert replicate.propose([torch.zeros(1, 3)], 2) is None
    assert replicate.propose([torch.zeros(4, 3), torch.zeros(2, 3)], 2) is None  # no common batch
    assert replicate.propose([torch.zeros(4, 3)], 1) is None


@pytest.mark.parametrize("copies", [2, 3])
def test_replicated_graph_equals_the_whole_batch(copies: int) -> None:
    torch.manual_seed(0)
    model = TwoBranches().eval()
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    full = capture(model, x, y)
    split = replicate.propose([x, y], copies)
    assert split == Split(6, copies)
    sub = capture(model, *split.slices([x, y], 0))
    gm = replicate.apply(sub.gm, full.gm, split)
    with torch.no_grad():
        want = model(x, y)
        got = gm(x, y)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    groups = {n.meta[REPLICA].group for n in gm.graph.nodes if REPLICA in n.meta}
    assert groups == set(range(copies))
    attrs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert len(attrs) == len(set(attrs))  # weights shared by the groups, not copied


def test_output_without_batch_dimension_is_refused() -> None:
    x = torch.randn(4, 3)
    full, sub = capture(Pooled(), x), capture(Pooled(), x[:2])
    with pytest.raises(UnsupportedError, match="sub-batch dimension"):
        replicate.apply(sub.gm, full.gm, Split(4, 2))
