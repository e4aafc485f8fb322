"""Fuse into a matrix product what the tile kernels' matmul computes around it (transformers, after
``fuse_epilogue``), so that these element-wise layers, and their passes over memory, go:

- ``linear(x, W, b) + r`` (a residual of the same shape) -> ``matmul_add(x, W.t(), b, r)``;
- ``matmul(a, b) / s`` or ``* s`` for a number ``s`` -> ``matmul_add(a, b, alpha=1/s)``, then ``+ m`` where
  ``m`` broadcasts to the product (BERT's attention mask) -> ``matmul_add(a, b, residual=m, alpha=...)``.

``pathweave::matmul_add(self, other, bias, residual, alpha)`` is ``alpha * (self @ other) + bias +
residual`` (torch.matmul's rules, bias and residual broadcast), a torch custom op, so the rewritten graph
still runs in PyTorch; scaling by ``1/s`` instead of dividing by ``s`` differs by one rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import (
    added_operand,
    aten,
    linear_args,
    replace_chain,
    residual_operand,
    sole_user,
)


def _matmul_add(
    self: torch.Tensor,
    other: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    alpha: float,
) -> torch.Tensor:
    y = torch.matmul(self, other)
    y = y * alpha if alpha != 1.0 else y
    y = y + bias if bias is not None else y
    return y + residual if residual is not None else y


# registered when this module is first imported (by the tiles strategy)
matmul_add = torch.library.custom_op("pathweave::matmul_add", _matmul_add, mutates_args=())
matmul_add.register_fake(_matmul_add)

_SCALE = {aten.div.Tensor: lambda s: 1.0 / s, aten.mul.Tensor: lambda s: s}


@dataclass(frozen=True)
class FuseMatmul:
    layer: str  # the linear or matmul node
    scale: str | None  # the div / mul by a number after a matmul
    add: str | None  # the add whose other operand becomes the residual
    alpha: float


def _scale(node: torch.fx.Node | None, product: torch.fx.Node) -> float | None:
    """``product / s`` or ``product * s`` (``s`` a number, not 0) as the factor it applies, else None."""
    if node is None or node.op != "call_function" or node.target not in _SCALE or node.kwargs:
        return None
    if len(node.args) != 2 or node.args[0] is not product or isinstance(node.args[1], bool):
        return None
    s = node.args[1]
    return float(_SCALE[node.target](float(s))) if isinstance(s, (int, float)) and s != 0 else None


def _broadcast_term(node: torch.fx.Node, add: torch.fx.Node | None) -> torch.fx.Node | None:
    """The other operand of ``add(node, m)`` (either order) when ``m`` is a float32 tensor that broadcasts
    to ``node``'s shape without widening it."""
    found = added_operand(node, add)
    if found is None:
        return None
    other, a, b = found
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dtype != b.dtype:
        return None
    if a.dim() > b.dim() or torch.broadcast_shapes(a.shape, b.shape) != b.shape:
        return None
    return other


def propose(gm: torch.fx.GraphModule) -> list[FuseMatmul]:
    """Each add joins one product: of ``linear(x) + linear(y)``, the first takes it."""
    found = []
    claimed: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        user = sole_user(node)
        if node.target == aten.linear.default and user not in claimed and residual_operand(node, user):
            claimed.add(user)
            found.append(FuseMatmul(node.name, None, user.name, 1.0))
        elif node.target == aten.matmul.default:
            alpha = _scale(user, node)
            last = user if alpha is not None else node
            add = sole_user(last)
            if add in claimed or _broadcast_term(last, add) is None:
                add = None
            if add is not None:
                claimed.add(add)
            if alpha is not None or add is not None:
                scale, factor = (None, 1.0) if alpha is None else (user.name, alpha)
                found.append(FuseMatmul(node.name, scale, add.name if add else None, factor))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[FuseMatmul]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        layer = nodes[m.layer]
        scale = nodes[m.scale] if m.scale else None
        add = nodes[m.add] if m.add else None
        last = add or scale or layer
        with gm.graph.inserting_before(last):
            if layer.target == aten.linear.default:
                x, w, bias = linear_args(layer)
                w_t = gm.graph.call_function(aten.t.default, (w,))
                w_t.meta["val"] = torch.empty_like(w.meta["val"], device="meta").t()
                a, b, residual = x, w_t, residual_operand(layer, add)
            else:
                a, b, bias = layer.args[0], layer.args[1], None
                residual = _broadcast_term(scale or layer, add) if add is not None else None
            op = torch.ops.pathweave.matmul_add.default
            fused = gm.graph.call_function(op, (a, b, bias, residual, m.alpha))
        replace_chain(gm, fused, (add, scale, layer))
