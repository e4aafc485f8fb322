"""The native tile code's numbers, once, as Python constants: op codes, slots, packings, activations.

Each constant mirrors one of ``native/`` (a C ``PW_NAME`` is ``NAME`` here, ``S_*`` and ``SQ_*`` keep
their names; ``tests/tiles/test_abi.py`` parses the C and compares, both ways).
"""

from __future__ import annotations

import numpy as np

# ---- tile_runtime.c: the runtime's op per tile, its depth columns ------------------------------------------
OP_TEST, OP_LAYER = 0, 1
MAX_COLUMNS = 64  # PW_MAX_COLS

# ---- tile_gemm.h: the micro-kernels' weight panels ---------------------------------------------------------
#: rows per panel of packed convolution weights: PW_MR, and PW_TR for the transposed micro-kernel
PANEL_ROWS, PANEL_ROWS_T = 8, 16
#: entries after the row offsets of a padded convolution
KOFF_PAD = 8
#: which operands of a 1x1 layer on channel-blocked activations are blocked (slot S_LAYOUT, tile_gemm_b.c)
BLK_IN, BLK_OUT, BLK_RES = 1, 2, 4
#: S_LAYOUT of a window of fewer than 8 input channels on that kernel: its terms folded into one sum
WINDOW_FOLD = 8
#: the most taps of a window on that kernel (tiles/blocked.py's window_capable)
WINDOW_TAPS = 64
#: output channels per group of that kernel's packed weights (its sums: 3 vectors of 8)
BLOCK_GROUP = 24

# ---- tile_kernels.h: a layer's row -------------------------------------------------------------------------
SLOTS = 48
#: floats at the start of a worker's scratch that remember what its im2col buffer holds
SCRATCH_HEADER = 16
#: op codes (slot S_OP)
K_CONV, K_MAXPOOL, K_AVGPOOL, K_ADAPTIVE, K_LINEAR, K_EWISE, K_CAT, K_AFFINE, K_PAD = range(1, 10)
K_EMBEDDING, K_LAYERNORM, K_SOFTMAX, K_MAP, K_MATMUL, K_WHERE, K_CONVERT, K_COPY = range(32, 40)
#: tile_reduce.c's kernels
K_REDUCE, K_GROUPNORM, K_ROLL, K_COMPARE = range(40, 44)
#: tile_resize.c's (45..49)
K_NEAREST, K_BILINEAR, K_SHUFFLE = range(45, 48)
#: tile_depthwise.c's (50..54)
K_DEPTHWISE, K_DWPW = 50, 51
#: floats after each phase row of its padded copy (PW_DW_SLACK)
DW_SLACK = 16
#: how a convolution uses its packed weights (slot S_WPACK_T)
PACK_PANELS, PACK_TRANSPOSED, PACK_PADDED, PACK_WINOGRAD, PACK_BLOCKED = range(5)
#: epilogue activations (slot S_ACT); ACT_GELU_TANH is tile_kernels_seq.h's; from ACT_SILU on tile_act.c's
ACT_NONE, ACT_RELU, ACT_GELU, ACT_TANH, ACT_GELU_TANH, ACT_SIGMOID = range(6)
ACT_SILU, ACT_HARDSWISH, ACT_HARDSIGMOID, ACT_RELU6 = range(6, 10)
#: bits of pw_gelu_eager: how eager's GELU rounds at the edges (runtime.eager_gelu_edges)
GELU_POSINF_NAN, GELU_HALVE_FIRST = 1, 2
#: activations with parameters (slots S_ACT_P..): the element-wise kernel's only
ACT_CLAMP, ACT_LEAKY_RELU, ACT_ELU, ACT_POW = range(10, 14)
#: maths of one argument (the element-wise kernel's)
ACT_NEG, ACT_ABS, ACT_EXP, ACT_LOG, ACT_SQRT, ACT_RSQRT, ACT_RECIPROCAL = range(14, 21)
ACT_SQUARE, ACT_ERF, ACT_SIN, ACT_COS, ACT_SIGN = range(21, 26)
#: element-wise binary ops (slot S_BINOP)
BIN_NONE, BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_RSUB, BIN_MAX, BIN_MIN = range(8)
#: slots
S_OP, S_ACT, S_OUT, S_X, S_Y, S_W, S_BIAS, S_SCALAR = range(8)
S_OSHAPE, S_XSTRIDE, S_XSHAPE, S_YSTRIDE, S_BINOP, S_ALPHA, S_LAYOUT = 8, 12, 16, 20, 24, 25, 26
S_SCALE = 27
S_KH, S_KW, S_SH, S_SW, S_PH, S_PW, S_DH, S_DW, S_GROUPS = range(28, 37)
S_POINTWISE, S_COUNT_PAD, S_DIVISOR, S_AUX, S_NAUX = 37, 38, 39, 40, 41
S_WPACK, S_WPACK_T, S_ACT_P, S_PROFILE = 42, 43, 44, 47

#: tile_reduce.c's slots (they reuse the window slots' numbers) and what K_REDUCE computes (SR_KIND)
SR_KIND, SR_RSHAPE, SR_RSTRIDE, SR_GROUPS, SR_DTYPE = 24, 28, 32, 36, 37
RED_SUM, RED_MEAN, RED_AMAX, RED_AMIN, RED_VAR, RED_STD = range(6)
#: what K_COMPARE computes (SR_KIND)
CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_AND, CMP_OR, CMP_NOT = range(9)

# ---- tile_kernels_seq.h: the transformer kernels' slots and codes ------------------------------------------
SQ_Z, SQ_YSCALAR = S_W, S_ALPHA
SQ_ZSTRIDE, SQ_RANK, SQ_DTYPE, SQ_K, SQ_ROWS, SQ_LAYOUT_A, SQ_LAYOUT_B = 28, 32, 33, 34, 35, 36, 37
#: the copy's 2 dims of x before S_XSHAPE's 4: their sizes (1 where absent), then their strides
SQ_XOUTER = 20
#: element types (SQ_DTYPE)
DT_F32, DT_I64, DT_I32, DT_U8 = range(4)
#: how sgemm reads a matmul operand (SQ_LAYOUT_A, SQ_LAYOUT_B)
GEMM_ROWS, GEMM_TRANS, GEMM_PACK = range(3)

# ---- the same codes by the names the graph uses ------------------------------------------------------------
#: a convolution's layout (``conv_layout``) -> its packing
PACKS = {None: PACK_PANELS, "narrow": PACK_TRANSPOSED, "padded": PACK_PADDED, "winograd": PACK_WINOGRAD,
         "blocked": PACK_BLOCKED}  # fmt: skip
#: the activations every kernel with an epilogue applies (conv, linear, batch norm, cat, element-wise)
ACTS = {
    "none": ACT_NONE,
    "relu": ACT_RELU,
    "gelu": ACT_GELU,
    "tanh": ACT_TANH,
    "sigmoid": ACT_SIGMOID,
    "silu": ACT_SILU,
    "hardswish": ACT_HARDSWISH,
    "hardsigmoid": ACT_HARDSIGMOID,
    "relu6": ACT_RELU6,
}
#: the element-wise kernel's maths of one argument by ATen op name
MATHS = {
    "neg": ACT_NEG,
    "abs": ACT_ABS,
    "exp": ACT_EXP,
    "log": ACT_LOG,
    "sqrt": ACT_SQRT,
    "rsqrt": ACT_RSQRT,
    "reciprocal": ACT_RECIPROCAL,
    "square": ACT_SQUARE,
    "erf": ACT_ERF,
    "sin": ACT_SIN,
    "cos": ACT_COS,
    "sign": ACT_SIGN,
}
#: the transformer kernels' activations: the shared ones and GPT-2's tanh form of GELU
SEQ_ACTS = {**ACTS, "gelu_tanh": ACT_GELU_TANH}
BINOPS = {
    "add": BIN_ADD,
    "sub": BIN_SUB,
    "mul": BIN_MUL,
    "div": BIN_DIV,
    "rsub": BIN_RSUB,
    "maximum": BIN_MAX,
    "minimum": BIN_MIN,
}
#: K_REDUCE's reductions by ATen op name
REDUCTIONS = {"sum": RED_SUM, "mean": RED_MEAN, "amax": RED_AMAX, "amin": RED_AMIN, "var": RED_VAR,
              "std": RED_STD}  # fmt: skip
#: K_COMPARE's ops by ATen op name (the bitwise ops of bool are its logic: xor is ne; isnan is x != x)
COMPARISONS = {"eq": CMP_EQ, "ne": CMP_NE, "lt": CMP_LT, "le": CMP_LE, "gt": CMP_GT, "ge": CMP_GE,
               "logical_and": CMP_AND, "logical_or": CMP_OR, "logical_not": CMP_NOT,
               **dict.fromkeys(("bitwise_and", "__and__"), CMP_AND),
               **dict.fromkeys(("bitwise_or", "__or__"), CMP_OR),
               **dict.fromkeys(("bitwise_xor", "__xor__"), CMP_NE), "bitwise_not": CMP_NOT,
               "isnan": CMP_NE}  # fmt: skip
DTYPES = {np.float32: DT_F32, np.int64: DT_I64, np.int32: DT_I32, np.bool_: DT_U8}
