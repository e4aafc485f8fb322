"""The op table (tiles.ops) and the nodes it classifies: a reshape that cannot view its input (flatten of
attention's transposed heads) becomes a layer that copies, one that can stays a view; layer norm and
softmax tiles span the dims they reduce (the rows' ``whole`` hint); each row's cost kind is analysis's
(the fused ops name their own); an op with a range map but no kernel is refused when the plan is
built, naming its nodes."""

from __future__ import annotations

import pytest
import torch

import pathweave
from pathweave.analysis.ops import op_kind
from pathweave.errors import UnsupportedError
from pathweave.tiles import maps
from pathweave.tiles.build import build_tile_graph
from pathweave.tiles.nodes import plan_nodes
from pathweave.tiles.ops import TILE_OPS, require_kernels
from pathweave.tiles.program import build_program

#: the tiles' fused ops (fuse_epilogue, fuse_matmul, fuse_depthwise), which analysis does not know, and
#: their cost kinds
FUSED = {"conv2d_act": "conv", "linear_act": "matmul", "matmul_add": "matmul", "batch_norm_act": "reduction",
         "cat_batch_norm_act": "reduction", "dw_pw_conv": "conv", "avg_pool2d_act": "pool"}  # fmt: skip


class _Heads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(x)
        merged = y.transpose(1, 2).flatten(2)  # (2, 5, 3, 4) strides: no view can be (2, 5, 12)
        kept = y.flatten(2)  # contiguous: a view
        return torch.softmax(merged, -1), torch.layer_norm(kept, (20,))


class _GraphOnly(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(torch.addcmul(x, torch.relu(x), x), 1)


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


def test_cost_kinds_are_analysis_kinds_and_the_fused_ops_name_theirs() -> None:
    for name, op in TILE_OPS.items():
        assert op.kind == FUSED.get(name, op_kind(name)), name
    assert {op_kind(name) for name in FUSED} == {"elementwise"}  # analysis knows no tile-private op


def test_rows_and_op_families_agree() -> None:
    views = {name for name, op in TILE_OPS.items() if op.view is not None}
    assert views == maps.VIEW_OPS and all(TILE_OPS[n].maps is None for n in views)
    assert {name for name, op in TILE_OPS.items() if op.kind == "conv"} == maps.CONVOLUTIONS
    aligned = {name for name, op in TILE_OPS.items() if op.aligned}
    assert aligned == maps.ELEMENTWISE | maps.CONVERSIONS | maps.BATCH_NORMS
    whole = maps.LAYER_NORMS | maps.SOFTMAXES | maps.GROUP_NORMS
    assert {name for name, op in TILE_OPS.items() if op.whole} == whole
    with pytest.raises(ValueError, match="either"):
        type(TILE_OPS["relu"])(kind="elementwise", bind=None, maps=maps.elementwise, view=maps.identity)


def test_an_op_without_a_kernel_is_refused_before_building() -> None:
    gm = pathweave.capture(_GraphOnly().eval(), torch.randn(2, 6)).gm
    plans = plan_nodes(gm)
    with pytest.raises(UnsupportedError, match="no native tile kernel") as err:
        require_kernels(plans)
    assert err.value.ops == ["addcmul", "log_softmax"] and "relu" not in str(err.value)
    graph = build_tile_graph(gm, plans=plans)  # the tile graph itself covers them
    with pytest.raises(UnsupportedError, match="addcmul: no kernel for this op"):
        build_program(gm, graph, plans)
