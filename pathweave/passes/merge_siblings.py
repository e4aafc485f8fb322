"""Merge sibling 1x1 convolutions that read the same tensor into one wider convolution.

Inception-style blocks start several branches with a 1x1 convolution of the same input; their
small output widths (16-96 channels) use a GEMM poorly. One convolution over the concatenated
weights, its activation, then a channel slice per branch, computes the same values faster.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import add_constant, aten, constant, conv_args

_ACTS = {aten.relu.default}


@dataclass(frozen=True)
class MergeSiblings:
    input: str
    convs: tuple[str, ...]
    act: str | None  # the activation every sibling applies (aten op name), or None


def _pointwise_conv(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target != aten.conv2d.default:
        return False
    x, w, b, stride, padding, dilation, groups = conv_args(node)
    weight = constant(gm, w)
    return (
        weight is not None and tuple(weight.shape[2:]) == (1, 1) and groups == 1
        and stride == [1, 1] and padding == [0, 0] and (b is None or constant(gm, b) is not None)
    )  # fmt: skip


def _act_of(conv: torch.fx.Node) -> torch.fx.Node | None:
    user = next(iter(conv.users)) if len(conv.users) == 1 else None
    return user if user is not None and user.target in _ACTS else None


def propose(gm: torch.fx.GraphModule) -> list[MergeSiblings]:
    found = []
    for node in gm.graph.nodes:
        convs = [u for u in node.users if _pointwise_conv(gm, u) and conv_args(u)[0] is node]
        acts = [_act_of(c) for c in convs]
        groups: dict[object, list[torch.fx.Node]] = {}
        for c, a in zip(convs, acts, strict=True):
            groups.setdefault(a.target if a is not None else None, []).append(c)
        for act, members in groups.items():
            if len(members) > 1:
                names = tuple(m.name for m in members)
                found.append(MergeSiblings(node.name, names, str(act) if act else None))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[MergeSiblings]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        convs = [nodes[c] for c in m.convs]
        weights = [constant(gm, conv_args(c)[1]) for c in convs]
        biases = [constant(gm, conv_args(c)[2]) for c in convs]
        biases = [
            b if b is not None else torch.zeros(w.shape[0]) for w, b in zip(weights, biases, strict=True)
        ]
        first = convs[0]
        w_node = add_constant(gm, first, f"{first.name}_merged_w", torch.cat(weights).contiguous())
        b_node = add_constant(gm, first, f"{first.name}_merged_b", torch.cat(biases))
        with gm.graph.inserting_before(first):
            merged = gm.graph.call_function(aten.conv2d.default, (nodes[m.input], w_node, b_node))
            out = merged
            if m.act is not None:
                out = gm.graph.call_function(_act_of(first).target, (merged,))
        val = first.meta["val"]
        total = sum(int(w.shape[0]) for w in weights)
        merged.meta["val"] = val.new_empty((val.shape[0], total, *val.shape[2:]))
        out.meta["val"] = merged.meta["val"]
        start = 0
        for conv, w in zip(convs, weights, strict=True):
            end = start + int(w.shape[0])
            replaced = _act_of(conv) if m.act is not None else conv
            with gm.graph.inserting_after(out):
                piece = gm.graph.call_function(aten.slice.Tensor, (out, 1, start, end))
            piece.meta["val"] = replaced.meta["val"]
            replaced.replace_all_uses_with(piece)
            if replaced is not conv:
                gm.graph.erase_node(replaced)
            gm.graph.erase_node(conv)
            start = end
