"""fx nodes by the op table: which nodes become tiled layers, which are views folded into their
consumers' maps (and which reshapes must copy instead), which take no part.

``plan_nodes(gm)`` classifies a whole graph and lists every node it cannot map at once, in one
``UnsupportedError``; ``map_nodes(gm)`` reports the same per node (the tile islands ask it). Nodes that
produce no tensor (``_assert_tensor_metadata``) are left out.
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Any

import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.errors import UnsupportedError
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles.graph import MAX_DIMS
from pathweave.tiles.maps import (
    IDENTITY_VIEWS,
    MULTI_VIEWS,
    RESHAPES,
    SLICES,
    TRANSPOSES,
    VIEW_OPS,
    NodeMaps,
    Unmapped,
    bound_args,
    getitem,
    shape,
)
from pathweave.tiles.ops import TILE_OPS


def plan_nodes(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, NodeMaps]:
    """Every layer and view of the graph with its sources, in graph order. Raises one UnsupportedError
    naming every node that cannot be mapped."""
    plans, failed = map_nodes(gm)
    if failed:
        lines = "\n".join(f"  {n.format_node()}\n    -> {why}" for n, why in failed.items())
        raise UnsupportedError(
            f"{len(failed)} node(s) have no tile range map; the tile graph covers the ATen ops that "
            f"pathweave.tiles.ops lists:\n{lines}",
            ops=sorted({op_name(n) for n in failed}),
            nodes=[n.name for n in failed],
        )
    return plans


def map_nodes(
    gm: torch.fx.GraphModule,
) -> tuple[dict[torch.fx.Node, NodeMaps], dict[torch.fx.Node, str]]:
    """``plan_nodes`` per node: the plans of the nodes that map, and why each other node does not (the
    getitems of a node that does not map are left out of both)."""
    plans: dict[torch.fx.Node, NodeMaps] = {}
    layers: set[torch.fx.Node] = set()
    failed: dict[torch.fx.Node, str] = {}
    for node in gm.graph.nodes:
        if node.target is operator.getitem and node.args[0] in failed:
            continue  # a piece of an op already named
        try:
            plan = _plan(node, layers)
        except Unmapped as exc:
            failed[node] = str(exc)
            continue
        if plan is not None:
            plans[node] = plan
            if plan.role == "layer":
                layers.add(node)
    return plans, failed


def _plan(node: torch.fx.Node, layers: set[torch.fx.Node]) -> NodeMaps | None:
    if node.op in ("placeholder", "get_attr", "output"):
        return None
    if node.op != "call_function":
        raise Unmapped(f"{node.op} node: tile graphs need an ATen graph (capture with torch.export)")
    name = op_name(node)
    if name == "getitem":
        return NodeMaps("view", (getitem(node, layers),))
    if not hasattr(node.target, "_schema"):
        raise Unmapped(f"{name} is not an ATen op: tile graphs need an ATen graph (torch.export)")
    if not tensor_specs(node) or name in MULTI_VIEWS:
        return None  # no tensor (assertions), or pieces only getitem reads
    op = TILE_OPS.get(name)
    if op is None:
        raise Unmapped(f"no range map for {name}")
    if op.view is not None:
        source = op.view(node, bound_args(node))
        if (name in RESHAPES and (copies(node, layers) or unreadable(node, layers))) or (
            (name in TRANSPOSES or name in SLICES) and unreadable(node, layers)
        ):
            return NodeMaps("layer", (source,))  # a layer that copies, with the view's map
        return NodeMaps("view", (source,))
    if len(shape(node)) > MAX_DIMS:
        raise Unmapped(f"a {len(shape(node))}-D output; tiled tensors have at most {MAX_DIMS} dims")
    return NodeMaps("layer", tuple(op.maps(node, bound_args(node))))


def copies(node: torch.fx.Node, layers: set[torch.fx.Node]) -> bool:
    """Whether a reshape cannot view its input (flatten of a transposed tensor)."""
    replayed = _replayed(node, layers)
    if replayed is None:
        return True
    base, t = replayed
    return isinstance(t, torch.Tensor) and t is not base and not t._is_view()


#: views a transpose's reader may sit behind (wav2vec2's positional conv1d reads its transpose through the
#: ``unsqueeze`` that runs it as a 2-D convolution); reshapes decide for themselves (``copies``)
_PASS_THROUGH = {"unsqueeze", "squeeze"}


def unreadable(node: torch.fx.Node, layers: set[torch.fx.Node]) -> bool:
    """Whether a transpose, reshape or slice feeds, directly or through identity views (``contiguous``)
    and (un)squeezes, a layer whose binder cannot read it where it lies (``TileOp.reads``: a layer norm
    over the dim that ConvNeXt's NCHW -> NHWC permute leaves strided, a conv of the permute back, or of
    SegFormer's tokens reshaped to an image after a transpose, a conv of ``x[:, :, ::2, ::2]``); it then
    copies instead."""
    reads = set()
    todo = [(user, node) for user in node.users]
    while todo:
        user, arg = todo.pop()
        name = op_name(user) if user.op == "call_function" else ""
        if name in IDENTITY_VIEWS or name in _PASS_THROUGH:
            todo.extend((u, user) for u in user.users)
        elif name in TILE_OPS and user.args and user.args[0] is arg:
            reads.add(TILE_OPS[name].reads)
    if not reads - {"strided"} or len(shape(node)) > MAX_DIMS:
        return False
    replayed = _replayed(node, layers)
    if replayed is None or not isinstance(replayed[1], torch.Tensor):
        return True
    t = replayed[1]
    rows = t.ndim == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1
    return ("dense" in reads and not t.is_contiguous()) or ("rows" in reads and not rows)


def _replayed(node: torch.fx.Node, layers: set[torch.fx.Node]) -> tuple[torch.Tensor, Any] | None:
    """A view's chain of views replayed on a contiguous meta tensor of the shape under it (every layer,
    input and constant is contiguous in a tile program): (that tensor, the view's stand-in), or None where
    a view op cannot view what it gets (``view`` of a layout it cannot view, after ``contiguous``)."""
    chain = []
    src = node
    while src.op == "call_function" and src not in layers:
        name = op_name(src)
        if name == "getitem" and src.args[0] in layers:
            break  # a layer's first output: its own buffer
        if name not in VIEW_OPS and name not in MULTI_VIEWS and name != "getitem":
            break
        chain.append(src)
        src = src.all_input_nodes[0]
    base = t = torch.empty(shape(src), device="meta")
    for view in reversed(chain):
        if op_name(view) not in IDENTITY_VIEWS:
            args = torch.fx.node.map_arg(view.args, partial(_stand_in, node=src, value=t))
            try:
                t = view.target(*args, **view.kwargs)
            except RuntimeError:
                return None
        src = view
    return base, t


def _stand_in(arg: Any, node: torch.fx.Node, value: Any) -> Any:
    return value if arg is node else arg
