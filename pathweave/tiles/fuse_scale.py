"""Fold a squeeze-excitation gate into the 1x1 convolution after it (EfficientNet's, MobileNetV3's, RegNetY's
blocks), after ``fuse_epilogue``:

``conv2d(x * s, W)`` with ``s`` one number per image and channel (``[N, C, 1, 1]``, the gate's sigmoid)
-> ``pathweave::conv2d_act(x, W, ..., scale=s)``: the blocked 1x1 kernel multiplies the input by the gate
as it copies the tile's rows into its scratch (``tile_kernels.c``'s ``conv_blocked``), so the multiply's
pass over the tensor and its layer go, and ``x`` (the depthwise output, read by the gate's pool too) may
stay channel-blocked (``blocked.blocked_values``).

Only where that kernel runs and takes the convolution (``blocked.pointwise_blocked``: 1x1, no padding, one
group, a constant weight, in and out channels multiples of 8, kernels at a level of ``BLOCKED_ISAS``), of
stride 1; the tile graph splits its channels on blocks of 8 whatever the tile count (``build``), and the
binding refuses a scaled convolution on any other kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import aten, replace_chain, sole_user
from pathweave.tiles.blocked import pointwise_blocked
from pathweave.tiles.fuse_epilogue import conv_parts
from pathweave.tiles.maps import as_ints
from pathweave.tiles.runtime import gemm_isa

#: whether the pass folds gates (False: each multiply stays a layer of its own, for A/B)
FOLD = True


@dataclass(frozen=True)
class FuseScale:
    mul: str  # the multiply of the activation by its gate
    x: str  # the activation
    scale: str  # the gate, [N, C, 1, 1]
    conv: str  # the 1x1 conv2d / conv2d_act that alone reads the product


def _gate(mul: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """(x, s) of ``x * s`` (either order): float32 ``x`` [N, C, H, W] and ``s`` [N, C, 1, 1], both
    contiguous (the kernel reads the gate at n C + c)."""
    if mul.target != aten.mul.Tensor or len(mul.args) != 2 or mul.kwargs:
        return None
    a, b = mul.args
    if not isinstance(a, torch.fx.Node) or not isinstance(b, torch.fx.Node) or a is b:
        return None
    for x, s in ((a, b), (b, a)):
        xv, sv = x.meta.get("val"), s.meta.get("val")
        if not isinstance(xv, torch.Tensor) or not isinstance(sv, torch.Tensor) or xv.dim() != 4:
            continue
        n, c = xv.shape[:2]
        dense = xv.is_contiguous() and sv.is_contiguous()
        if xv.dtype == sv.dtype == torch.float32 and dense and tuple(sv.shape) == (n, c, 1, 1):
            return x, s
    return None


def _takes(conv: torch.fx.Node, mul: torch.fx.Node) -> bool:
    """A convolution of stride 1 the blocked kernel takes (``blocked.pointwise_blocked``), reading ``mul`` as
    its input only."""
    parts = conv_parts(conv)
    return (
        parts is not None
        and parts["input"] is mul
        and parts["residual"] is not mul
        and as_ints(parts["stride"], 2) == [1, 1]
        and pointwise_blocked(conv, gemm_isa())
    )


def propose(gm: torch.fx.GraphModule) -> list[FuseScale]:
    if not FOLD:
        return []
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or (gate := _gate(node)) is None:
            continue
        conv = sole_user(node)
        if conv is not None and _takes(conv, node):
            found.append(FuseScale(node.name, gate[0].name, gate[1].name, conv.name))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[FuseScale]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        # a convolution fused before may be this one's activation or gate (gated layers in a chain)
        conv, x, s = nodes[m.conv], nodes[m.x], nodes[m.scale]
        p = conv_parts(conv)
        assert p is not None  # proposed from these parts
        args = (x, p["weight"], p["bias"], p["residual"], p["stride"], p["padding"], p["dilation"])
        with gm.graph.inserting_before(conv):
            fused = gm.graph.call_function(
                torch.ops.pathweave.conv2d_act.default,
                (*args, int(p["groups"]), p["act"], s),
            )
        replace_chain(gm, fused, (conv, nodes[m.mul]))
        nodes[m.conv] = fused
