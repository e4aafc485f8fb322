"""tile_ops on transformer graphs: a reshape that cannot view its input (flatten of attention's
transposed heads) becomes a layer that copies, one that can stays a view; layer norm and softmax tiles
span the dims they reduce."""

from __future__ import annotations

import torch

import pathweave
from pathweave.tiles.graph import build_tile_graph
from pathweave.tiles.ops import plan_nodes


class _Heads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(x)
        merged = y.transpose(1, 2).flatten(2)  # (2, 5, 3, 4) strides: no view can be (2, 5, 12)
        kept = y.flatten(2)  # contiguous: a view
        return torch.softmax(merged, -1), torch.layer_norm(kept, (20,))


def test_reshape_copies_only_when_it_cannot_view() -> None:
    gm = pathweave.capture(_Heads().eval(), torch.randn(2, 3, 5, 4)).gm
    roles = {n.name: p.role for n, p in plan_nodes(gm).items()}
    assert roles["flatten"] == "layer" and roles["flatten_1"] == "view"


def test_norm_and_softmax_tiles_keep_whole_rows() -> None:
    gm = pathweave.capture(_Heads().eval(), torch.randn(2, 3, 5, 4)).gm
    graph = build_tile_graph(gm, work_per_tile=10.0)
    for layer, op in enumerate(graph.layer_ops):
        if op in ("softmax", "layer_norm"):
            grid = graph.grid(layer)
            assert len(grid[-1]) == 2 and graph.tile_counts()[str(graph.layer_names[layer])] > 1
