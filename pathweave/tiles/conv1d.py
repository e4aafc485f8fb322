"""Rewrite 1-D convolutions (``conv1d``, ``conv_transpose1d`` and ``convolution`` of a 3-D input: the
stems of wav2vec2 and Whisper, 1-D CNNs, causal convolutions) as 2-D ones of unit height, so that the
tiles' conv2d kernels (and ``tiles.conv_transpose`` for the transposed ones) run them:

    [N, C, L] -> unsqueeze(2) -> [N, C, 1, L] -> conv2d(weight [O, C/g, 1, k], stride (1, s), padding
    (0, p), dilation (1, d), groups g) -> squeeze(2) -> [N, O, L']

The same products in the same order: exact. The ``squeeze`` then sinks below the element-wise ops,
inference batch norms and same-shaped sums that follow (they act per element or per channel, dim 1 in
both shapes), and an ``unsqueeze(2)`` it meets (the next convolution's) cancels it: a stack of 1-D layers
stays [N, C, 1, L] from end to end, its batch norms next to their convolutions (``fold_bn`` folds them)
and its activations and residual sums in the convolutions' epilogues (``fuse_epilogue``).

A constant weight becomes a 4-D constant (so the 2-D passes that need a constant weight, ``fold_bn`` and
``tiles.conv_transpose``, still see one); a weight given at run time is unsqueezed in the graph.
``padding="same"`` with an odd total (torch pads the extra after) and unbatched inputs stay ATen nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.passes.util import BN_PLAIN, add_constant, aten, constant
from pathweave.tiles.maps import ELEMENTWISE

_CONV = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_TRANSPOSED = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_CONVOLUTION = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding",
                "groups")  # fmt: skip
_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0,
             "transposed": False}  # fmt: skip
#: the 1-D ops by their overloads, with their argument names
_TARGETS = {
    aten.conv1d.default: _CONV,
    aten.conv1d.padding: _CONV,
    aten.conv_transpose1d.default: _TRANSPOSED,
    aten.convolution.default: _CONVOLUTION,
}


@dataclass(frozen=True)
class Unsqueeze:
    node: str
    transposed: bool
    stride: int
    padding: int
    dilation: int
    output_padding: int
    groups: int


def _one(v: Any) -> int:
    return int(v) if isinstance(v, int) else int(v[0])


def _args(node: torch.fx.Node) -> dict[str, Any] | None:
    names = _TARGETS.get(node.target) if node.op == "call_function" else None
    if names is None:
        return None
    args = {**_DEFAULTS, **dict(zip(names, node.args, strict=False)), **node.kwargs}
    return args


def _padding(args: dict[str, Any], kernel: int) -> int | None:
    """A numeric padding, or None for ``"same"`` with an odd total (uneven sides)."""
    pad, dilation = args["padding"], _one(args["dilation"])
    if pad == "valid":
        return 0
    if pad == "same":
        total = dilation * (kernel - 1)
        return total // 2 if total % 2 == 0 else None
    return _one(pad)


def _plan(node: torch.fx.Node) -> Unsqueeze | None:
    args = _args(node)
    if args is None:
        return None
    x, w = (
        a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in (args["input"], args["weight"])
    )
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() != 3 or w.dim() != 3:
        return None
    transposed = node.target == aten.conv_transpose1d.default or bool(args["transposed"])
    padding = _padding(args, w.shape[2])
    if padding is None:
        return None
    return Unsqueeze(node.name, transposed, _one(args["stride"]), padding, _one(args["dilation"]),
                     _one(args["output_padding"]), int(args["groups"]))  # fmt: skip


def propose(gm: torch.fx.GraphModule) -> list[Unsqueeze]:
    return [u for n in gm.graph.nodes if (u := _plan(n)) is not None]


def _emit(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    node = graph.call_function(target, args)
    meta = [
        torch.empty_like(a.meta["val"], device="meta") if isinstance(a, torch.fx.Node) else a for a in args
    ]
    node.meta["val"] = target(*meta)
    return node


def _weight(gm: torch.fx.GraphModule, node: torch.fx.Node, weight: torch.fx.Node) -> torch.fx.Node:
    """The weight with a unit height: a new constant, or an unsqueeze of a weight given at run time."""
    w = constant(gm, weight)
    if w is not None:
        return add_constant(gm, node, f"{node.name}_w2d", w.detach().unsqueeze(2).contiguous())
    return _emit(gm.graph, aten.unsqueeze.default, weight, 2)


def _unit_height(node: Any) -> torch.fx.Node | None:
    """The 4-D [N, C, 1, L] tensor a ``squeeze(2)`` node drops the unit height of, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target != aten.squeeze.dim:
        return None
    src, dim = node.args
    v = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    return (
        src if isinstance(v, torch.Tensor) and v.dim() == 4 and dim in (2, -2) and v.shape[2] == 1 else None
    )


def _sinkable(user: torch.fx.Node, sq: torch.fx.Node) -> bool:
    """Whether ``user`` of the squeeze ``sq`` computes the same per element (or per channel) on the 4-D
    tensor: an element-wise op whose every tensor operand is such a squeeze, or an inference batch norm."""
    if user.op != "call_function" or not hasattr(user.target, "_schema") or user.args[0] is not sq:
        return False
    if user.target == BN_PLAIN:
        return not user.args[5]
    name = user.target._overloadpacket.__name__
    operands = [a for a in (*user.args, *user.kwargs.values()) if isinstance(a, torch.fx.Node)]
    return name in ELEMENTWISE and all(_unit_height(a) is not None for a in operands)


def _sink(gm: torch.fx.GraphModule, squeezes: list[torch.fx.Node]) -> None:
    """Move each squeeze below the ops that commute with it; cancel it against an ``unsqueeze(2)``."""
    graph, todo = gm.graph, list(squeezes)
    while todo:
        sq = todo.pop(0)
        for user in list(sq.users):
            if user.target == aten.unsqueeze.default and user.args[1] in (2, -2):
                user.replace_all_uses_with(sq.args[0])
                graph.erase_node(user)
            elif _sinkable(user, sq):
                with graph.inserting_before(user):
                    args = torch.fx.node.map_arg(user.args, lambda a: _unit_height(a) or a)
                    kwargs = torch.fx.node.map_arg(user.kwargs, lambda a: _unit_height(a) or a)
                    wide = graph.call_function(user.target, args, kwargs)
                    meta_args, meta_kwargs = torch.fx.node.map_arg((args, kwargs), _meta_of)
                    wide.meta = {**user.meta, "val": user.target(*meta_args, **meta_kwargs)}
                    out = _emit(graph, aten.squeeze.dim, wide, 2)
                user.replace_all_uses_with(out)
                graph.erase_node(user)
                todo.append(out)
        if not sq.users:
            graph.erase_node(sq)


def _meta_of(node: torch.fx.Node) -> Any:
    v = node.meta.get("val")
    return torch.empty_like(v, device="meta") if isinstance(v, torch.Tensor) else v


def apply(gm: torch.fx.GraphModule, matches: list[Unsqueeze]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    squeezes = []
    for u in matches:
        node = nodes[u.node]
        args = _args(node)
        graph = gm.graph
        with graph.inserting_before(node):
            x = _emit(graph, aten.unsqueeze.default, args["input"], 2)
            w = _weight(gm, node, args["weight"])
            if u.transposed:
                y = _emit(graph, aten.conv_transpose2d.input, x, w, args["bias"], [1, u.stride],
                          [0, u.padding], [0, u.output_padding], u.groups, [1, u.dilation])  # fmt: skip
            else:
                y = _emit(graph, aten.conv2d.default, x, w, args["bias"], [1, u.stride], [0, u.padding],
                          [1, u.dilation], u.groups)  # fmt: skip
            out = _emit(graph, aten.squeeze.dim, y, 2)
        out.meta = {**node.meta, "val": out.meta["val"]}
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        squeezes.append(out)
    _sink(gm, squeezes)
