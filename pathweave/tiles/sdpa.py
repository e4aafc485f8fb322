"""Decompose ``aten.scaled_dot_product_attention`` (no tile op) into the ops the tiles run, so that an
attention stays inside the tile program instead of cutting it into islands around an ATen node:

    s = q @ k^T * scale + mask           (a bool mask as eager adds it: where(mask, 0, -inf))
    live = min(sum(exp(s - max(s, -FLT_MAX)), -1), 1)        1 for a row with a score above -inf, 0 for a
                                                             row all -inf, NaN for a row with a NaN / +inf
    out = (softmax(max(s, live * -FLT_MAX - FLT_MAX)) @ v) * live

This is eager's math backend exactly, its "safe softmax" included: a row whose scores are all -inf (a
fully masked query) gives 0, not NaN. ``max(s, -FLT_MAX - FLT_MAX)`` is ``max(s, -inf)``, ``s`` itself,
for a live row; a dead row becomes -FLT_MAX everywhere (a finite softmax) and is then multiplied by 0, so
its output is 0 as eager's (NaN where ``v`` holds a NaN or an infinity, as eager's ``0 @ v``). NaN in q,
k or v propagates as in the math backend. ``is_causal`` is a constant lower-triangular bool mask;
grouped-query heads (``enable_gqa``) repeat each key/value head for its queries (``repeat_interleave``
over the heads, as eager). Only float32 without dropout and with at least ``MIN_KEYS`` keys is rewritten;
any other SDPA stays an ATen node (an island boundary, ``tiles.mixed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.passes.util import add_constant, aten, emit

FLT_MAX = float(torch.finfo(torch.float32).max)
_SDPA = aten.scaled_dot_product_attention.default
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
#: fewer keys stay in ATen: eager's CPU kernel then takes a row's max without its vector code, which skips
#: NaN, so a row of NaN scores gives 0 there (NaN in the math backend and from 16 keys on, AVX-512 or not)
MIN_KEYS = 16


@dataclass(frozen=True)
class Decompose:
    node: str  # the SDPA node
    scale: float
    mask: str  # "none", "bool" (where), "float" (add) or "causal" (a constant bool mask)
    groups: int  # query heads per key/value head (1: the same heads)


def _sdpa_args(node: torch.fx.Node) -> dict[str, Any]:
    args = dict(zip(_PARAMS, node.args, strict=False))
    args.update(node.kwargs)
    return args


def _val(x: Any) -> torch.Tensor | None:
    v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _groups(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> int | None:
    """Query heads per key/value head, or None where the shapes are not plain attention's."""
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim() or k.shape[:-1] != v.shape[:-1]:
        return None
    if q.shape[-1] != k.shape[-1] or q.shape[:-3] != k.shape[:-3] or k.shape[-2] < MIN_KEYS:
        return None
    if q.shape[-3] == k.shape[-3]:
        return 1
    if gqa and q.dim() == 4 and k.shape[-3] > 0 and q.shape[-3] % k.shape[-3] == 0:
        return q.shape[-3] // k.shape[-3]
    return None


def _mask_kind(mask: Any, causal: bool, q: torch.Tensor) -> str | None:
    if mask is None:
        return "causal" if causal else "none"
    m = _val(mask)
    if causal or m is None or m.dim() > q.dim() or m.dtype not in (torch.bool, torch.float32):
        return None
    return "bool" if m.dtype == torch.bool else "float"


def _plan(node: torch.fx.Node) -> Decompose | None:
    args = _sdpa_args(node)
    q, k, v = (_val(args.get(p)) for p in _PARAMS[:3])
    if q is None or k is None or v is None or {q.dtype, k.dtype, v.dtype} != {torch.float32}:
        return None
    if args.get("dropout_p", 0.0) != 0.0:
        return None
    groups = _groups(q, k, v, bool(args.get("enable_gqa", False)))
    mask = _mask_kind(args.get("attn_mask"), bool(args.get("is_causal", False)), q)
    if groups is None or mask is None:
        return None
    scale = args.get("scale")
    return Decompose(node.name, float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1]), mask,
                     groups)  # fmt: skip


def propose(gm: torch.fx.GraphModule) -> list[Decompose]:
    return [d for n in gm.graph.nodes if n.op == "call_function" and n.target == _SDPA and (d := _plan(n))]


def _repeat_heads(graph: torch.fx.Graph, x: torch.fx.Node, groups: int) -> torch.fx.Node:
    """[B, Hkv, S, E] -> [B, Hkv * groups, S, E], each head repeated ``groups`` times in place."""
    if groups == 1:
        return x
    b, h, s, e = x.meta["val"].shape
    wide = emit(graph, aten.expand.default, emit(graph, aten.unsqueeze.default, x, 2), [b, h, groups, s, e])
    return emit(graph, aten.reshape.default, wide, [b, h * groups, s, e])


def _scores(gm: torch.fx.GraphModule, node: torch.fx.Node, d: Decompose) -> torch.fx.Node:
    """q @ k^T * scale with the mask applied."""
    graph, args = gm.graph, _sdpa_args(node)
    q, k = args["query"], _repeat_heads(graph, args["key"], d.groups)
    kt = emit(graph, aten.transpose.int, k, -2, -1)
    s = emit(graph, aten.mul.Tensor, emit(graph, aten.matmul.default, q, kt), d.scale)
    mask = args.get("attn_mask")
    if d.mask == "causal":
        length, source = q.meta["val"].shape[-2], k.meta["val"].shape[-2]
        tril = torch.ones(length, source, dtype=torch.bool).tril()
        mask = add_constant(gm, node, "sdpa_causal_mask", tril)
    if d.mask in ("bool", "causal"):  # as eager, an additive mask: a masked NaN score stays NaN
        mask = emit(graph, aten.where.Scalar, mask, 0.0, -math.inf)
    return s if d.mask == "none" else emit(graph, aten.add.Tensor, s, mask)


def _attend(graph: torch.fx.Graph, s: torch.fx.Node, v: torch.fx.Node) -> torch.fx.Node:
    """softmax(s) @ v with eager's safe softmax: a row of scores all -inf gives 0 (module docstring)."""
    finite = emit(graph, aten.clamp_min.default, s, -FLT_MAX)
    keep = emit(graph, aten.exp.default, emit(graph, aten.sub.Tensor, s, finite))
    live = emit(graph, aten.clamp_max.default, emit(graph, aten.sum.dim_IntList, keep, [-1], True), 1.0)
    floor = emit(graph, aten.add.Tensor, emit(graph, aten.mul.Tensor, live, -FLT_MAX), -FLT_MAX)
    p = emit(graph, aten._softmax.default, emit(graph, aten.maximum.default, s, floor), -1, False)
    return emit(graph, aten.mul.Tensor, emit(graph, aten.matmul.default, p, v), live)


def apply(gm: torch.fx.GraphModule, matches: list[Decompose]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for d in matches:
        node = nodes[d.node]
        with gm.graph.inserting_before(node):
            s = _scores(gm, node, d)
            out = _attend(gm.graph, s, _repeat_heads(gm.graph, _sdpa_args(node)["value"], d.groups))
        out.meta = dict(node.meta)
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
    if matches:  # ATen's SDPA output lies as (B, L, H, D): a model's view of its transpose works there only
        for n in gm.graph.find_nodes(op="call_function", target=aten.view.default):
            n.target = aten.reshape.default  # the same where a view works; a copy where it would not
