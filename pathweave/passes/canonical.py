"""Spell ops the way the strategies' op tables know them: ``x.reshape_as(y)`` -> ``x.reshape(y.shape)``
(also ``view_as``, ``expand_as``), ``x.type_as(y)`` -> ``x.to(y.dtype)``, and a convolution with
``padding="same"`` or ``"valid"`` -> one with explicit padding (a ``constant_pad_nd`` first where "same"
pads one side more, as even kernels do).

torch.export keeps these composite overloads as they were written (LeViT's ``reshape_as``, DPT's
``expand_as``, EfficientNet's "same" padding); each rewrite is the op's own definition, so results are
bit for bit those of eager. ``verify`` checks every rewritten node is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.errors import PlanError
from pathweave.passes.util import aten

#: ``x.<op>_as(y)`` -> ``x.<op>(y.shape)``
_AS_SHAPE = {aten.reshape_as.default: aten.reshape.default, aten.view_as.default: aten.view.default,
             aten.expand_as.default: aten.expand.default}  # fmt: skip
_PADDED_CONVS = {aten.conv1d.padding: aten.conv1d.default, aten.conv2d.padding: aten.conv2d.default,
                 aten.conv3d.padding: aten.conv3d.default}  # fmt: skip
_TARGETS = (*_AS_SHAPE, aten.type_as.default, *_PADDED_CONVS)


@dataclass(frozen=True)
class Canonical:
    node: str


def _meta(x: Any) -> Any:
    if isinstance(x, torch.fx.Node):
        v = x.meta["val"]
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(e) for e in x)
    return x


def _emit(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    node = graph.call_function(target, args)
    node.meta["val"] = target(*(_meta(a) for a in args))
    return node


def _has_shapes(node: torch.fx.Node) -> bool:
    return all(isinstance(a.meta.get("val"), torch.Tensor) for a in node.all_input_nodes)


def propose(gm: torch.fx.GraphModule) -> list[Canonical]:
    return [
        Canonical(n.name)
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target in _TARGETS and _has_shapes(n)
    ]


def _same_padding(weight: torch.fx.Node, dilation: Any) -> list[tuple[int, int]]:
    """(before, after) per spatial dim for "same": the total ``dilation * (k - 1)``, the extra on the end."""
    kernel = weight.meta["val"].shape[2:]
    dil = [dilation] * len(kernel) if isinstance(dilation, int) else list(dilation)
    if len(dil) == 1:
        dil = dil * len(kernel)
    return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dil, strict=True)]


def _bound(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    values = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    values.update(zip((a.name for a in schema.arguments), node.args, strict=False))
    return values | dict(node.kwargs)


def _conv(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    a = _bound(node)
    x, w, dilation = a["input"], a["weight"], a["dilation"]
    spatial = w.meta["val"].dim() - 2
    pads = [(0, 0)] * spatial if a["padding"] == "valid" else _same_padding(w, dilation)
    if any(lo != hi for lo, hi in pads):
        flat = [p for lo_hi in reversed(pads) for p in lo_hi]  # constant_pad_nd: last dim first
        x = _emit(graph, aten.constant_pad_nd.default, x, flat, 0.0)
        pads = [(0, 0)] * spatial
    padding = [lo for lo, _ in pads]
    return _emit(
        graph, _PADDED_CONVS[node.target], x, w, a["bias"], a["stride"], padding, dilation, a["groups"]
    )


def apply(gm: torch.fx.GraphModule, matches: list[Canonical]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        node = nodes[m.node]
        with gm.graph.inserting_before(node):
            if node.target in _AS_SHAPE:
                x, other = node.args[:2]
                new = _emit(gm.graph, _AS_SHAPE[node.target], x, list(other.meta["val"].shape))
            elif node.target is aten.type_as.default:
                x, other = node.args[:2]
                new = _emit(gm.graph, aten._to_copy.default, x)
                new.kwargs = {"dtype": other.meta["val"].dtype}
                new.meta["val"] = aten._to_copy.default(_meta(x), dtype=other.meta["val"].dtype)
            else:
                new = _conv(gm.graph, node)
        new.meta = {**node.meta, "val": new.meta["val"]}
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()


def verify(gm: torch.fx.GraphModule, matches: list[Canonical]) -> None:
    left = {m.node for m in matches} & {n.name for n in gm.graph.nodes}
    if left:
        raise PlanError(f"canonical: nodes {sorted(left)} were not rewritten")
