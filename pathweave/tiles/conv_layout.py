"""How a convolution's tiles compute (``conv_layout``): Winograd, the transposed micro-kernel on an
im2col ("narrow") or on the input as it lies ("padded"), or the row-vector kernels; and the thresholds,
measured, that choose.
"""

from __future__ import annotations

import math

import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.tiles.maps import CONVOLUTIONS, as_ints, bound_args, shape

#: convolutions over at most this many positions whose last 48-wide column pass would be one vector of 16
#: (7x7, 14x14 and 17x17 maps: Inception-v3's 1x7 and 1x1 layers at 17x17, 289 positions, A/B 0.956-0.970x
#: against 256) run the transposed micro-kernel (native/tile_gemm_t.c), as do stride-1 windows
#: over maps at least PADDED_MIN_WIDTH wide or without column padding (no sum is discarded: Inception's
#: 7x1 windows) and stride-2 ones over maps at least PADDED_MIN_WIDTH_STRIDED wide (on a zero-padded
#: copy of the input, no im2col), all for at least NARROW_MIN_K values of k; their channel tiles start
#: on multiples of NARROW_ALIGN (two of its panels)
NARROW_MAX_POSITIONS, NARROW_MIN_K, NARROW_ALIGN = 300, 256, 32
PADDED_MIN_WIDTH, PADDED_MIN_WIDTH_STRIDED = 28, 7
#: stride-1 windows over maps at least this many times their column padding wide run "padded" even where
#: "narrow" would apply: the padded rows discard at most 1/8 of the sums, and the im2col they spare grew
#: past L2 (ResNet-50's 14x14 3x3 layers: 1.8 MB per worker): on 2 workers those layers 1.63 -> 1.34 ms,
#: the model 25.0 -> 23.9 ms (A/B in one process). Its 7x7 ones too (2/9 of the sums discarded, but
#: each worker's 903 KB im2col spared): with the 3x3 layers of larger maps on Winograd, ResNet-50
#: 0.97-1.00x, DenseNet-121 0.96x, Inception-v3 0.99x, GoogLeNet and SqueezeNet 1.00x (A/B, 2 workers)
#: (Those figures are from when the padded path summed whole padded rows. Its chunks of positions now
#: cross output rows, so no sum is discarded; with this rule off, PADDED_WIDTH_PER_PAD = 0, Inception-v3
#: ran 0.996x and GoogLeNet 1.003x on an AVX2 Zen 3, 2 workers, A/B in one process: kept as it is.)
PADDED_WIDTH_PER_PAD = 7
#: stride-2 convolutions take it from fewer products per output (ResNet-50's 7x7 stem, k = 147: 82 -> 101
#: GFLOP/s as a layer alone)
PADDED_MIN_K_STRIDED = 128
#: 3x3 stride-1 convolutions (padding 0 or 1, no dilation, one group) of at least WINOGRAD_MIN_CHANNELS
#: input and output channels run Winograd F(2x2, 3x3) (native/tile_winograd.c: 2.25x fewer multiply-adds);
#: over maps at least WINOGRAD_MIN_WIDTH wide (on 7x7 maps the 2x2 blocks compute 8x8 outputs, and the
#: transformed weights, 16/9 the size, stream from memory at batch 1: ResNet-50's 7x7 layers gained
#: nothing); their row pieces start on even rows (whole pairs), hold at least WINOGRAD_MIN_BLOCKS 2x2
#: blocks (or half the rows, whichever is fewer) and span every output channel, so that each input
#: transform is built once: 14x14 layers split by channels had both workers build it (ResNet-50 A/B
#: 0.94-0.99x for two row pieces instead). Blocks whose input holds an infinity are computed directly
#: (the transforms would subtract it from itself). WINOGRAD_MIN_CHANNELS is the default of the strategy's
#: ``winograd_min_channels``; 10**9 keeps every 3x3 layer direct
WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_WIDTH = 32, 14
WINOGRAD_MIN_BLOCKS = 28
#: the most taps (kh * kw) of a window that the depthwise kernel takes (native/tile_depthwise.c)
DEPTHWISE_MAX_TAPS = 64


def is_depthwise(node: torch.fx.Node) -> bool:
    """A 2-D convolution whose groups each read one input channel (groups == input channels), numeric
    padding and at most ``DEPTHWISE_MAX_TAPS`` taps: native/tile_depthwise.c's (MobileNet's, EfficientNet's
    and NASNet's 3x3, 5x5 and 7x7 layers), whose tiles split channels (no halo rows copied twice)."""
    if op_name(node) not in ("conv2d", "conv2d_act") or len(shape(node)) != 4:
        return False
    args = bound_args(node)
    weight, x = args.get("weight"), args.get("input")
    if not isinstance(weight, torch.fx.Node) or not isinstance(x, torch.fx.Node):
        return False
    w, xv = weight.meta.get("val"), x.meta.get("val")
    if w is None or xv is None or len(xv.shape) != 4 or isinstance(args.get("padding"), str):
        return False
    taps = w.shape[2] * w.shape[3]
    return args.get("groups", 1) == xv.shape[1] and w.shape[1] == 1 and taps <= DEPTHWISE_MAX_TAPS


def conv_layout(node: torch.fx.Node, winograd_min_channels: int = WINOGRAD_MIN_CHANNELS) -> str | None:
    """How a convolution's tiles compute, where not by the row-vector kernels over an im2col (None):
    "winograd" (at least ``winograd_min_channels`` in and out), or the transposed micro-kernel: "narrow"
    (maps of few positions whose 48-wide column passes end in one vector, ``NARROW_MAX_POSITIONS``:
    ResNet-50's 7x7 layers ~160 -> ~200 GFLOP/s), "padded" (no im2col: stride 1 and a window over maps
    at least ``PADDED_MIN_WIDTH`` or ``PADDED_WIDTH_PER_PAD`` times the padding wide or without column
    padding, before "narrow"; or stride 2 over maps ``PADDED_MIN_WIDTH_STRIDED`` wide: alone, a 1x1
    stride-2 layer read in place ran at 119 GFLOP/s against 140 after an im2col, but in ResNet-50 its
    im2col was redone whenever other layers' tiles ran in between, and reading in place won 2-5%). All
    for one group, no dilation and at least ``NARROW_MIN_K`` products per output
    (``PADDED_MIN_K_STRIDED`` for stride 2). None: the row-vector kernels, and every other node."""
    dims = shape(node)
    if op_name(node) not in CONVOLUTIONS - {"dw_pw_conv"} or len(dims) != 4:  # that one: its binder's
        return None
    args = bound_args(node)
    weight = args.get("weight")
    w = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    k = math.prod(w.shape[1:]) if w is not None else 0
    if w is None or args.get("groups", 1) != 1 or k < PADDED_MIN_K_STRIDED:
        return None
    stride, dilation = (as_ints(args.get(k) or 1, 2) for k in ("stride", "dilation"))
    if isinstance(args.get("padding"), str) or dilation != [1, 1]:
        return None
    window = w.shape[2] * w.shape[3] > 1
    pads = as_ints(args.get("padding") or 0, 2)
    if _winograd_fits(tuple(w.shape), stride, pads, winograd_min_channels) and dims[3] >= WINOGRAD_MIN_WIDTH:
        return "winograd"
    if stride == [2, 2] and dims[3] >= PADDED_MIN_WIDTH_STRIDED:
        return "padded"
    if k < NARROW_MIN_K:
        return None
    pw = as_ints(args.get("padding") or 0, 2)[1]
    # no column padding (pw = 0): padded at any width, no im2col (Inception's 7x1 and,
    # ahead of "narrow" now, its 3x1 windows over 8x8 maps)
    if window and stride == [1, 1] and dims[3] >= min(PADDED_MIN_WIDTH, PADDED_WIDTH_PER_PAD * pw):
        return "padded"
    positions = dims[2] * dims[3]
    if positions <= NARROW_MAX_POSITIONS and 0 < positions % 48 <= 16:
        return "narrow"
    return None


def _winograd_fits(weight: tuple[int, ...], stride: list[int], pads: list[int], min_channels: int) -> bool:
    """A 3x3 window, stride 1, padding 0 or 1, at least ``min_channels`` in and out."""
    return weight[2:] == (3, 3) and stride == [1, 1] and max(pads) <= 1 and min(weight[:2]) >= min_channels
