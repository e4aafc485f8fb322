"""Which activations the tiles keep channel-blocked ([C/8][H][W][8] per image, oneDNN's nChw8c) between
1x1 convolutions (issue 21).

On an AVX2 CPU the tiles' 1x1 kernel over NCHW rows ran ResNet-50's 1x1 layers 1.4-1.6x slower than
OpenVINO and ONNX Runtime, whose activations stay blocked: each k of the product starts a new row of the
input a plane away, and the epilogue writes the output and reads the residual a plane apart per channel.
A kernel with vectors along the output channels over a blocked input (``native/tile_gemm_b.c``) runs
those shapes 1.0-1.9x faster alone, but the copy into blocks and the NCHW store ate the gain when every
buffer stayed NCHW. So a value is kept blocked where every kernel that touches it reads and writes that
layout: its producer and each of its readers are 1x1 convolutions of that kernel (``blocked_capable``),
reading it as their input or as their residual. In ResNet the blocks' outputs then stay blocked from one
block to the next (the expanding 1x1 writes them, the next block's reducing 1x1 and residual read them);
the 3x3 layers between keep NCHW, and the 1x1 kernel reads and writes both layouts.

A 1x1 layer that ``blocked_capable`` takes but whose values all stay NCHW (GoogLeNet's and Inception's,
read by pools and concatenations) runs the same kernel too, its input copied into blocks per tile: once
the kernel's weight vectors were pinned in registers, that was faster than the row-vector kernel (paired
A/B at 1 worker, Zen 3: Inception-v3 1.04x, GoogLeNet 1.02x, DenseNet-121 1.09x, NASNet-A 1.09x,
SqueezeNet 1.07x, ResNet-50 1.04x, MobileNetV2 and EfficientNet-B0 1.00x; Inception's changed layers
46.8 -> 40.6 ms, GoogLeNet's 13.7 -> 11.4; before the pin it was 0.99-1.00x and not taken).

The same kernel runs kh x kw convolutions that are not Winograd's (``window_capable``: Inception's 1x7,
7x1, 3x1 and 1x3 layers, stride-2 3x3 layers, 5x5 layers, 3x3 layers over 7x7 and 8x8 maps): each tile
copies its input rows into blocks of zero-padded rows once per worker (``conv_window`` in tile_kernels.c)
and each tap reads a shift of that copy, with the weights packed [C/8][taps][8][24]; the output stays
NCHW. Against the transposed micro-kernel ("narrow", "padded") on an AVX2 Zen 3: Inception-v3 1.15x faster
at 1 worker and 1.12x at 2 (paired A/B in one process; its changed layers 96.7 -> 74.6 ms at 1 worker),
ResNet-50 1.00x, GoogLeNet 0.97-1.00x (its changed layers 2.84 -> 2.30 ms), DenseNet-121 1.04x,
MobileViT-XS 1.06x, SqueezeNet 1.00x.

A window of fewer than 8 input channels (a stem's 3) folds them with its taps (``window_folded``): its C kh
kw terms form one sum, each read from a zero-padded NCHW copy at an offset of its own (``conv_folded``);
in blocks of 8 most lanes would be zeros. ResNet's 7x7/2 stem 0.81x the time of the transposed kernel,
Inception's 3x3/2 0.59x of the row-vector one (1 worker, paired, AVX2 Zen 3).

Tiles of these layers start on channels that are multiples of 8 (``build.CHANNEL_ALIGN``), so a tile's
box of a blocked value is its own memory, and its span lies inside the span ``memory`` orders reuse by.
"""

from __future__ import annotations

import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.tiles.abi import BLK_IN, BLK_OUT, BLK_RES, WINDOW_TAPS
from pathweave.tiles.conv_layout import WINOGRAD_MIN_CHANNELS, conv_layout, is_depthwise
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.maps import as_ints, bound_args, shape
from pathweave.tiles.rows import base_node, is_constant

#: the kernel levels at which 1x1 layers keep their activations blocked (``()``: every buffer NCHW, for
#: A/B in one process)
BLOCKED_ISAS = ("avx2",)
#: the kernel levels at which kh x kw convolutions that are not Winograd's take the same kernel on a
#: blocked copy of their input (``window_capable``; ``()``: the transposed and row-vector kernels, for A/B)
WINDOW_ISAS = ("avx2",)
#: the activations the kernel applies in registers as it stores a layer's output (``store_quad``)
BLOCKED_ACTS = ("none", "relu", "relu6")
#: whether a layer of any other activation (SiLU, hard swish, GELU, ...) takes the kernel too, its output
#: kept NCHW and the activation applied after the store (``conv_tile``'s epilogue; False: not, for A/B)
OTHER_ACTS_NCHW = True
#: whether such a layer's output (and a depthwise layer's of any activation) may stay blocked too, the
#: activation applied after the store over the tile's blocks (False: NCHW only, for A/B)
OTHER_ACTS_BLOCKED = True
#: whether depthwise layers between blocked values read and write them blocked (``depthwise_capable``;
#: False: they keep NCHW, for A/B)
DEPTHWISE_BLOCKED = True
#: whether the depthwise layers kept blocked split rows instead of channels (``row_split_depthwise``;
#: False: channels, for A/B)
DEPTHWISE_ROWS = True
#: whether stems (windows of fewer than 8 input channels, ``stem_capable``) may write blocked outputs
#: (False: NCHW, for A/B)
STEMS_BLOCKED = True
#: channels per block (one AVX2 vector)
BLOCK = 8
#: windows of fewer input channels than this fold them with their taps (``window_folded``; 0: none, for A/B)
FOLD_BELOW = BLOCK


def _conv_operands(node: torch.fx.Node) -> tuple[dict, tuple[int, ...], tuple[int, ...]] | None:
    """A 2-D convolution's bound arguments and its weight's and input's shapes, where its output is 4-D,
    its input a node, its weight a constant and its padding numeric (None otherwise)."""
    if op_name(node) not in ("conv2d", "conv2d_act") or len(shape(node)) != 4:
        return None
    args = bound_args(node)
    weight, x = args.get("weight"), args.get("input")
    if not isinstance(x, torch.fx.Node) or not is_constant(weight) or isinstance(args["padding"], str):
        return None
    return args, shape(weight), shape(x)


def blocked_capable(node: torch.fx.Node, graph: TileGraph, index: int, isa: str) -> bool:
    """A layer ``tile_gemm_b.c`` can run: ``pointwise_blocked``, with channel tiles that split its channels
    into one set of ranges (its weights are packed per range)."""
    return pointwise_blocked(node, isa) and channel_ranges(graph, index) is not None


def pointwise_blocked(node: torch.fx.Node, isa: str) -> bool:
    """The rules of ``blocked_capable`` that need no tile graph (``fuse_scale`` asks them before there is
    one): a 1x1 convolution of stride 1 or 2 without padding of one group, a constant weight, in and out
    channels multiples of 8, an activation of ``BLOCKED_ACTS`` (any, applied after the store, with
    ``OTHER_ACTS_NCHW``), a residual of the output's shape, kernels at a level of ``BLOCKED_ISAS``."""
    operands = _conv_operands(node) if isa in BLOCKED_ISAS else None
    if operands is None:
        return False
    args, w, xs = operands
    residual = args.get("residual")
    return (
        len(w) == 4
        and len(xs) == 4
        and tuple(w[2:]) == (1, 1)
        and int(args["groups"]) == 1
        and tuple(as_ints(args["stride"], 2)) in ((1, 1), (2, 2))
        and tuple(as_ints(args["padding"], 2)) == (0, 0)
        and w[0] % BLOCK == 0
        and w[1] % BLOCK == 0
        and ((args.get("act") or "none") in BLOCKED_ACTS or OTHER_ACTS_NCHW)
        and (residual is None or tuple(shape(residual)) == tuple(shape(node)))
    )


def window_capable(node: torch.fx.Node, graph: TileGraph, index: int, isa: str, layout: str | None) -> bool:
    """A kh x kw convolution ``tile_gemm_b.c`` runs on a blocked copy of its NCHW input (``conv_window``):
    kernels at a level of ``WINDOW_ISAS``, not Winograd's (``layout``), one group, a constant weight, the
    same stride both ways, no dilation, numeric padding, out channels a multiple of 8, in channels too (and
    at most ``WINDOW_TAPS`` taps) or fewer than 8 (``window_folded``, any taps), and channel tiles that split
    its channels into one set of ranges."""
    operands = _conv_operands(node) if isa in WINDOW_ISAS and layout != "winograd" else None
    if operands is None:
        return False
    args, w, xs = operands
    stride = as_ints(args["stride"], 2)
    return (
        len(w) == 4
        and len(xs) == 4
        and 1 < w[2] * w[3]
        and int(args["groups"]) == 1
        and stride[0] == stride[1]
        and as_ints(args["dilation"], 2) == [1, 1]
        and w[0] % BLOCK == 0
        and (w[1] % BLOCK == 0 and w[2] * w[3] <= WINDOW_TAPS or window_folded(w[1]))
        and channel_ranges(graph, index) is not None
    )


def depthwise_capable(node: torch.fx.Node, graph: TileGraph, index: int, isa: str) -> bool:
    """A depthwise layer ``tile_gemm_b.c``'s ``pw_depthwise_blocked`` can run on a blocked input into a
    blocked output: kernels at a level of ``BLOCKED_ISAS``, one input channel per group and one output
    per input channel, a multiple of 8 of them, a constant weight of at most ``WINDOW_TAPS`` taps, the
    same stride both ways, no dilation, numeric padding narrower than the window, an activation of
    ``BLOCKED_ACTS`` (any, with ``OTHER_ACTS_BLOCKED``), no residual, and channel tiles that split its
    channels into ranges of 8."""
    operands = _conv_operands(node) if isa in BLOCKED_ISAS else None
    if operands is None:
        return False
    args, w, xs = operands
    stride, pad = as_ints(args["stride"], 2), as_ints(args["padding"], 2)
    return (
        len(w) == 4
        and len(xs) == 4
        and int(args["groups"]) == xs[1] == w[0]
        and w[1] == 1
        and xs[1] % BLOCK == 0
        and w[2] * w[3] <= WINDOW_TAPS
        and stride[0] == stride[1]
        and as_ints(args["dilation"], 2) == [1, 1]
        and pad[0] < w[2]
        and pad[1] < w[3]
        and _act_kept_blocked(args)
        and args.get("residual") is None
        and channel_ranges(graph, index) is not None
    )


def pool_capable(node: torch.fx.Node, isa: str) -> bool:
    """A global average pool (``adaptive_avg_pool2d`` to 1 x 1 of a 4-D input: a squeeze-excitation's
    squeeze) at a level of ``BLOCKED_ISAS``: ``tile_kernels.c``'s ``adaptive_tile`` reads a blocked input
    (its output stays NCHW: one number per channel)."""
    return (
        isa in BLOCKED_ISAS
        and op_name(node) in ("adaptive_avg_pool2d", "_adaptive_avg_pool2d")
        and len(shape(node)) == 4
        and tuple(shape(node)[2:]) == (1, 1)
    )


def stem_capable(
    node: torch.fx.Node, graph: TileGraph, index: int, isa: str, winograd_min_channels: int
) -> bool:
    """A window of fewer than 8 input channels on the folded kernel (``window_capable`` and
    ``window_folded``: a stem, ``conv_folded``), whose output may stay blocked (``STEMS_BLOCKED``); its input
    is read NCHW. ``winograd_min_channels``: the strategy's, which decides whether the window is
    Winograd's instead (``conv_layout``)."""
    operands = _conv_operands(node) if STEMS_BLOCKED else None
    # one input channel of one group counts as depthwise (groups == channels): the binding would take it so
    if operands is None or not window_folded(operands[1][1]) or is_depthwise(node):
        return False
    return window_capable(node, graph, index, isa, conv_layout(node, winograd_min_channels))


def window_folded(in_channels: int) -> bool:
    """Whether a window on the blocked kernel folds its input channels, rows and columns into one sum of
    C kh kw terms (``tile_kernels.c``'s ``conv_folded``), read from an NCHW copy: fewer than ``FOLD_BELOW``
    channels (a stem's 3), which in blocks of 8 would leave most lanes zero."""
    return in_channels < FOLD_BELOW


def channel_ranges(graph: TileGraph, index: int) -> list[tuple[int, int]] | None:
    """The output channel ranges of a layer's tiles, sorted, if they split its channels into disjoint
    ranges that start on multiples of ``BLOCK`` (None otherwise)."""
    lo, hi = graph.layer_tile_start[index], graph.layer_tile_start[index + 1]
    ranges = sorted(
        {(int(a), int(b)) for a, b in zip(graph.tile_lo[lo:hi, 1], graph.tile_hi[lo:hi, 1], strict=True)}
    )
    ends = [a for a, _ in ranges[1:]] + [int(graph.layer_shapes[index][1])]
    pieces = zip(ranges, ends, strict=True)
    ok = bool(ranges) and ranges[0][0] == 0 and all(b == e and a % BLOCK == 0 for (a, b), e in pieces)
    return ranges if ok else None


def blocked_values(
    gm: torch.fx.GraphModule, graph: TileGraph, isa: str, winograd_min_channels: int = WINOGRAD_MIN_CHANNELS
) -> frozenset[str]:
    """The layers whose outputs the program keeps blocked: each is ``blocked_capable`` with an activation
    of ``BLOCKED_ACTS`` (any, with ``OTHER_ACTS_BLOCKED``), or ``depthwise_capable``
    (``DEPTHWISE_BLOCKED``), and every user of its output is such a layer reading it as its input or
    residual, or a ``pool_capable`` global pool (never a graph output, a view or another kernel); a
    ``stem_capable`` window too, which writes blocks but reads NCHW. A depthwise layer reads and writes
    blocked only: it counts where its input and its output both stay blocked, and the sets are recomputed
    without the ones that do not until none is dropped (the sets only shrink)."""
    index = {str(name): i for i, name in enumerate(graph.layer_names)}
    nodes = {n.name: n for n in gm.graph.nodes}
    capable = {name for name, i in index.items() if blocked_capable(nodes[name], graph, i, isa)}
    pools = {name for name in index if pool_capable(nodes[name], isa)}
    stems = {n for n, i in index.items() if stem_capable(nodes[n], graph, i, isa, winograd_min_channels)}
    depthwise = (
        {name for name, i in index.items() if depthwise_capable(nodes[name], graph, i, isa)}
        if DEPTHWISE_BLOCKED
        else set()
    )
    while True:
        speakers = capable | depthwise  # read and write blocks
        kept = set()
        for name in speakers | stems:
            node = nodes[name]
            users = list(node.users)
            if not _act_kept_blocked(bound_args(node)):
                continue  # its activation runs after the store, on an NCHW output
            if users and all(_reads_blocked(u, node, speakers, pools) for u in users):
                kept.add(name)
        dropped = {d for d in depthwise if d not in kept or bound_args(nodes[d])["input"].name not in kept}
        if not dropped:
            return frozenset(kept)
        depthwise -= dropped


def _act_kept_blocked(args: dict) -> bool:
    """Whether a layer's activation leaves its output blocked: one the store applies (``BLOCKED_ACTS``), or
    any with ``OTHER_ACTS_BLOCKED``."""
    return (args.get("act") or "none") in BLOCKED_ACTS or OTHER_ACTS_BLOCKED


def row_split_depthwise(
    gm: torch.fx.GraphModule, graph: TileGraph, isa: str, winograd_min_channels: int = WINOGRAD_MIN_CHANNELS
) -> frozenset[str]:
    """The depthwise layers of ``blocked_values`` (with ``DEPTHWISE_ROWS``): ``pw_depthwise_blocked`` reads
    a tile's halo rows where they lie in the blocked input (the NCHW kernel copies them, so its tiles split
    channels), so their tiles may split rows (``build_tile_graph``'s ``row_split``). Their channel ranges
    then span the layer, which keeps them and their neighbours blocked."""
    if not DEPTHWISE_ROWS:
        return frozenset()
    nodes = {n.name: n for n in gm.graph.nodes}
    kept = blocked_values(gm, graph, isa, winograd_min_channels)
    return frozenset(name for name in kept if is_depthwise(nodes[name]))


def inplace_residuals(
    gm: torch.fx.GraphModule, graph: TileGraph, isa: str, winograd_min_channels: int = WINOGRAD_MIN_CHANNELS
) -> dict[int, int]:
    """Proposals for ``memory.plan_buffers``: layer index -> the index of the layer whose buffer it may
    overwrite. A 1x1 layer on this kernel with a residual (a ResNet block's expanding convolution and its
    shortcut) reads each residual element once, in the epilogue of the quad that then stores the output
    element at the same place (``store_quad``: sums in registers, one pass over k), so it can write its
    output over the residual where the two share a layout (both blocked or both NCHW) and the residual
    is a layer of the same shape that the convolution reads nowhere else. Whether the convolution is the
    residual's last reader, and the tile order that makes the overwrite safe, are the plan's to check."""
    index = {str(name): i for i, name in enumerate(graph.layer_names)}
    nodes = {n.name: n for n in gm.graph.nodes}
    kept = blocked_values(gm, graph, isa, winograd_min_channels)
    found: dict[int, int] = {}
    for name, i in index.items():
        node = nodes[name]
        if not blocked_capable(node, graph, i, isa):
            continue
        args = bound_args(node)
        residual = args.get("residual")
        if not isinstance(residual, torch.fx.Node) or residual.name not in index:
            continue
        bits = layout_bits(node, kept)
        if bool(bits & BLK_OUT) != bool(bits & BLK_RES) or tuple(shape(residual)) != tuple(shape(node)):
            continue
        others = [v for k, v in args.items() if k != "residual" and isinstance(v, torch.fx.Node)]
        if any(base_node(n, index) is residual for n in others):
            continue  # its input too (or a view of it): other tiles would read what one wrote
        found[i] = index[residual.name]
    return found


def _reads_blocked(user: torch.fx.Node, value: torch.fx.Node, speakers: set[str], pools: set[str]) -> bool:
    """Whether ``user`` can read ``value`` blocked: a layer of ``speakers`` reading it as its input or
    residual, or a global pool of ``pools`` reading it."""
    if user.name in pools:
        return bound_args(user)["self"] is value
    return user.name in speakers and _reads_as_activation(user, value)


def _reads_as_activation(user: torch.fx.Node, value: torch.fx.Node) -> bool:
    """Whether ``user`` reads ``value`` only as its input or its residual."""
    args = bound_args(user)
    roles = {k for k, v in args.items() if v is value}
    other = any(value in (v if isinstance(v, (list, tuple)) else ()) for v in args.values())
    return bool(roles) and roles <= {"input", "residual"} and not other


def layout_bits(node: torch.fx.Node, kept: frozenset[str]) -> int:
    """``S_LAYOUT``'s bits for a ``blocked_capable`` layer: which of its input, output and residual
    are blocked (``abi.BLK_*``); 0 where none is (the kernel reads and writes NCHW)."""
    args = bound_args(node)
    residual = args.get("residual")
    return (
        (BLK_IN if args["input"].name in kept else 0)
        | (BLK_OUT if node.name in kept else 0)
        | (BLK_RES if isinstance(residual, torch.fx.Node) and residual.name in kept else 0)
    )
