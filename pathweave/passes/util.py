"""Small helpers shared by passes: reading constant weights, adding constants, normalising args."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from pathweave.frontend.graph import attr_value

aten = torch.ops.aten
#: inference batch norm in its two ATen forms: the tuple of ``run_decompositions`` (its tensor read by
#: getitem 0) and torch.export's own (one tensor, the training flag in args[5])
BN_TUPLE = aten._native_batch_norm_legit_no_training.default
BN_PLAIN = aten.batch_norm.default


def inference_bn(node: torch.fx.Node) -> bool:
    """A batch norm over running statistics, in either form."""
    return node.op == "call_function" and (
        node.target is BN_TUPLE or (node.target is BN_PLAIN and not node.args[5])
    )


def bn_output(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node carrying a batch norm's tensor: the node itself (plain form), or the tuple's one reader
    when that is its getitem 0; None when the tuple is read otherwise."""
    if node.target is not BN_TUPLE:
        return node
    users = list(node.users)
    if len(users) == 1 and users[0].target is operator.getitem and users[0].args[1] == 0:
        return users[0]
    return None


def bn_args(node: torch.fx.Node) -> tuple[Any, Any, Any, Any, Any, float]:
    """(input, weight, bias, running_mean, running_var, eps) of a batch norm in either form."""
    a = node.args
    return a[0], a[1], a[2], a[3], a[4], float(a[6] if node.target is BN_TUPLE else a[7])


def constant(gm: torch.fx.GraphModule, node: Any) -> torch.Tensor | None:
    """The tensor behind a ``get_attr`` node, or None for anything computed at run time."""
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        obj = attr_value(gm, str(node.target))
        return obj if isinstance(obj, torch.Tensor) else None
    return None


def add_constant(
    gm: torch.fx.GraphModule, before: torch.fx.Node, name: str, value: torch.Tensor
) -> torch.fx.Node:
    """Register ``value`` as a non-persistent buffer and return a ``get_attr`` node for it."""
    attr = name
    i = 0
    while hasattr(gm, attr):
        i += 1
        attr = f"{name}_{i}"
    gm.register_buffer(attr, value, persistent=False)
    with gm.graph.inserting_before(before):
        node = gm.graph.get_attr(attr)
    node.meta["val"] = value
    return node


def drop_unused_constants(gm: torch.fx.GraphModule) -> None:
    """Remove dead nodes, then buffers no ``get_attr`` reads any more."""
    gm.graph.eliminate_dead_code()
    used = {str(n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    for name in [n for n, _ in gm.named_buffers(recurse=False) if n not in used]:
        delattr(gm, name)


CONV_DEFAULTS = (None, None, None, [1, 1], [0, 0], [1, 1], 1)


def conv_args(node: torch.fx.Node) -> list[Any]:
    """aten.conv2d args with defaults filled: input, weight, bias, stride, padding, dilation, groups."""
    args = list(node.args) + list(CONV_DEFAULTS[len(node.args) :])
    for i, key in enumerate(("input", "weight", "bias", "stride", "padding", "dilation", "groups")):
        if key in node.kwargs:
            args[i] = node.kwargs[key]
    for i in (3, 4, 5):
        v = args[i]
        args[i] = [int(v)] * 2 if isinstance(v, int) else [int(e) for e in v] * (2 if len(v) == 1 else 1)
    return args


def linear_args(node: torch.fx.Node) -> tuple[Any, Any, Any]:
    """aten.linear's input, weight and bias (None when absent)."""
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    return node.args[0], node.args[1], bias


def replace_chain(
    gm: torch.fx.GraphModule, fused: torch.fx.Node, chain: tuple[torch.fx.Node | None, ...]
) -> None:
    """``fused`` takes the place of a chain of nodes (last first): it gets the last one's meta and users,
    and the chain is erased."""
    last = next(n for n in chain if n is not None)
    fused.meta = dict(last.meta)
    last.replace_all_uses_with(fused)
    for n in chain:
        if n is not None:
            gm.graph.erase_node(n)


def sole_user(node: torch.fx.Node) -> torch.fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def added_operand(node: torch.fx.Node, add: torch.fx.Node | None) -> tuple[torch.fx.Node, Any, Any] | None:
    """For a plain tensor sum ``add(node, r)`` (either order, no alpha, ``r`` another node): ``r`` and the
    two values (``r``'s, ``node``'s) an epilogue rule checks; else None."""
    if add is None or add.target != aten.add.Tensor or len(add.args) != 2 or add.kwargs:
        return None
    other = add.args[1] if add.args[0] is node else add.args[0]
    if not isinstance(other, torch.fx.Node) or other is node:
        return None
    return other, other.meta.get("val"), node.meta.get("val")


def residual_operand(node: torch.fx.Node, add: torch.fx.Node | None) -> torch.fx.Node | None:
    """The other operand ``r`` of ``add(node, r)`` (either order) when an epilogue can take it: a plain
    sum (no alpha) with ``r`` of ``node``'s own shape and dtype (no broadcast); else None."""
    found = added_operand(node, add)
    if found is None:
        return None
    other, a, b = found
    if a is None or b is None or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return None
    return other


def meta_value(x: Any) -> Any:
    """An fx argument as a meta tensor of its value's shape, strides and dtype (numbers as they are)."""
    if isinstance(x, torch.fx.Node):
        v = x.meta["val"]
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(meta_value(e) for e in x)
    return x


def emit(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    """A new ``target(*args)`` node at the graph's insert point, its value's shape in ``meta["val"]``."""
    node = graph.call_function(target, args)
    node.meta["val"] = target(*(meta_value(a) for a in args))
    return node
