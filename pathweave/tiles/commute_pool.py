"""Commute an average pool with the 1x1 convolution that alone reads it (Inception-v3's pool branches),
after ``fuse_epilogue``:

``conv(avg_pool(x), W, b)`` -> ``pathweave::avg_pool2d_act(conv(x, W), b)``: the 1x1 convolution runs on
the pool's input and the pool on the convolution's output, then the bias and the activation in the pool's
epilogue (native/tile_kernels.c's ``pool_epilogue``). A 1x1 convolution without bias is a linear map of
each position's channels and an average pool a linear combination of positions (zero padding, any divisor
rule), so the two commute; the bias goes after the pool, where it is the same at every position
(``count_include_pad`` averages it with the padding's zeros otherwise). The sums run in another order
(eager's within float rounding); NaN and inf come from the same products in either order.

It pays where the convolution has fewer output channels than input channels and the pool keeps the map's
size: the pool then averages ``O`` channels instead of ``C`` and the product's work is unchanged
(Inception-v3's 9 pool branches: 32-192 channels pooled instead of 192-2048). A strided pool is left alone
(``pays``): commuted, the convolution would run on its larger input. Measured on Inception-v3 by rewriting the
model by hand (ninth session, Zen 3 AVX2, 1 worker, 60 paired runs): 0.9825x the wall time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.fx
import torch.nn.functional as F

from pathweave.errors import PlanError
from pathweave.passes.util import aten, emit
from pathweave.tiles.fuse_depthwise import ACTS
from pathweave.tiles.fuse_epilogue import activate, conv_parts
from pathweave.tiles.maps import as_ints, bound_args


def _avg_pool2d_act(
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    bias: torch.Tensor | None,
    act: str,
) -> torch.Tensor:
    """avg_pool2d's arguments in its order, then a bias per channel and an epilogue activation."""
    y = F.avg_pool2d(input, kernel_size, stride or None, padding, ceil_mode, count_include_pad,
                     divisor_override)  # fmt: skip
    return activate(y if bias is None else y + bias.view(1, -1, 1, 1), act)


# registered when this module is first imported (by the tiles strategy)
avg_pool2d_act = torch.library.custom_op("pathweave::avg_pool2d_act", _avg_pool2d_act, mutates_args=())
avg_pool2d_act.register_fake(_avg_pool2d_act)


@dataclass(frozen=True)
class CommutePool:
    pool: str  # the avg_pool2d node
    conv: str  # the 1x1 conv2d / conv2d_act that alone reads it


def _val(node: object) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) and val.dtype == torch.float32 else None


def _commutes(pool: torch.fx.Node) -> torch.fx.Node | None:
    """The 1x1 convolution that alone reads ``pool`` where the two commute and commuting pays, else None
    (float32; the pool's input dense, as the convolution reads it)."""
    if pool.op != "call_function" or pool.target != aten.avg_pool2d.default or len(pool.users) != 1:
        return None
    conv = next(iter(pool.users))
    p = conv_parts(conv)
    if p is None or p["input"] is not pool or p["residual"] is not None or p["act"] not in ACTS:
        return None
    w, x, out = (_val(v) for v in (p["weight"], pool.args[0], pool))
    if w is None or x is None or out is None:
        return None
    if not x.is_contiguous() or x.dim() != 4 or w.dim() != 4 or tuple(w.shape[2:]) != (1, 1):
        return None
    if int(p["groups"]) != 1:
        return None
    if as_ints(p["stride"], 2) != [1, 1] or as_ints(p["padding"], 2) != [0, 0]:
        return None
    p_in, p_out = x.shape[2] * x.shape[3], out.shape[2] * out.shape[3]
    return conv if pays(w.shape[0], w.shape[1], p_in, p_out, pool) else None


def pays(o: int, c: int, p_in: int, p_out: int, pool: torch.fx.Node) -> bool:
    """Whether the commuted pair does less work, a multiply-add and a pool's add counted alike: the product
    moves from the pool's ``p_out`` positions to its input's ``p_in`` (``o * c`` each), the pool from ``c``
    channels to ``o`` (its window's taps per output). Where the pool keeps the map's size: fewer outputs
    than inputs (a pool's add, memory bound, costs more than a multiply-add, so the rule is cautious)."""
    taps = math.prod(as_ints(bound_args(pool)["kernel_size"], 2))
    return o * c * (p_in - p_out) < (c - o) * p_out * taps


def propose(gm: torch.fx.GraphModule) -> list[CommutePool]:
    return [CommutePool(n.name, conv.name) for n in gm.graph.nodes if (conv := _commutes(n)) is not None]


def apply(gm: torch.fx.GraphModule, matches: list[CommutePool]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        pool, conv = nodes[m.pool], nodes[m.conv]
        p = conv_parts(conv)
        if p is None or p["input"] is not pool:  # a match of another graph
            raise PlanError(f"commute_pool: {m.pool} -> {m.conv} is not an avg pool and a convolution")
        a = bound_args(pool)
        with gm.graph.inserting_before(conv):
            y = emit(gm.graph, aten.conv2d.default, a["self"], p["weight"], None, [1, 1], [0, 0], [1, 1], 1)
            pooled = gm.graph.call_function(
                torch.ops.pathweave.avg_pool2d_act.default,
                (y, as_ints(a["kernel_size"], 2), as_ints(a["stride"], 2) if a["stride"] else [],
                 as_ints(a["padding"], 2), bool(a["ceil_mode"]), bool(a["count_include_pad"]),
                 a["divisor_override"], p["bias"], p["act"]),
            )  # fmt: skip
        pooled.meta = dict(conv.meta)
        conv.replace_all_uses_with(pooled)
        gm.graph.erase_node(conv)
        gm.graph.erase_node(pool)
    verify(gm, matches)


def verify(gm: torch.fx.GraphModule, matches: list[CommutePool]) -> None:
    """Every commuted pair is gone from the graph, and no pool epilogue reads a pool's own input."""
    left = {n for m in matches for n in (m.pool, m.conv)} & {n.name for n in gm.graph.nodes}
    if left:
        raise PlanError(f"commute_pool: nodes {sorted(left)} were not rewritten")
    for n in gm.graph.nodes:
        if n.target == torch.ops.pathweave.avg_pool2d_act.default and n.args[0].target != aten.conv2d.default:
            raise PlanError(f"commute_pool: {n.name} does not pool a convolution's output")
