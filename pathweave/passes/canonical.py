"""Spell ops the way the strategies' op tables know them:

- ``x.reshape_as(y)`` -> ``x.reshape(y.shape)`` (also ``view_as``, ``expand_as``), ``x.type_as(y)`` ->
  ``x.to(y.dtype)``;
- ``x.to(dtype)`` to the type it has -> ``x`` (ATen returns ``x`` itself; the tiles copied it: Llama's
  RMSNorm casts float32 to float32 twice per layer);
- a convolution with ``padding="same"`` or ``"valid"`` -> one with explicit padding (a
  ``constant_pad_nd`` first where "same" pads one side more, as even kernels do);
- a one- or two-operand ``einsum`` (CvT's attention) -> sums, permutes, reshapes and one ``bmm``
  (indices repeated within an operand stay an einsum);
- ``relu6(x)`` (``F.relu6``; ``nn.ReLU6`` already captures as ``hardtanh``) -> ``hardtanh(x, 0, 6)``, ATen's
  own definition of it.

torch.export keeps these composite overloads as they were written (LeViT's ``reshape_as``, DPT's
``expand_as``, EfficientNet's "same" padding); each rewrite is the op's own definition, so results are
bit for bit those of eager. ``verify`` checks every rewritten node is gone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.errors import PlanError
from pathweave.passes.util import aten, emit, meta_value

#: ``x.<op>_as(y)`` -> ``x.<op>(y.shape)``
_AS_SHAPE = {aten.reshape_as.default: aten.reshape.default, aten.view_as.default: aten.view.default,
             aten.expand_as.default: aten.expand.default}  # fmt: skip
_PADDED_CONVS = {aten.conv1d.padding: aten.conv1d.default, aten.conv2d.padding: aten.conv2d.default,
                 aten.conv3d.padding: aten.conv3d.default}  # fmt: skip
#: ``to`` overloads that return their input itself where nothing changes
_TO = (aten.to.dtype, aten.to.dtype_layout, aten.to.device)
_TARGETS = (*_AS_SHAPE, aten.type_as.default, *_PADDED_CONVS, aten.einsum.default, *_TO, aten.relu6.default)


@dataclass(frozen=True)
class Canonical:
    node: str


def _has_shapes(node: torch.fx.Node) -> bool:
    return all(isinstance(a.meta.get("val"), torch.Tensor) for a in node.all_input_nodes)


def propose(gm: torch.fx.GraphModule) -> list[Canonical]:
    return [
        Canonical(n.name)
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n.target in _TARGETS
        and _has_shapes(n)
        and (n.target is not aten.einsum.default or _einsum_terms(n) is not None)
        and (n.target not in _TO or _same_tensor(n))
    ]


def _same_tensor(node: torch.fx.Node) -> bool:
    """A ``to`` that changes nothing (dtype, device, layout as they are; no copy asked for)."""
    src, out = node.args[0].meta["val"], node.meta.get("val")
    if not isinstance(out, torch.Tensor) or node.kwargs.get("copy") or node.kwargs.get("memory_format"):
        return False
    if len(node.args) > 3 or any(isinstance(a, bool) and a for a in node.args[2:]):
        return False  # non_blocking / copy given by position
    return (src.dtype, src.device, src.layout, tuple(src.shape)) == (
        out.dtype,
        out.device,
        out.layout,
        tuple(out.shape),
    )


def _einsum_terms(node: torch.fx.Node) -> tuple[list[str], str] | None:
    """The operands' index strings and the output's, an ellipsis spelt out as capitals; None for what
    stays an einsum (three or more operands, an index repeated within an operand, ellipses of different
    ranks, a size-1 dim broadcast against another size)."""
    equation, operands = node.args[0], node.args[1]
    if not isinstance(equation, str) or not 1 <= len(operands) <= 2:
        return None
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    shapes = [list(o.meta["val"].shape) for o in operands]
    if len(terms) != len(operands):
        return None
    ranks = {len(sh) - len(t.replace("...", "")) for t, sh in zip(terms, shapes, strict=True) if "..." in t}
    if len(ranks) > 1 or (ranks and min(ranks) < 0):
        return None
    ellipsis = "".join(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq)[: ranks.pop() if ranks else 0]
    spelt = [t.replace("...", ellipsis) for t in terms]
    if arrow:
        out = out.replace("...", ellipsis)
    else:  # implicit output: the ellipsis, then the indices seen once, in alphabetical order
        joined = "".join(spelt)
        out = ellipsis + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ellipsis))
    sizes: dict[str, int] = {}
    for t, sh in zip(spelt, shapes, strict=True):
        if len(t) != len(sh) or len(set(t)) != len(t):
            return None
        for c, d in zip(t, sh, strict=True):
            if sizes.setdefault(c, d) != d:
                return None
    if not set(out) <= set(sizes) or len(set(out)) != len(out):
        return None
    return spelt, out


def _sum_alone(graph: torch.fx.Graph, x: torch.fx.Node, term: str, keep: str) -> tuple[torch.fx.Node, str]:
    """Sum out the indices of ``term`` not in ``keep`` (seen in this operand only, not in the output)."""
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return x, term
    return emit(graph, aten.sum.dim_IntList, x, gone), "".join(c for c in term if c in keep)


def _permute_reshape(
    graph: torch.fx.Graph, x: torch.fx.Node, term: str, order: str, shape: list[int]
) -> torch.fx.Node:
    if term != order:
        x = emit(graph, aten.permute.default, x, [term.index(c) for c in order])
    return emit(graph, aten.reshape.default, x, shape)


def _einsum(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """``einsum`` as sums, permutes, reshapes and a ``bmm``: batch indices (both operands and the output),
    contracted (both, not the output), and each operand's own."""
    (terms, out), operands = _einsum_terms(node), node.args[1]
    sizes = {
        c: d
        for t, o in zip(terms, operands, strict=True)
        for c, d in zip(t, o.meta["val"].shape, strict=True)
    }
    if len(terms) == 1:
        x, term = _sum_alone(graph, operands[0], terms[0], out)
        return x if term == out else emit(graph, aten.permute.default, x, [term.index(c) for c in out])
    (a, ta), (b, tb) = (_sum_alone(graph, o, t, out + other) for o, t, other in
                        ((operands[0], terms[0], terms[1]), (operands[1], terms[1], terms[0])))  # fmt: skip
    batch = "".join(c for c in out if c in ta and c in tb)
    left = "".join(c for c in out if c in ta and c not in tb)
    right = "".join(c for c in out if c in tb and c not in ta)
    contract = "".join(c for c in ta if c in tb and c not in out)
    size = lambda idx: math.prod(sizes[c] for c in idx)  # noqa: E731
    a3 = _permute_reshape(graph, a, ta, batch + left + contract, [size(batch), size(left), size(contract)])
    b3 = _permute_reshape(graph, b, tb, batch + contract + right, [size(batch), size(contract), size(right)])
    y = emit(graph, aten.bmm.default, a3, b3)
    done = batch + left + right
    y = emit(graph, aten.reshape.default, y, [sizes[c] for c in done])
    return y if done == out else emit(graph, aten.permute.default, y, [done.index(c) for c in out])


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
        x = emit(graph, aten.constant_pad_nd.default, x, flat, 0.0)
        pads = [(0, 0)] * spatial
    padding = [lo for lo, _ in pads]
    return emit(
        graph, _PADDED_CONVS[node.target], x, w, a["bias"], a["stride"], padding, dilation, a["groups"]
    )


def apply(gm: torch.fx.GraphModule, matches: list[Canonical]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        node = nodes[m.node]
        with gm.graph.inserting_before(node):
            if node.target in _AS_SHAPE:
                x, other = node.args[:2]
                new = emit(gm.graph, _AS_SHAPE[node.target], x, list(other.meta["val"].shape))
            elif node.target is aten.type_as.default:
                x, other = node.args[:2]
                new = emit(gm.graph, aten._to_copy.default, x)
                new.kwargs = {"dtype": other.meta["val"].dtype}
                new.meta["val"] = aten._to_copy.default(meta_value(x), dtype=other.meta["val"].dtype)
            elif node.target in _TO:
                node.replace_all_uses_with(node.args[0])
                gm.graph.erase_node(node)
                continue
            elif node.target is aten.einsum.default:
                new = _einsum(gm.graph, node)
            elif node.target is aten.relu6.default:
                new = emit(gm.graph, aten.hardtanh.default, node.args[0], 0.0, 6.0)
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
