"""The tiles' op table: one ``TileOp`` row per ATen op (and per fused op of ``fuse_epilogue``,
``fuse_matmul`` and ``fuse_depthwise``) with its range map, its kernel binder or ``None`` (graph only),
its cost kind and its tiling hints. Adding a tile op is one row here, its map in ``maps``, its binder in
``bind_*`` and its C kernel in ``native/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.analysis.ops import op_kind, op_name
from pathweave.errors import UnsupportedError
from pathweave.tiles import bind_cnn, bind_reduce, bind_transformer, maps
from pathweave.tiles.abi import COMPARISONS
from pathweave.tiles.maps import (
    BATCH_NORMS,
    CONVERSIONS,
    CREATION,
    GROUP_NORMS,
    IDENTITY_VIEWS,
    LAYER_NORMS,
    REDUCTIONS,
    RESHAPES,
    SLICES,
    SOFTMAXES,
    TRANSPOSES,
    LayerMap,
    NodeMaps,
    ViewMap,
)
from pathweave.tiles.rows import Binder

#: the dims of a layer's output that each of its tiles spans whole
WholeDims = Callable[[torch.fx.Node], set[int]]
#: why build_program refuses a layer whose row has no binder
GRAPH_ONLY = "no kernel for this op"
#: how a binder reads its first input (``TileOp.reads``): anyhow, with its last dim adjacent, contiguous
READS = ("strided", "rows", "dense")


@dataclass(frozen=True)
class TileOp:
    """One op in the tile strategy.

    ``maps``: a layer's range maps (its sources); ``view``: instead, a view's one source (no tiles: its
    consumers read through it), and ``bind`` then copies it where it is made a layer. ``bind``: fills the
    layer's kernel row (``rows.LayerRow``); None: graph only, no native kernel (``require_kernels``
    refuses it before a program is built). ``kind``: the cost class ``analysis.cost.node_cost`` prices it
    by (an ATen op's is ``analysis.ops.op_kind``'s; the fused ops name theirs). ``aligned``: by default its
    tiles line up one to one with those of a same-shaped producer; ``whole``: the dims a tile spans whole
    (the dims it normalises or reduces). ``reads``: how its binder reads its first input (``READS``); a
    transpose that does not lie so becomes a layer copying it (``nodes.plan_nodes``). ``writes``: the
    output types its kernel writes (float32; bool, one byte, for the comparisons); ``takes``: the types of
    the tensor inputs it reads, where its output's type does not tell (a comparison of int64 is bool too),
    so that the islands leave the others out before any binder refuses them."""

    kind: str
    bind: Binder | None
    maps: LayerMap | None = None
    view: ViewMap | None = None
    aligned: bool = False
    whole: WholeDims | None = None
    reads: str = "strided"
    writes: tuple[torch.dtype, ...] = (torch.float32,)
    takes: tuple[torch.dtype, ...] | None = None

    def __post_init__(self) -> None:
        if (self.maps is None) == (self.view is None):
            raise ValueError("a TileOp has either a layer's maps or a view's map")
        if self.reads not in READS:
            raise ValueError(f"reads={self.reads!r}; one of {READS}")


def _rows(names: Iterable[str], kind: str | None = None, **fields: Any) -> dict[str, TileOp]:
    """The same row for each of ``names``; the cost kind of an ATen op is analysis's (``op_kind``)."""
    return {name: TileOp(kind=kind or op_kind(name), **fields) for name in sorted(names)}


TILE_OPS: dict[str, TileOp] = {
    # element-wise and conversions: tiles aligned with a same-shaped producer's
    **_rows(("add", "sub", "mul", "div", "rsub", "maximum", "minimum", "relu", "tanh", "sigmoid", "silu",
             "hardswish", "hardsigmoid", "hardtanh", "leaky_relu", "elu", "clamp", "clamp_min", "clamp_max",
             "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "pow", "erf", "sin", "cos",
             "sign"), maps=maps.elementwise, bind=bind_cnn.ewise, aligned=True),
    **_rows(("gelu",), maps=maps.elementwise, bind=bind_transformer.gelu, aligned=True),
    **_rows(("where", "masked_fill"), maps=maps.elementwise, bind=bind_transformer.where, aligned=True),
    **_rows(COMPARISONS, maps=maps.elementwise, bind=bind_reduce.compare, aligned=True, writes=(torch.bool,),
            takes=(torch.float32, torch.bool)),
    **_rows(("addcdiv", "addcmul", "lerp"), maps=maps.elementwise, bind=None, aligned=True),
    **_rows(CONVERSIONS, maps=maps.conversion, bind=bind_transformer.convert, aligned=True),
    **_rows(CREATION, maps=maps.creation, bind=None),
    # normalisations and reductions
    **_rows(BATCH_NORMS - {"batch_norm_act"}, maps=maps.batch_norm, bind=bind_cnn.batch_norm, aligned=True),
    **_rows(("batch_norm_act",), "reduction", maps=maps.batch_norm, bind=bind_cnn.batch_norm, aligned=True),
    **_rows(LAYER_NORMS, maps=maps.layer_norm, bind=bind_transformer.layer_norm, whole=maps.layer_norm_dims,
            reads="rows"),
    **_rows(("softmax", "_softmax"), maps=maps.softmax, bind=bind_transformer.softmax,
            whole=maps.softmax_dims, reads="rows"),
    **_rows(SOFTMAXES - {"softmax", "_softmax"}, maps=maps.softmax, bind=None, whole=maps.softmax_dims),
    **_rows(GROUP_NORMS, maps=maps.group_norm, bind=bind_reduce.group_norm, whole=maps.group_norm_dims),
    **_rows(REDUCTIONS, maps=maps.reduction, bind=bind_reduce.reduce),
    # windows
    **_rows(("conv2d",), maps=maps.conv, bind=bind_cnn.conv, reads="dense"),
    **_rows(("conv2d_act",), "conv", maps=maps.conv_act, bind=bind_cnn.conv, reads="dense"),
    **_rows(("dw_pw_conv",), "conv", maps=maps.dw_pw_conv, bind=bind_cnn.dw_pw_conv, reads="dense"),
    **_rows(("conv1d", "convolution"), maps=maps.conv, bind=None),
    **_rows(("max_pool2d", "avg_pool2d"), maps=maps.pool, bind=bind_cnn.pool, reads="rows"),
    **_rows(("avg_pool2d_act",), "pool", maps=maps.pool, bind=bind_cnn.pool, reads="rows"),
    **_rows(("max_pool2d_with_indices",), maps=maps.pool, bind=None),
    **_rows(("adaptive_avg_pool2d", "_adaptive_avg_pool2d"), maps=maps.adaptive_pool,
            bind=bind_cnn.adaptive_pool, reads="dense"),
    **_rows(("adaptive_max_pool2d",), maps=maps.adaptive_pool, bind=None),
    **_rows(("upsample_nearest2d", "upsample_bilinear2d"), maps=maps.upsample, bind=bind_cnn.upsample),
    **_rows(("pixel_shuffle",), maps=maps.pixel_shuffle, bind=bind_cnn.pixel_shuffle),
    # matrix products
    **_rows(("linear",), maps=maps.linear, bind=bind_transformer.linear),
    **_rows(("linear_act",), "matmul", maps=maps.linear, bind=bind_transformer.linear),
    **_rows(("matmul", "mm", "bmm", "addmm", "baddbmm"), maps=maps.matmul, bind=bind_transformer.matmul),
    **_rows(("matmul_add",), "matmul", maps=maps.matmul, bind=bind_transformer.matmul),
    **_rows(("embedding",), maps=maps.embedding, bind=bind_transformer.embedding),
    # copies
    **_rows(("cat",), maps=maps.cat, bind=bind_cnn.cat),
    **_rows(("cat_batch_norm_act",), "reduction", maps=maps.cat_batch_norm, bind=bind_cnn.cat_batch_norm),
    **_rows(("stack",), maps=maps.stack, bind=bind_cnn.stack),
    **_rows(("pad", "constant_pad_nd"), maps=maps.pad, bind=bind_cnn.pad),
    **_rows(("roll",), maps=maps.roll, bind=bind_reduce.roll),
    # views: folded into their consumers; a reshape that cannot view its input copies, and so does a
    # transpose or a slice that its consumer cannot read where it lies (``reads``)
    **_rows(IDENTITY_VIEWS, view=maps.identity, bind=None),
    **_rows(RESHAPES, view=maps.reshape, bind=bind_transformer.view_copy),
    **_rows(TRANSPOSES, view=maps.permute, bind=bind_transformer.view_copy),
    **_rows(SLICES, view=maps.slice_, bind=bind_transformer.view_copy),
    **_rows(("select",), view=maps.select, bind=None),
    **_rows(("unsqueeze",), view=maps.unsqueeze, bind=None),
    **_rows(("squeeze",), view=maps.squeeze, bind=None),
    **_rows(("expand",), view=maps.expand, bind=None),
}  # fmt: skip


def no_kernel_error(failed: dict[str, str]) -> UnsupportedError:
    """One error naming every layer the native kernels cannot run (``failed``: node name -> "op: why")."""
    lines = "\n".join(f"  {n}: {why}" for n, why in failed.items())
    return UnsupportedError(
        f"{len(failed)} layer(s) have no native tile kernel:\n{lines}",
        ops=sorted({why.split(":")[0] for why in failed.values()}),
        nodes=list(failed),
    )


def graph_only(plans: dict[torch.fx.Node, NodeMaps]) -> dict[torch.fx.Node, str]:
    """Every layer of ``plans`` whose op has a range map but no kernel binder, with "op: why"."""
    return {
        node: f"{op_name(node)}: {GRAPH_ONLY}"
        for node, plan in plans.items()
        if plan.role == "layer" and TILE_OPS[op_name(node)].bind is None
    }


def require_kernels(plans: dict[torch.fx.Node, NodeMaps]) -> None:
    """Raise one UnsupportedError naming every layer whose op has a range map but no kernel binder (graph
    only), before any tile graph or program is built from ``plans`` (``plan_nodes``)."""
    failed = graph_only(plans)
    if failed:
        raise no_kernel_error({node.name: why for node, why in failed.items()})
