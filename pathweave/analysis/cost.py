"""Static per-node cost from shapes: FLOPs, bytes moved, and a Ramiel-style weight.

The static weight follows Ramiel's rule of thumb: heavy windowed ops weigh their kernel area
(a 3x3 convolution weighs 9, a 7x7 one 49), everything else weighs 1; the critical path adds
``EDGE_COST`` per data edge (the hand-off between operators), total work does not.
"""

from __future__ import annotations

import math

import torch
import torch.fx

from pathweave.analysis.ops import (
    ATTENTION,
    TRANSPOSED,
    is_compute,
    module_of,
    op_kind,
    op_name,
    weight_tensor,
)
from pathweave.frontend.shapes import tensor_specs
from pathweave.meta import COST, NodeCost

EDGE_COST = 1.0
#: FLOPs per output element of normalisations and softmax (sub, mul, add, a share of the reduction)
_REDUCTION_FLOPS = 5


def node_cost(
    node: torch.fx.Node, gm: torch.fx.GraphModule | None = None, kind: str | None = None
) -> NodeCost:
    """The node's cost by its op's class: ``op_kind`` of its name, or ``kind`` where the caller knows
    the op better (a strategy's own fused ops, which analysis does not know)."""
    name = op_name(node, gm)
    kind = kind or op_kind(name)
    outs = tensor_specs(node)
    out_numel = sum(s.numel for s in outs)
    moved = sum(s.nbytes for s in outs) + sum(s.nbytes for a in node.all_input_nodes for s in tensor_specs(a))
    moved += _module_state_bytes(node, gm)
    if kind == "view":
        return NodeCost(0, 0, 0.0 if name == "getitem" else 1.0, kind)
    if kind == "conv":
        w = weight_tensor(node, gm)
        window = math.prod(w[2:]) if w is not None else 1
        per_out = w[1] if w is not None else 1  # input channels per group; a transposed one's: outputs
        done = _first_input_numel(node) if name in TRANSPOSED else out_numel
        return NodeCost(2 * done * per_out * window, moved, float(window), kind)
    if name in ATTENTION:
        return NodeCost(attention_flops(node), moved, 1.0, kind)
    if kind == "matmul":
        return NodeCost(2 * out_numel * _inner_dim(node, name, gm), moved, 1.0, kind)
    if kind == "pool":
        window = _pool_window(node, gm)
        return NodeCost(out_numel * window, moved, float(window), kind)
    if kind == "reduction":
        return NodeCost(_REDUCTION_FLOPS * max(out_numel, _first_input_numel(node)), moved, 1.0, kind)
    return NodeCost(out_numel, moved, 1.0, kind)


def _module_state_bytes(node: torch.fx.Node, gm: torch.fx.GraphModule | None) -> int:
    """Weights an fx-traced module reads from its own attributes (ATen graphs pass them as inputs)."""
    mod = module_of(node, gm)
    if mod is None:
        return 0
    tensors = [*mod.parameters(recurse=False), *mod.buffers(recurse=False)]
    return sum(t.numel() * t.element_size() for t in tensors)


def annotate(gm: torch.fx.GraphModule) -> None:
    """Write ``NodeCost`` into ``node.meta[COST]`` for every compute node."""
    for node in gm.graph.nodes:
        if is_compute(node):
            node.meta[COST] = node_cost(node, gm)


def attention_flops(node: torch.fx.Node) -> int:
    """Scaled-dot-product attention of queries (..., L, E), keys (..., S, E) and values (..., S, Ev):
    Q K^T and P V (2 L S E + 2 L S Ev per batch and head) and the softmax over S."""
    q, k, v = (tensor_specs(a) for a in node.args[:3] if isinstance(a, torch.fx.Node))
    if not (q and k and v and len(q[0].shape) >= 2 and len(k[0].shape) >= 2 and len(v[0].shape) >= 2):
        return sum(s.numel for s in tensor_specs(node))
    *batch, length, e = q[0].shape
    s, ev = k[0].shape[-2], v[0].shape[-1]
    n = math.prod(batch)
    return n * length * s * (2 * e + 2 * ev + _REDUCTION_FLOPS)


def _inner_dim(node: torch.fx.Node, name: str, gm: torch.fx.GraphModule | None) -> int:
    if name in ("linear", "_linear_pointwise"):
        w = weight_tensor(node, gm)
        return int(w[-1]) if w is not None else 1
    args = [a for a in node.args if isinstance(a, torch.fx.Node)]
    first = args[1] if name in ("addmm", "baddbmm") and len(args) > 1 else (args[0] if args else None)
    specs = tensor_specs(first) if first is not None else []
    return int(specs[0].shape[-1]) if specs and specs[0].shape else 1


def _pool_window(node: torch.fx.Node, gm: torch.fx.GraphModule | None) -> int:
    mod = gm.get_submodule(str(node.target)) if node.op == "call_module" and gm is not None else None
    if mod is not None:
        k = getattr(mod, "kernel_size", None)
    elif "adaptive" in op_name(node, gm):
        k = None  # its second argument is the output size, not a window
    else:
        k = node.args[1] if len(node.args) > 1 else node.kwargs.get("kernel_size")
    if k is None:  # adaptive pooling: the window is input / output
        ins, outs = _first_input_numel(node), sum(s.numel for s in tensor_specs(node))
        return max(1, ins // max(outs, 1))
    if isinstance(k, int):
        return k * k
    return math.prod(int(v) for v in k) if len(k) > 1 else int(k[0]) ** 2


def _first_input_numel(node: torch.fx.Node) -> int:
    for a in node.all_input_nodes:
        specs = tensor_specs(a)
        if specs:
            return specs[0].numel
    return 0


def total_flops(gm: torch.fx.GraphModule) -> int:
    return sum(n.meta[COST].flops for n in gm.graph.nodes if COST in n.meta)
