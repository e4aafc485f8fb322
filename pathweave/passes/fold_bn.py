"""Fold inference batch norm into the convolution that feeds it."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import BN_TUPLE, add_constant, aten, bn_args, constant, conv_args, inference_bn


@dataclass(frozen=True)
class FoldBN:
    conv: str
    bn: str


def propose(gm: torch.fx.GraphModule) -> list[FoldBN]:
    found = []
    for bn in gm.graph.nodes:
        if not inference_bn(bn):
            continue  # training-mode batch norm normalises by batch statistics
        conv = bn.args[0]
        if not (
            isinstance(conv, torch.fx.Node) and conv.target == aten.conv2d.default and len(conv.users) == 1
        ):
            continue
        users = list(bn.users)
        if bn.target is BN_TUPLE and not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue
        args = conv_args(conv)
        if constant(gm, args[1]) is None or (args[2] is not None and constant(gm, args[2]) is None):
            continue
        if any(constant(gm, a) is None for a in bn.args[1:5] if a is not None):
            continue
        found.append(FoldBN(conv.name, bn.name))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[FoldBN]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        conv, bn = nodes[m.conv], nodes[m.bn]
        args = conv_args(conv)
        w, b = constant(gm, args[1]), constant(gm, args[2])
        _, *stats, eps = bn_args(bn)
        gamma, beta, mean, var = (constant(gm, a) for a in stats)
        scale = torch.rsqrt(var + eps) * (gamma if gamma is not None else 1.0)
        new_w = (w * scale.reshape(-1, 1, 1, 1)).contiguous()
        new_b = ((b if b is not None else torch.zeros_like(mean)) - mean) * scale
        new_b = new_b + (beta if beta is not None else 0.0)
        args[1] = add_constant(gm, conv, f"{conv.name}_w", new_w.detach())
        args[2] = add_constant(gm, conv, f"{conv.name}_b", new_b.detach())
        conv.args, conv.kwargs = tuple(args), {}
        if bn.target is BN_TUPLE:
            for user in list(bn.users):
                user.replace_all_uses_with(conv)
                gm.graph.erase_node(user)
        else:
            bn.replace_all_uses_with(conv)
        gm.graph.erase_node(bn)
