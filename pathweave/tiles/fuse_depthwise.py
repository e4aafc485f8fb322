"""Fuse a depthwise convolution into the 1x1 convolution that alone reads it (BrainSlug's depth-first
idea on tiles; MobileNet's and NASNet's separable convolutions), after ``fuse_epilogue``:

``conv2d_act(depthwise(x), W)`` -> ``pathweave::dw_pw_conv``: a tile of the fused layer computes the
depthwise rows of every channel of its block of output rows into the worker's scratch (with the depthwise
epilogue: bias, activation) and the pointwise product over them while they are in cache
(native/tile_depthwise.c's ``pw_dwpw_tile``), instead of writing the depthwise output to memory for the
tiles of another layer to read back. The 1x1 convolution keeps its own epilogue (bias, residual,
activation).

Measured, the fused tile costs about what the two layers' tiles do (the depthwise sums dominate; the
round trip through L2/L3 saved is small), less on large maps and more on small ones, where its tiles,
which split output rows only, also re-read the 1x1 weights per block: so a pair is fused only where one
image's depthwise output is at least ``MIN_BYTES`` (``worth``). The 1x1 weight must be a constant of at
least ``PANEL_ROWS`` output channels (the kernel reads it packed). Off unless ``PATHWEAVE_TILES_FUSE_DW=1``:
on MobileNetV2 (3 pairs fused) A/B runs in one process gave median paired ratios from 0.98 to 1.03 on
1 worker and 0.95 to 1.01 on 2, no gain the measurements could tell from noise (docs/tiles.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.fx
import torch.nn.functional as F

from pathweave.errors import PlanError
from pathweave.passes.util import constant
from pathweave.tiles.abi import PANEL_ROWS
from pathweave.tiles.conv_layout import is_depthwise
from pathweave.tiles.fuse_epilogue import activate, conv_parts
from pathweave.tiles.maps import as_ints, bound_args

#: the environment variable that turns the pass on ("1"; off by default: no measured gain)
ENV = "PATHWEAVE_TILES_FUSE_DW"
#: the activations both halves' epilogues apply (native/tile_kernels.c's ``pw_activate``; GPT-2's tanh
#: GELU is the transformer kernels' only)
ACTS = ("none", "relu", "gelu", "tanh", "silu", "hardswish", "hardsigmoid", "relu6", "sigmoid")
#: the fewest output rows (per image) a fused layer has: its tiles split rows only, and 2 workers
#: share it
MIN_ROWS = 4
#: the smallest depthwise output fused: one that the cache held anyway gained nothing from it (kernel
#: time, 1 worker: 14x14 and 7x7 pairs 0-10% slower fused, 112x112 ones 3-10% faster)
MIN_BYTES = 1 << 20
#: the fewest tiles a fused layer takes (where it has the rows), so that the workers share it
MIN_TILES = 2


def _dw_pw_conv(
    input: torch.Tensor,
    dw_weight: torch.Tensor,
    dw_bias: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    dw_act: str,
    act: str,
) -> torch.Tensor:
    y = activate(F.conv2d(input, dw_weight, dw_bias, stride, padding, dilation, input.shape[1]), dw_act)
    z = F.conv2d(y, weight, bias)
    return activate(z if residual is None else z + residual, act)


# registered when this module is first imported (by the tiles strategy)
dw_pw_conv = torch.library.custom_op("pathweave::dw_pw_conv", _dw_pw_conv, mutates_args=())
dw_pw_conv.register_fake(_dw_pw_conv)


@dataclass(frozen=True)
class FuseDepthwise:
    depthwise: str  # the depthwise conv2d / conv2d_act node
    pointwise: str  # the 1x1 conv2d / conv2d_act that alone reads it


def _pointwise(node: torch.fx.Node, source: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    """A 1x1 convolution of ``source`` alone (stride 1, no padding, one group) with a constant weight (the
    fused kernel reads it packed) and an epilogue the fused kernel applies."""
    p = conv_parts(node)
    if p is None or p["input"] is not source or int(p["groups"]) != 1 or p["act"] not in ACTS:
        return False
    if p["residual"] is source:  # pw(y) + y: y is read twice, and must be written
        return False
    w = constant(gm, p["weight"])
    if w is None or w.dim() != 4 or w.dtype != torch.float32 or w.shape[0] < PANEL_ROWS:
        return False
    window = [as_ints(p[k], 2) for k in ("stride", "padding", "dilation")]
    return tuple(w.shape[2:]) == (1, 1) and window == [[1, 1], [0, 0], [1, 1]]


def flops(node: torch.fx.Node) -> int:
    """A ``dw_pw_conv`` node's multiply-adds, twice: the depthwise window per depthwise output and the
    1x1 product's input channels per output."""
    args = bound_args(node)
    n, o, oh, ow = node.meta["val"].shape
    k, _, kh, kw = args["dw_weight"].meta["val"].shape
    return 2 * n * oh * ow * k * (kh * kw + o)


def worth(depthwise: torch.fx.Node) -> bool:
    """Whether fusing pays: the depthwise output of one image is one the cache would not hold anyway
    (``MIN_BYTES``), and the fused layer's tiles, which split output rows only, have ``MIN_ROWS``."""
    v = depthwise.meta["val"]
    per_image = v[0].numel() * v.element_size() if v.shape[0] else 0
    return v.shape[2] >= MIN_ROWS and per_image >= MIN_BYTES


def propose(gm: torch.fx.GraphModule) -> list[FuseDepthwise]:
    if os.environ.get(ENV, "0").strip() != "1":
        return []
    found = []
    for node in gm.graph.nodes:
        p = conv_parts(node)
        if p is None or len(node.users) != 1 or not is_depthwise(node) or p["residual"] is not None:
            continue
        user = next(iter(node.users))
        val = node.meta.get("val")
        if p["act"] not in ACTS or not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
            continue
        if _pointwise(user, node, gm) and worth(node):
            found.append(FuseDepthwise(node.name, user.name))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[FuseDepthwise]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        dw, pw = nodes[m.depthwise], nodes[m.pointwise]
        d, p = conv_parts(dw), conv_parts(pw)
        if d is None or p is None:  # a match of another graph
            raise PlanError(f"fuse_depthwise: {m.depthwise} -> {m.pointwise} is not a pair of convolutions")
        stride, padding, dilation = ([int(e) for e in d[k]] * (2 if len(d[k]) == 1 else 1)
                                     for k in ("stride", "padding", "dilation"))  # fmt: skip
        with gm.graph.inserting_before(pw):
            fused = gm.graph.call_function(
                torch.ops.pathweave.dw_pw_conv.default,
                (d["input"], d["weight"], d["bias"], p["weight"], p["bias"], p["residual"], stride, padding,
                 dilation, d["act"], p["act"]),
            )  # fmt: skip
        fused.meta = dict(pw.meta)
        pw.replace_all_uses_with(fused)
        gm.graph.erase_node(pw)
        gm.graph.erase_node(dw)
    verify(gm, matches)


def verify(gm: torch.fx.GraphModule, matches: list[FuseDepthwise]) -> None:
    """Every fused pair is gone from the graph (``apply`` replaced both nodes)."""
    left = {n for m in matches for n in (m.depthwise, m.pointwise)} & {n.name for n in gm.graph.nodes}
    if left:
        raise PlanError(f"fuse_depthwise: nodes {sorted(left)} were not rewritten")
