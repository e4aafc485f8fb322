"""Commute an average pool with a 1x1 convolution next to it, in whichever order does less work, after
``fuse_epilogue``. A 1x1 convolution without bias is a linear map of each position's channels and an
average pool a linear combination of positions (zero padding, any divisor rule), so the two commute; the
sums run in another order (eager's within float rounding), and NaN and inf in the input come from the same
products in either order. Finite values near float32's largest (~1e37 and up) may overflow to inf in one
order and not the other (a hostile test, tenth session: an input of 1e38 under weights of 4 gave inf where
eager, pooling first, stayed at 4.4e37); activations that large are out of any model's range.

- ``conv(avg_pool(x), W, b)`` -> ``pathweave::avg_pool2d_act(conv(x, W), b)`` (the convolution the pool's
  only reader): the bias and the activation go after the pool, into its epilogue (native/tile_kernels.c's
  ``pool_epilogue``; ``count_include_pad`` would average a bias with the padding's zeros). It pays where
  the convolution has fewer outputs than inputs and the pool keeps the map's size: the pool averages ``O``
  channels instead of ``C``, the product's work unchanged. Inception-v3's 9 pool branches (32-192 channels
  pooled instead of 192-2048). Measured on Inception-v3 (tenth session, Zen 3 AVX2, 1 worker, paired runs
  in one process): 0.984-0.988x the wall time (0.9825x for the same rewrite by hand in the ninth).
- ``avg_pool(conv(x, W, b))`` -> ``conv(avg_pool(x), W, b)`` (the pool the convolution's only reader, the
  convolution without activation, its bias only where the pool averages full windows): the product runs
  on the pool's fewer positions. DenseNet's transitions (a 1x1 convolution halving the channels, then a
  2x2 pool of stride 2: a quarter of the product's work for twice the pool's).

Which order does less work is ``conv_first_costs``' count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
    conv: str  # the 1x1 conv2d / conv2d_act that alone reads it, or (pool_first) that it alone reads
    pool_first: bool = False  # conv -> pool becomes pool -> conv (else pool -> conv becomes conv -> pool)


def _val(node: object) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) and val.dtype == torch.float32 else None


def _pointwise(conv: torch.fx.Node, source: torch.fx.Node) -> dict[str, Any] | None:
    """``conv``'s arguments where it is a 1x1 convolution of ``source`` alone (stride 1, no padding, one
    group, float32, no residual, an epilogue the pool's applies), else None."""
    p = conv_parts(conv)
    if p is None or p["input"] is not source or p["residual"] is not None or p["act"] not in ACTS:
        return None
    w = _val(p["weight"])
    if w is None or w.dim() != 4 or tuple(w.shape[2:]) != (1, 1) or int(p["groups"]) != 1:
        return None
    if as_ints(p["stride"], 2) != [1, 1] or as_ints(p["padding"], 2) != [0, 0]:
        return None
    return p


def _taps(pool: torch.fx.Node) -> int:
    return math.prod(as_ints(bound_args(pool)["kernel_size"], 2))


def conv_first_costs(o: int, c: int, p_in: int, p_out: int, taps: int) -> tuple[int, int]:
    """The work of (conv -> pool, pool -> conv) for a 1x1 convolution of ``c`` to ``o`` channels and a pool
    of ``taps`` from ``p_in`` to ``p_out`` positions, a multiply-add and a pool's add counted alike (a
    pool's add, memory bound, costs more, so moving the product to more positions is cautious)."""
    return o * c * p_in + o * p_out * taps, c * p_out * taps + o * c * p_out


def _match(pool: torch.fx.Node) -> CommutePool | None:
    """A commuting pair around the avg pool ``pool`` whose other order does less work, else None: the 1x1
    convolution that alone reads it (conv first after), or the one it alone reads (pool first after; its
    activation none, its bias only where the pool averages full windows, which keep a constant)."""
    if pool.op != "call_function" or pool.target != aten.avg_pool2d.default:
        return None
    a = bound_args(pool)
    x, out = _val(a["self"]), _val(pool)
    if x is None or out is None or x.dim() != 4 or not x.is_contiguous():  # the conv reads x dense
        return None
    p_in, p_out, taps = x.shape[2] * x.shape[3], out.shape[2] * out.shape[3], _taps(pool)
    conv = next(iter(pool.users)) if len(pool.users) == 1 else None
    p = _pointwise(conv, pool) if conv is not None else None
    if p is not None:
        first, second = _costs(p, p_in, p_out, taps)
        if first < second:
            return CommutePool(pool.name, conv.name)
    conv = a["self"]
    if not isinstance(conv, torch.fx.Node) or len(conv.users) != 1:
        return None
    p = conv_parts(conv)
    p = _pointwise(conv, p["input"]) if p is not None and isinstance(p["input"], torch.fx.Node) else None
    if p is None or p["act"] != "none" or _val(p["input"]) is None:
        return None
    full = as_ints(a["padding"], 2) == [0, 0] and not a["ceil_mode"] and a["divisor_override"] is None
    if p["bias"] is not None and not full:
        return None
    first, second = _costs(p, p_in, p_out, taps)
    return CommutePool(pool.name, conv.name, pool_first=True) if second < first else None


def _costs(parts: dict[str, Any], p_in: int, p_out: int, taps: int) -> tuple[int, int]:
    """``conv_first_costs`` for the 1x1 convolution whose arguments ``parts`` holds."""
    o, c = parts["weight"].meta["val"].shape[:2]
    return conv_first_costs(o, c, p_in, p_out, taps)


def propose(gm: torch.fx.GraphModule) -> list[CommutePool]:
    """The pairs to commute, each node in one pair at most (the first found in graph order)."""
    found, claimed = [], set()
    for node in gm.graph.nodes:
        m = _match(node)
        if m is not None and not {m.pool, m.conv} & claimed:
            found.append(m)
            claimed |= {m.pool, m.conv}
    return found


def _pool_args(pool: torch.fx.Node) -> tuple[list[int], list[int], list[int], bool, bool, int | None]:
    """avg_pool2d's arguments after its input, defaults filled in (stride [] where it is the kernel's)."""
    a = bound_args(pool)
    return (as_ints(a["kernel_size"], 2), as_ints(a["stride"], 2) if a["stride"] else [],
            as_ints(a["padding"], 2), bool(a["ceil_mode"]), bool(a["count_include_pad"]),
            a["divisor_override"])  # fmt: skip


def apply(gm: torch.fx.GraphModule, matches: list[CommutePool]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        pool, conv = nodes[m.pool], nodes[m.conv]
        p = conv_parts(conv)
        if p is None or (pool.args[0] is not conv if m.pool_first else p["input"] is not pool):
            raise PlanError(f"commute_pool: {m.pool} and {m.conv} are not an avg pool and its convolution")
        last = pool if m.pool_first else conv
        with gm.graph.inserting_before(last):
            if m.pool_first:
                y = emit(gm.graph, aten.avg_pool2d.default, p["input"], *_pool_args(pool))
                new = gm.graph.call_function(aten.conv2d.default, (y, p["weight"], p["bias"], [1, 1], [0, 0],
                                                                   [1, 1], 1))  # fmt: skip
            else:
                y = emit(
                    gm.graph, aten.conv2d.default, pool.args[0], p["weight"], None, [1, 1], [0, 0], [1, 1], 1
                )
                op = torch.ops.pathweave.avg_pool2d_act.default
                new = gm.graph.call_function(op, (y, *_pool_args(pool), p["bias"], p["act"]))
        new.meta = dict(last.meta)
        last.replace_all_uses_with(new)
        gm.graph.erase_node(last)
        gm.graph.erase_node(conv if m.pool_first else pool)
    verify(gm, matches)


def verify(gm: torch.fx.GraphModule, matches: list[CommutePool]) -> None:
    """Every commuted pair is gone from the graph, and each pool epilogue pools a convolution's output."""
    left = {n for m in matches for n in (m.pool, m.conv)} & {n.name for n in gm.graph.nodes}
    if left:
        raise PlanError(f"commute_pool: nodes {sorted(left)} were not rewritten")
    for n in gm.graph.nodes:
        if n.target == torch.ops.pathweave.avg_pool2d_act.default and n.args[0].target != aten.conv2d.default:
            raise PlanError(f"commute_pool: {n.name} does not pool a convolution's output")
