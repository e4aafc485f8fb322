"""Kernel binders of the CNN ops (``native/tile_kernels.c``, slots in ``native/tile_kernels.h``):
convolution (with Winograd and the packed micro-kernels' weights), pooling, linear, element-wise ops,
inference batch norm, constant padding and concatenation. Each fills one layer's row
(``rows.LayerRow``) and returns the scratch floats a tile needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.tiles.abi import (
    ACT_CLAMP,
    ACT_ELU,
    ACT_LEAKY_RELU,
    ACT_NONE,
    ACT_POW,
    ACT_RECIPROCAL,
    ACT_RELU6,
    ACT_RSQRT,
    ACT_SQRT,
    ACT_SQUARE,
    ACTS,
    BINOPS,
    BLK_IN,
    BLK_OUT,
    BLOCK_GROUP,
    DW_SLACK,
    K_ADAPTIVE,
    K_AFFINE,
    K_AVGPOOL,
    K_BILINEAR,
    K_CAT,
    K_CONV,
    K_DEPTHWISE,
    K_DWPW,
    K_EWISE,
    K_LINEAR,
    K_MAXPOOL,
    K_NEAREST,
    K_PAD,
    K_SHUFFLE,
    KOFF_PAD,
    MATHS,
    PACK_BLOCKED,
    PACKS,
    PANEL_ROWS,
    PANEL_ROWS_T,
    S_ACT,
    S_ACT_P,
    S_ALPHA,
    S_AUX,
    S_BIAS,
    S_BINOP,
    S_COUNT_PAD,
    S_DH,
    S_DIVISOR,
    S_DW,
    S_GROUPS,
    S_KH,
    S_KW,
    S_LAYOUT,
    S_NAUX,
    S_OP,
    S_OSHAPE,
    S_OUT,
    S_PH,
    S_POINTWISE,
    S_PW,
    S_SCALAR,
    S_SCALE,
    S_SH,
    S_SW,
    S_W,
    S_WPACK,
    S_WPACK_T,
    S_X,
    S_XSHAPE,
    S_XSTRIDE,
    S_Y,
    S_YSTRIDE,
    SLOTS,
    WINDOW_FOLD,
)
from pathweave.tiles.blocked import (
    blocked_capable,
    channel_ranges,
    layout_bits,
    window_capable,
    window_folded,
)
from pathweave.tiles.conv_layout import NARROW_MAX_POSITIONS, conv_layout, is_depthwise
from pathweave.tiles.maps import as_ints
from pathweave.tiles.resize import kernel_tables, resize_of
from pathweave.tiles.rows import (
    LayerRow,
    NoKernel,
    View,
    dense_view,
    is_constant,
    out_shape,
    packed_once,
    pad4,
)
from pathweave.tiles.runtime import blocked_floats, dwpw_scratch, winograd_scratch

#: the element-wise kernel's activations by op name (those without parameters, which epilogues apply too)
UNARY = {
    "relu": "relu",
    "gelu": "gelu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "silu": "silu",
    "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid",
}
#: Winograd F(2x2, 3x3)'s weight transform G (U = G g G^T, native/tile_winograd.c)
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


def pack_weights(w: np.ndarray, groups: int, rows: int = PANEL_ROWS) -> np.ndarray | None:
    """Convolution weights [O, C/groups, kh, kw] in the micro-kernels' panels: per group, its rows
    padded with zeros to whole panels of ``rows``, each panel stored k-major ([K][rows]).
    None where a group has fewer rows than a panel (depthwise): those keep the sgemm path."""
    out_channels = w.shape[0]
    per_group = out_channels // groups
    if per_group < rows:
        return None
    k = int(np.prod(w.shape[1:]))
    panels = -(-per_group // rows)
    padded = np.zeros((groups, panels * rows, k), dtype=np.float32)
    padded[:, :per_group] = w.reshape(groups, per_group, k)
    return np.ascontiguousarray(padded.reshape(groups * panels, rows, k).transpose(0, 2, 1))


def _packed(weight: torch.fx.Node, w: View, groups: int, rows: int) -> np.ndarray | None:
    """The packed weights (panels of ``rows``), made once per weight node and shared by every program of
    the graph; None for a weight that is not a constant (it keeps the sgemm path, which reads it at run
    time)."""
    if not is_constant(weight):
        return None
    return packed_once(weight, (groups, rows), lambda: pack_weights(w.array(), groups, rows))


def conv(t: LayerRow) -> int:
    """conv2d and ``fuse_epilogue``'s conv2d_act (bias, residual, activation in the store); a layer whose
    output ``blocked_values`` keeps blocked must have been bound to a kernel that writes blocks."""
    scratch = _conv(t)
    if t.blocked and t.node.name in t.blocked and not int(t.row[S_LAYOUT]) & BLK_OUT:
        raise NoKernel("its output is to stay channel-blocked, but its kernel writes NCHW")
    return scratch


def _conv(t: LayerRow) -> int:
    node, args, row, view = t.node, t.args, t.row, t.view
    x = dense_view(view(args["input"]), "input")
    w = dense_view(view(args["weight"]), "weight")
    if len(x.shape) != 4 or isinstance(args["padding"], str):
        raise NoKernel("2-D convolutions with numeric padding only")
    row[S_OP], row[S_ACT], row[S_X], row[S_W] = K_CONV, ACTS[args.get("act") or "none"], x.address, w.address
    if args.get("bias") is not None:
        row[S_BIAS] = dense_view(view(args["bias"]), "bias").address
    if args.get("residual") is not None:
        res = dense_view(view(args["residual"]), "residual")
        if res.shape != out_shape(node):
            raise NoKernel("residual of another shape")
        row[S_Y] = res.address
    row[S_XSHAPE : S_XSHAPE + 4] = x.shape
    kh, kw = w.shape[2], w.shape[3]
    (sh, sw), (ph, pw), (dh, dw) = (as_ints(args[k], 2) for k in ("stride", "padding", "dilation"))
    row[S_KH : S_GROUPS + 1] = [kh, kw, sh, sw, ph, pw, dh, dw, int(args["groups"])]
    out = out_shape(node)
    lo, hi = t.graph.layer_tile_start[t.index], t.graph.layer_tile_start[t.index + 1]
    if np.any(t.graph.tile_lo[lo:hi, 3] != 0) or np.any(t.graph.tile_hi[lo:hi, 3] != out[3]):
        raise NoKernel("tiles must span whole output rows")
    if is_depthwise(node) and t.blocked and node.name in t.blocked:
        return _depthwise_blocked(t, w)
    if is_depthwise(node):
        return _depthwise(t, x)
    layout = conv_layout(node, t.winograd_min_channels)
    scratch = _own_kernel(t, w, x, layout)
    if scratch is not None:
        return scratch
    if layout == "winograd":  # a weight given at run time: the direct kernels read it as it comes
        layout = None
    packed = _packed(args["weight"], w, int(args["groups"]), PANEL_ROWS_T) if layout else None
    if packed is None:  # fewer output channels than its panel: the row-vector kernels' panels of 8
        layout = None
        packed = _packed(args["weight"], w, int(args["groups"]), PANEL_ROWS)
    if packed is not None:
        t.keep.append(packed)
        row[S_WPACK], row[S_WPACK_T] = packed.ctypes.data, PACKS[layout]
    # a 1x1 stride-1 convolution multiplies the input as it lies (no im2col, no scratch); the kernel
    # takes this decision from the row, so the scratch sized here always fits what it does
    row[S_POINTWISE] = kh == kw == 1 and (sh, sw, ph, pw) == (1, 1, 0, 0) and out[2:] == x.shape[2:]
    return _conv_scratch(t, x, layout, k=x.shape[1] // int(args["groups"]) * kh * kw)


def _scaled(t: LayerRow, w: View, x: View) -> int:
    """A 1x1 layer whose input a squeeze-excitation gate scales (``fuse_scale``): the blocked kernel, which
    multiplies the input by the gate as it copies the tile's rows into blocks."""
    gate = dense_view(t.view(t.args["scale"]), "scale")
    if gate.shape != (x.shape[0], x.shape[1], 1, 1):
        raise NoKernel(f"a gate of shape {gate.shape} for an input of shape {x.shape}")
    if int(t.row[S_SH]) != 1 or int(t.row[S_SW]) != 1:
        raise NoKernel("a convolution scaled by a gate must have stride 1")
    if not blocked_capable(t.node, t.graph, t.index, t.isa):
        raise NoKernel("a convolution scaled by a gate runs on the channel-blocked 1x1 kernel only")
    t.row[S_SCALE] = gate.address
    return _blocked(t, w, x, layout_bits(t.node, t.blocked) if t.blocked else 0)


def _own_kernel(t: LayerRow, w: View, x: View, layout: str | None) -> int | None:
    """The scratch of a layer bound to a kernel of its own (channel-blocked, Winograd), None for the
    packed micro-kernels. Narrow tiles and padded inputs take the transposed micro-kernel, 3x3 layers
    Winograd's, at every instruction set level (the C picks each kernel's width at run time)."""
    if t.args.get("scale") is not None:  # fuse_scale's gate: the blocked kernel's only
        return _scaled(t, w, x)
    # a 1x1 layer on the blocked kernel (tiles/blocked.py): next to channel-blocked activations, or NCHW
    # in and out (its input copied into blocks per tile); a stem that writes blocks is a window (below)
    if blocked_capable(t.node, t.graph, t.index, t.isa):
        return _blocked(t, w, x, layout_bits(t.node, t.blocked) if t.blocked else 0)
    if window_capable(t.node, t.graph, t.index, t.isa, layout):
        return _window(t, w, x)
    # fewer output channels than one panel of the transposed micro-kernel (a lowered
    # winograd_min_channels): the direct kernels
    if layout == "winograd" and is_constant(t.args["weight"]) and w.shape[0] >= PANEL_ROWS_T:
        return _winograd(t, w)
    return None


def _blocked(t: LayerRow, w: View, x: View, bits: int) -> int:
    """A 1x1 layer on ``native/tile_gemm_b.c``: its weights packed per channel range of its tiles in
    groups of rows (``_block_groups``: [K8][width], K padded with zeros to a multiple of 8; a range
    starting at channel o at o * K8), S_LAYOUT's bits; the scratch of an NCHW input's blocked copy."""
    ranges = channel_ranges(t.graph, t.index)
    if ranges is None:  # blocked_values took only layers with such ranges
        raise NoKernel("channel tiles of a blocked 1x1 layer must split its channels into ranges of 8")
    packed = packed_once(
        t.args["weight"], ("blocked", tuple(ranges)), lambda: _pack_blocked(w.array(), ranges)
    )
    t.keep.append(packed)
    row = t.row
    row[S_WPACK], row[S_WPACK_T], row[S_LAYOUT] = packed.ctypes.data, PACK_BLOCKED, bits
    if bits & BLK_IN and not row[S_SCALE]:  # read in place; a gate's scaled copy goes to the scratch
        return 0
    return blocked_floats(x.shape[1], t.graph.largest_extent(t.index, 2) * out_shape(t.node)[3])


def _window(t: LayerRow, w: View, x: View) -> int:
    """A kh x kw layer on the same kernel (``window_capable``): its weights packed as ``_blocked``'s with
    each block of 8 input channels' taps in turn ([C8 / 8][taps][8] per row); the scratch of its input's
    blocked copy, zero-padded rows ([C8 / 8][rows][Wp][8]), then the sums kept between shares of its input
    channels (``tile_gemm_b.c``'s ``io->part``: the tile's positions rounded up to 4, x 24 floats). A
    folded window (``window_folded``) packs as a 1x1 layer over its C kh kw terms; its scratch is an NCHW
    copy of its rows, a plane of zeros and the terms' offsets (``conv_folded``)."""
    ranges = channel_ranges(t.graph, t.index)
    assert ranges is not None  # window_capable took only layers with such ranges
    folded = window_folded(x.shape[1])
    kind = "folded" if folded else "blocked"
    packed = packed_once(
        t.args["weight"], (kind, tuple(ranges)), lambda: _pack_window(w.array(), ranges, folded)
    )
    t.keep.append(packed)
    row = t.row
    row[S_WPACK], row[S_WPACK_T], row[S_LAYOUT] = (
        packed.ctypes.data,
        PACK_BLOCKED,
        (WINDOW_FOLD | (BLK_OUT if t.node.name in t.blocked else 0)) if folded else 0,
    )
    kh, kw, st = (int(row[s]) for s in (S_KH, S_KW, S_SH))
    extent, ow = t.graph.largest_extent(t.index, 2), out_shape(t.node)[3]
    plane = ((extent - 1) * st + kh) * ((ow - 1) * st + kw)
    if folded:  # conv_folded: the copy, a plane of zeros, the terms' offsets (int64, K rounded up to 8)
        terms = -(-x.shape[1] * kh * kw // 8) * 8
        return -(-(x.shape[1] + 1) * plane // 16) * 16 + 2 * terms
    return -(-x.shape[1] // 8) * 8 * plane + blocked_floats(BLOCK_GROUP, extent * ow)


def _pack_window(w: np.ndarray, ranges: list[tuple[int, int]], folded: bool) -> np.ndarray:
    """A window's weights as ``_pack_blocked`` packs them; folded, as a 1x1 layer's over C kh kw inputs."""
    return _pack_blocked(w.reshape(w.shape[0], -1, 1, 1) if folded else w, ranges)


def _block_groups(start: int, stop: int) -> list[tuple[int, int]]:
    """The groups of output channels in a channel range, as ``pw_gemm_blocked`` walks them
    (``pw_block_group``): 24 each, the last 32 as two of 16 (a last group of 8 leaves the kernel 4
    accumulators, too few to hide the multiply-adds' latency: ResNet-50's 128-channel tiles of its 56x56
    expanding layers 1.70 -> 1.61 ms on 1 worker, the model 0.985x on 2, paired, AVX2 Zen 3)."""
    groups, g = [], start
    while g < stop:
        left = stop - g
        width = 16 if left == 32 else min(BLOCK_GROUP, left)
        groups.append((g, g + width))
        g += width
    return groups


def _pack_blocked(w: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Weights [O][C][kh][kw] as ``pw_gemm_blocked`` reads them: per channel range of the tiles, groups of
    rows (``_block_groups``), each [C8 / 8][taps][8][width], zeros past C."""
    o, c, taps = w.shape[0], w.shape[1], int(np.prod(w.shape[2:]))
    c8 = -(-c // 8) * 8
    blocks = np.zeros((o, c8, taps), dtype=np.float32)
    blocks[:, :c] = w.reshape(o, c, taps)
    flat = blocks.reshape(o, c8 // 8, 8, taps).transpose(0, 1, 3, 2).reshape(o, c8 * taps)
    groups = [group for a, b in ranges for group in _block_groups(a, b)]
    pieces = [flat[g:e].T.ravel() for g, e in groups]
    return np.ascontiguousarray(np.concatenate(pieces))


def _depthwise_blocked(t: LayerRow, w: View) -> int:
    """A depthwise layer between blocked values (``blocked_values`` keeps its output only where it
    keeps its input too) on ``tile_gemm_b.c``'s ``pw_depthwise_blocked``: weights [C / 8][kh kw][8]; no
    scratch."""
    row = t.row
    row[S_OP] = K_DEPTHWISE
    packed = packed_once(t.args["weight"], ("depthwise blocked",), lambda: _pack_depthwise(w.array()))
    t.keep.append(packed)
    row[S_WPACK], row[S_LAYOUT] = packed.ctypes.data, BLK_IN | BLK_OUT
    return 0


def _pack_depthwise(w: np.ndarray) -> np.ndarray:
    """[C, 1, kh, kw] as [C / 8][kh kw][8]: per block of 8 channels each tap's 8 weights together."""
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(c // 8, 8, kh * kw).transpose(0, 2, 1), dtype=np.float32)


def _depthwise(t: LayerRow, x: View) -> int:
    """A depthwise convolution (``is_depthwise``) on native/tile_depthwise.c's kernel; the scratch its
    tiles need (``pw_depthwise_scratch``): the input rows of one channel, zero-padded, split by column
    phase, and one padded row before the split."""
    row = t.row
    row[S_OP] = K_DEPTHWISE
    kh, sh, sw, pw, dh = (int(row[s]) for s in (S_KH, S_SH, S_SW, S_PW, S_DH))
    rows = (t.graph.largest_extent(t.index, 2) - 1) * sh + (kh - 1) * dh + 1
    copied = (-(-(x.shape[3] + 2 * pw) // sw) + DW_SLACK) * sw
    return rows * copied + copied + 4 * DW_SLACK


#: floats of the depthwise output a fused depthwise + 1x1 tile computes per block of rows
#: (``dw_pw_conv``), and the fewest rows of a block (its window's halo rows are copied once per block):
#: the block stays in L2 between the depthwise sums and the product that reads it. Blocks of 16K floats
#: or of 1 to 4 rows ran 10-60% slower than 64K (1 worker, mobilenet_v2's pairs alone)
DWPW_BLOCK_FLOATS, DWPW_MIN_BLOCK_ROWS = 65536, 8
#: blocks of fewer positions than this take the transposed micro-kernel (vectors along the channels), as
#: do those whose last 48-wide column pass would be one vector (``conv_layout``'s "narrow")
DWPW_NARROW_POSITIONS = 48


def dw_pw_conv(t: LayerRow) -> int:
    """``fuse_depthwise``'s depthwise + 1x1 convolution (native/tile_depthwise.c's ``pw_dwpw_tile``): the
    row is the 1x1 convolution's, its packed weights in panels, and points (``S_AUX``) at a depthwise row
    kept with the program; ``S_KH``: the output rows per block."""
    args, row, view, node = t.args, t.row, t.view, t.node
    x = dense_view(view(args["input"]), "input")
    w = dense_view(view(args["weight"]), "weight")
    out = out_shape(node)
    lo, hi = t.graph.layer_tile_start[t.index], t.graph.layer_tile_start[t.index + 1]
    whole = (t.graph.tile_lo[lo:hi, 1] == 0) & (t.graph.tile_hi[lo:hi, 1] == out[1])
    whole &= (t.graph.tile_lo[lo:hi, 3] == 0) & (t.graph.tile_hi[lo:hi, 3] == out[3])
    if len(x.shape) != 4 or not whole.all():
        raise NoKernel("tiles must span whole output rows of every channel")
    dw = np.zeros(SLOTS, dtype=np.int64)
    t.keep.append(dw)
    dw_w = dense_view(view(args["dw_weight"]), "dw_weight")
    dw[S_OP], dw[S_ACT], dw[S_X], dw[S_W] = K_DEPTHWISE, ACTS[args["dw_act"]], x.address, dw_w.address
    if args.get("dw_bias") is not None:
        dw[S_BIAS] = dense_view(view(args["dw_bias"]), "dw_bias").address
    k = w.shape[1]
    dw[S_XSHAPE : S_XSHAPE + 4] = x.shape
    dw[S_OSHAPE : S_OSHAPE + 4] = [out[0], k, out[2], out[3]]
    (sh, sw), (ph, pw), (dh, dwid) = (as_ints(args[a], 2) for a in ("stride", "padding", "dilation"))
    dw[S_KH : S_GROUPS + 1] = [*dw_w.shape[2:], sh, sw, ph, pw, dh, dwid, x.shape[1]]
    row[S_OP], row[S_ACT], row[S_W], row[S_AUX] = K_DWPW, ACTS[args["act"]], w.address, dw.ctypes.data
    row[S_XSHAPE : S_XSHAPE + 4] = dw[S_OSHAPE : S_OSHAPE + 4]
    if args.get("bias") is not None:
        row[S_BIAS] = dense_view(view(args["bias"]), "bias").address
    if args.get("residual") is not None:
        res = dense_view(view(args["residual"]), "residual")
        if res.shape != out:
            raise NoKernel("residual of another shape")
        row[S_Y] = res.address
    rows = t.graph.largest_extent(t.index, 2)
    block = min(rows, max(DWPW_MIN_BLOCK_ROWS, DWPW_BLOCK_FLOATS // max(1, k * out[3])))
    blocks = -(-rows // block)
    block = -(-rows // blocks)  # the kernel's blocks are even: the largest
    positions = block * out[3]
    tail = 0 < positions % 48 <= 16 or positions < DWPW_NARROW_POSITIONS
    narrow = positions <= NARROW_MAX_POSITIONS and tail
    packed = _packed(args["weight"], w, 1, PANEL_ROWS_T) if narrow else None
    if packed is None:  # fewer output channels than the transposed kernel's panel: panels of 8
        narrow, packed = False, _packed(args["weight"], w, 1, PANEL_ROWS)
    if packed is None:
        raise NoKernel("the 1x1 weight is not a constant")
    t.keep.append(packed)
    row[S_WPACK], row[S_WPACK_T], row[S_KH] = packed.ctypes.data, PACKS["narrow" if narrow else None], block
    return dwpw_scratch(row, dw, rows)


def _conv_scratch(t: LayerRow, x: View, layout: str | None, k: int) -> int:
    """The floats one tile of a direct convolution needs: its im2col (or zero-padded copy and row
    offsets), and the transposed kernel's sums."""
    row, out = t.row, out_shape(t.node)
    kh, sh, ph, pw = (int(row[s]) for s in (S_KH, S_SH, S_PH, S_PW))
    rows = t.graph.largest_extent(t.index, 2)
    # the transposed kernel's sums: its positions (the tile's outputs, padded path included) x (channels
    # of a tile and the rows before them in their first panel, rounded up to whole panels)
    channels = -(-(t.graph.largest_extent(t.index, 1) + PANEL_ROWS_T - 1) // PANEL_ROWS_T) * PANEL_ROWS_T
    sums = rows * out[3] * channels if layout else 0
    if layout == "padded":  # the zero-padded copy (pw_padded_floats), the offsets of B's rows (int64)
        copy = x.shape[1] * ((rows - 1) * sh + kh) * (x.shape[3] + 2 * pw)
        return (-(-copy // 16) * 16 if ph or pw or sh == 1 else 0) + 2 * (k + KOFF_PAD) + sums
    if row[S_POINTWISE]:
        return sums
    return k * rows * out[3] + sums


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """3x3 weights [O, C, 3, 3] as the Winograd kernel reads them: U = G g G^T per (o, c) in float64, then
    per point of the 4x4 transform the transposed micro-kernel's panels of ``PANEL_ROWS_T``
    ([16 * panels, C, rows])."""
    u = np.einsum("au,ocuv,bv->aboc", WINOGRAD_G, w.astype(np.float64), WINOGRAD_G)
    u = u.reshape(16, w.shape[0], w.shape[1], 1, 1).astype(np.float32)
    return np.concatenate([pack_weights(p, 1, PANEL_ROWS_T) for p in u])


def _winograd(t: LayerRow, w: View) -> int:
    packed = packed_once(t.args["weight"], "winograd", lambda: winograd_weights(w.array()))
    t.keep.append(packed)
    t.row[S_WPACK], t.row[S_WPACK_T] = packed.ctypes.data, PACKS["winograd"]
    c, out = w.shape[1], out_shape(t.node)
    return winograd_scratch(c, t.graph.largest_extent(t.index, 2), t.graph.largest_extent(t.index, 1), out[3])


def pool(t: LayerRow) -> int:
    """max_pool2d, avg_pool2d and ``commute_pool``'s avg_pool2d_act (bias and activation after the pool)."""
    name, args, row = op_name(t.node), t.args, t.row
    # a view is read through its strides, with adjacent columns
    x = t.view(args.get("self", args.get("input")))
    if len(x.shape) != 4:
        raise NoKernel("only 4-D inputs")
    if x.strides[3] != 1 and x.shape[3] > 1:
        raise NoKernel(f"input columns are not adjacent (strides {x.strides})")
    row[S_XSTRIDE : S_XSTRIDE + 4] = x.strides
    kernel = as_ints(args["kernel_size"], 2)
    stride = as_ints(args["stride"], 2) if args.get("stride") else kernel
    dilation = as_ints(args.get("dilation") or 1, 2)
    row[S_OP], row[S_X] = (K_MAXPOOL if name == "max_pool2d" else K_AVGPOOL), x.address
    row[S_XSHAPE : S_XSHAPE + 4] = x.shape
    row[S_KH : S_DW + 1] = [*kernel, *stride, *as_ints(args["padding"], 2), *dilation]
    if name != "max_pool2d":
        row[S_COUNT_PAD] = int(bool(args.get("count_include_pad", True)))
        row[S_DIVISOR] = int(args.get("divisor_override") or 0)
    if name == "avg_pool2d_act":
        row[S_ACT] = ACTS[args["act"]]
        if args.get("bias") is not None:
            row[S_BIAS] = dense_view(t.view(args["bias"]), "bias").address
    return 0


def adaptive_pool(t: LayerRow) -> int:
    """adaptive_avg_pool2d of a 4-D input."""
    x = dense_view(t.view(t.args["self"]), "input")
    if len(x.shape) != 4:
        raise NoKernel("only 4-D inputs")
    t.row[S_OP], t.row[S_X] = K_ADAPTIVE, x.address
    t.row[S_XSHAPE : S_XSHAPE + 4] = x.shape
    if t.blocked and t.args["self"].name in t.blocked:  # a global pool of a blocked value
        t.row[S_LAYOUT] = BLK_IN
    return 0


def _strided_4d(t: LayerRow, name: str) -> View:
    """A 4-D input read through its strides (any layout, channels_last included)."""
    x = t.view(t.args[name])
    if len(x.shape) != 4:
        raise NoKernel("only 4-D inputs")
    t.row[S_X] = x.address
    t.row[S_XSHAPE : S_XSHAPE + 4] = x.shape
    t.row[S_XSTRIDE : S_XSTRIDE + 4] = x.strides
    return x


def upsample(t: LayerRow) -> int:
    """upsample_nearest2d and upsample_bilinear2d: the source rows and columns (and bilinear's weights)
    as eager computes them (``tiles.resize``), in tables the kernel reads."""
    _strided_4d(t, "input" if "input" in t.args else "self")
    index, weights = kernel_tables(resize_of(t.node, t.args))
    if weights is not None:
        t.keep.append(weights)
        t.row[S_OP], t.row[S_W] = K_BILINEAR, weights.ctypes.data
    else:
        t.row[S_OP] = K_NEAREST
    t.keep.append(index)
    t.row[S_AUX], t.row[S_NAUX] = index.ctypes.data, len(index)
    return 0


def pixel_shuffle(t: LayerRow) -> int:
    """pixel_shuffle of a 4-D input by its upscale factor (S_KH)."""
    _strided_4d(t, "self")
    t.row[S_OP], t.row[S_KH] = K_SHUFFLE, int(t.args["upscale_factor"])
    return 0


def linear(t: LayerRow) -> int:
    """linear and ``fuse_epilogue``'s linear_act on contiguous operands (the plain linear kernel)."""
    args, row, view = t.args, t.row, t.view
    x = dense_view(view(args["input"]), "input")
    w = dense_view(view(args["weight"]), "weight")
    out = out_shape(t.node)
    if not 2 <= len(out) <= 4:
        raise NoKernel(f"{len(out)}-D output")
    row[S_OP], row[S_ACT], row[S_X], row[S_W] = (
        K_LINEAR,
        ACTS[args.get("act") or "none"],
        x.address,
        w.address,
    )
    if args.get("bias") is not None:
        row[S_BIAS] = dense_view(view(args["bias"]), "bias").address
    row[S_XSHAPE] = x.shape[-1]
    row[S_GROUPS] = len(out)
    return 0


def _broadcast_strides(v: View, out: tuple[int, ...]) -> list[int]:
    """The strides of ``v`` over the output's index space (right-aligned; 0 where it broadcasts)."""
    lead = len(out) - len(v.shape)
    strides = [0] * lead + [s if n != 1 else 0 for s, n in zip(v.strides, v.shape, strict=True)]
    # the dims padding a shorter output to 4 have size 1, so any stride reads the same; 1 lets the kernel
    # see the last real dim's rows as whole (``whole_rows``): with 0, a [N, C, L] tensor ran one value per
    # row (3 element-wise ops over [1, 128, 3199]: 108 ms)
    return pad4(strides, 1)


def ewise(t: LayerRow) -> int:
    """A unary activation or map (``UNARY``, ``MATHS``, ``PARAMETRIC``) or a binary op (``BINOPS``) of a
    tensor and a tensor or a number."""
    name, args, row, view = op_name(t.node), t.args, t.row, t.view
    out = out_shape(t.node)
    if len(out) > 4:
        raise NoKernel("more than 4 dims")
    row[S_OP] = K_EWISE
    if name in UNARY or name in MATHS or name in PARAMETRIC:
        if name == "gelu" and args.get("approximate", "none") != "none":
            raise NoKernel("tanh-approximated gelu")
        code, params = _unary(name, args)
        row[S_ACT] = code
        row[S_ACT_P : S_ACT_P + 3] = [np.float64(p).view(np.int64) for p in (*params, 0.0, 0.0, 0.0)[:3]]
        if not isinstance(x_node := args["self"], torch.fx.Node):
            raise NoKernel("a scalar operand")
        row[S_XSTRIDE : S_XSTRIDE + 4] = _broadcast_strides(x := view(x_node), out)
        row[S_X] = x.address
        return 0
    a, b = args.get("self", args.get("input")), args.get("other")
    if name == "rsub" and (args.get("alpha") or 1) != 1:
        raise NoKernel("rsub with alpha")
    if not isinstance(a, torch.fx.Node):
        raise NoKernel("a scalar first operand")
    x = view(a)
    row[S_X], row[S_BINOP] = x.address, BINOPS[name]
    row[S_XSTRIDE : S_XSTRIDE + 4] = _broadcast_strides(x, out)
    row[S_ALPHA] = np.float64(args.get("alpha") or 1.0).view(np.int64)
    if isinstance(b, torch.fx.Node):
        y = view(b)
        row[S_Y] = y.address
        row[S_YSTRIDE : S_YSTRIDE + 4] = _broadcast_strides(y, out)
    elif isinstance(b, (int, float)):
        alpha = float(args.get("alpha") or 1.0)
        row[S_SCALAR] = np.float64(float(b) * alpha).view(np.int64)
    else:
        raise NoKernel(f"second operand {b!r}")
    return 0


def _unary(name: str, args: dict[str, Any]) -> tuple[int, tuple[float, ...]]:
    """The activation code of a unary op and its parameters."""
    if name in UNARY:
        return ACTS[UNARY[name]], ()
    if name in MATHS:
        return MATHS[name], ()
    return PARAMETRIC[name](args)


def _number(value: Any, what: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NoKernel(f"{what} {value!r} is not a number")
    if math.isnan(value):
        raise NoKernel(f"{what} is NaN")
    return float(value)


def _clamp(lo: Any, hi: Any) -> tuple[int, tuple[float, ...]]:
    lo, hi = _number(lo, "min", -math.inf), _number(hi, "max", math.inf)
    if (lo, hi) == (0.0, 6.0):
        return ACT_RELU6, ()
    return ACT_CLAMP, (lo, hi)


def _pow(args: dict[str, Any]) -> tuple[int, tuple[float, ...]]:
    """pow of a tensor by a number; torch's special exponents take their own kernels, as eager's."""
    p = _number(args.get("exponent"), "exponent", math.nan)
    special = {2.0: ACT_SQUARE, 0.5: ACT_SQRT, -0.5: ACT_RSQRT, -1.0: ACT_RECIPROCAL, 1.0: ACT_NONE}
    return (special[p], ()) if p in special else (ACT_POW, (p,))


def _elu(args: dict[str, Any]) -> tuple[int, tuple[float, ...]]:
    """ELU (SELU's parameters too); the kernel's expm1 takes arguments <= 0, so the negative branch's
    ``x * input_scale`` must be too: a negative ``input_scale`` stays in ATen."""
    alpha, scale, input_scale = (_number(args.get(k), k, 1.0) for k in ("alpha", "scale", "input_scale"))
    if input_scale < 0:
        raise NoKernel(f"input_scale {input_scale} < 0")
    return ACT_ELU, (alpha, scale, input_scale)


#: the element-wise kernel's activations with parameters: op name -> its code and parameters from its args
PARAMETRIC: dict[str, Callable[[dict[str, Any]], tuple[int, tuple[float, ...]]]] = {
    "hardtanh": lambda a: _clamp(
        _number(a.get("min_val"), "min_val", -1.0), _number(a.get("max_val"), "max_val", 1.0)
    ),
    "clamp": lambda a: _clamp(a.get("min"), a.get("max")),
    "clamp_min": lambda a: _clamp(a.get("min"), None),
    "clamp_max": lambda a: _clamp(None, a.get("max")),
    "leaky_relu": lambda a: (ACT_LEAKY_RELU, (_number(a.get("negative_slope"), "negative_slope", 0.01),)),
    "elu": _elu,
    "pow": _pow,
}


def batch_norm(t: LayerRow) -> int:
    """Inference batch norm (one not folded into a convolution) as x * scale + shift per channel, the
    two made here from the running statistics, the weight, the bias and eps."""
    args, row = t.args, t.row
    if args.get("training"):
        raise NoKernel("training mode")
    scale, shift = _affine_params(t)
    x = t.view(args["input"])
    row[S_OP], row[S_X], row[S_Y], row[S_BIAS] = K_AFFINE, x.address, scale, shift
    row[S_ACT] = ACTS[args.get("act") or "none"]  # fuse_epilogue's batch_norm_act
    row[S_XSTRIDE : S_XSTRIDE + 4] = _broadcast_strides(x, out_shape(t.node))
    row[S_YSTRIDE : S_YSTRIDE + 4] = [0, 1, 0, 0]  # the channel dim
    return 0


def _affine_params(t: LayerRow) -> tuple[int, int]:
    """The addresses of an inference batch norm's scale and shift per channel (float32, kept)."""
    out = out_shape(t.node)
    if not 2 <= len(out) <= 4:
        raise NoKernel(f"a {len(out)}-D input")
    stats = {}
    for key in ("weight", "bias", "running_mean", "running_var"):
        arg = t.args.get(key)
        if isinstance(arg, torch.fx.Node) and not is_constant(arg):
            raise NoKernel(f"{key} is not a constant")
        stats[key] = None if arg is None else t.view(arg).array().astype(np.float64)
    channels = out[1]
    invstd = 1.0 / np.sqrt(stats["running_var"] + float(t.args["eps"]))
    scale = invstd * (stats["weight"] if stats["weight"] is not None else 1.0)
    shift = (stats["bias"] if stats["bias"] is not None else 0.0) - stats["running_mean"] * scale
    scale, shift = (np.ascontiguousarray(np.broadcast_to(v, (channels,)), np.float32) for v in (scale, shift))
    t.keep.extend((scale, shift))
    return scale.ctypes.data, shift.ctypes.data


def pad(t: LayerRow) -> int:
    """Constant padding (``pad`` with mode "constant", ``constant_pad_nd``)."""
    args, row = t.args, t.row
    if (args.get("mode") or "constant") != "constant":
        raise NoKernel(f"mode {args.get('mode')!r}")
    x = t.view(args.get("self", args.get("input")))
    out = out_shape(t.node)
    if len(out) > 4:
        raise NoKernel("more than 4 dims")
    pads = [int(p) for p in args["pad"]]
    before = [0] * len(out)
    for k in range(len(pads) // 2):  # pairs from the last dim backwards
        before[len(out) - 1 - k] = pads[2 * k]
    row[S_OP], row[S_X] = K_PAD, x.address
    row[S_XSHAPE : S_XSHAPE + 4] = pad4(list(x.shape), 1)
    row[S_XSTRIDE : S_XSTRIDE + 4] = pad4(list(x.strides), 0)
    row[S_KH : S_KH + 4] = pad4(before, 0)
    row[S_SCALAR] = np.float64(float(args.get("value") or 0.0)).view(np.int64)
    return 0


def cat(t: LayerRow) -> int:
    """Concatenation."""
    _concatenate(t, stack=False)
    return 0


def stack(t: LayerRow) -> int:
    """A concatenation along a new dim (each input viewed with a size-1 dim there)."""
    _concatenate(t, stack=True)
    return 0


def cat_batch_norm(t: LayerRow) -> int:
    """``fuse_epilogue``'s cat_batch_norm_act: each input's copy applies the batch norm and the activation."""
    _concatenate(t, stack=False)
    t.row[S_Y], t.row[S_BIAS] = _affine_params(t)
    t.row[S_ACT] = ACTS[t.args["act"]]
    return 0


def _span(address: int, shape: list[int], strides: list[int]) -> tuple[int, int]:
    """The bytes from the first to one past the last float32 element of a strided tensor."""
    steps = [(n - 1) * s for n, s in zip(shape, strides, strict=True)]
    return address + 4 * sum(min(0, d) for d in steps), address + 4 * sum(max(0, d) for d in steps) + 4


def _concatenate(t: LayerRow, stack: bool) -> None:
    """The copies of a concatenation, one record per input, but none for an input already where its copy
    would put it (``memory.concat_slots`` placed its layer there): then the copy would only rewrite the
    same floats (a plain ``cat``; the fused batch norm changes them). An input read from inside the
    output must not overlap a slot that is copied into (a buffer plan that put a layer at another
    input's slot): refused, never a copy racing its own source."""
    out = out_shape(t.node)
    nd = len(out)
    if nd > 4:
        raise NoKernel("more than 4 dims")
    dim = t.args["dim"] % nd
    out_strides = [math.prod(out[d + 1 :]) for d in range(nd)]
    base = int(t.row[S_OUT])
    whole = (base, base + 4 * math.prod(out))
    in_place = op_name(t.node) == "cat"
    records, offset = [], 0
    inside: list[tuple[str, tuple[int, int]]] = []  # inputs read from the output's own memory
    written: list[tuple[int, int]] = []  # the output's bytes the copies write (each slot's bounds)
    for tensor in t.args["tensors"]:
        v = t.view(tensor)
        shape, strides = list(v.shape), list(v.strides)
        if stack:
            shape.insert(dim, 1)
            strides.insert(dim, 0)
        size = shape[dim] if math.prod(shape) else 0
        there = base + 4 * offset * out_strides[dim]
        span = _span(v.address, shape, strides) if size else (0, 0)
        placed = (
            in_place
            and v.address == there
            and all(n == 1 or s == o for n, s, o in zip(shape, strides, out_strides, strict=True))
        )
        if size and not placed:
            if span[0] < whole[1] and whole[0] < span[1]:
                inside.append((str(tensor), span))
            written.append(_span(there, shape, out_strides))
            records.append([v.address, offset, size, *pad4(strides, 0)])
        offset += size
    for name, (lo, hi) in inside:
        if any(lo < w_hi and w_lo < hi for w_lo, w_hi in written):
            raise NoKernel(f"input {name} lies where the concatenation copies another input")
    aux = np.asarray(records, dtype=np.int64).reshape(-1, 7)
    t.keep.append(aux)
    t.row[S_OP], t.row[S_GROUPS], t.row[S_AUX], t.row[S_NAUX] = K_CAT, dim, aux.ctypes.data, len(aux)
