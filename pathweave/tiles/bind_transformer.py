"""Kernel binders of the transformer ops (``native/tile_kernels_seq.c``; slot numbers as in
``native/tile_kernels_seq.h``): embedding, layer norm and softmax over the last dim, GELU's tanh form,
matmul / bmm / addmm / baddbmm / ``fuse_matmul``'s matmul_add on strided views (and linear where
the plain linear kernel cannot take it: a strided input, GELU in its epilogue), where and masked_fill,
conversion to float32, and the copy of a view made a layer (flatten of attention's transposed heads, a
permute that a layer norm or conv cannot read in place). GELU's erf form and the plain linear layers go
to ``bind_cnn``'s kernels.

These rows hold shapes and strides padded at the front to 4 dims (dim 3 is the tensor's last);
``SQ_RANK`` says how many are real. A matmul operand is read in place by sgemm, as rows or transposed
with its leading dimension from the strides, and packed into scratch only when neither fits.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.tiles import bind_cnn
from pathweave.tiles.abi import (
    DTYPES,
    GEMM_PACK,
    GEMM_ROWS,
    GEMM_TRANS,
    K_CONVERT,
    K_COPY,
    K_EMBEDDING,
    K_LAYERNORM,
    K_MAP,
    K_MATMUL,
    K_SOFTMAX,
    K_WHERE,
    PANEL_ROWS,
    PANEL_ROWS_T,
    S_ACT,
    S_BIAS,
    S_OP,
    S_SCALAR,
    S_W,
    S_WPACK,
    S_WPACK_T,
    S_X,
    S_XSHAPE,
    S_XSTRIDE,
    S_Y,
    S_YSTRIDE,
    SEQ_ACTS,
    SQ_DTYPE,
    SQ_K,
    SQ_LAYOUT_A,
    SQ_LAYOUT_B,
    SQ_RANK,
    SQ_ROWS,
    SQ_XOUTER,
    SQ_YSCALAR,
    SQ_Z,
    SQ_ZSTRIDE,
)
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.maps import RESHAPES
from pathweave.tiles.rows import (
    LayerRow,
    NoKernel,
    View,
    coalesced,
    dense_view,
    is_constant,
    out_shape,
    packed_once,
    viewed,
)
from pathweave.tiles.runtime import gemm_isa

#: a linear with these activations goes to the plain linear kernel; GELU to the matmul kernel, whose
#: erf is vectorised (libm's erff per element cost BERT-base a tenth of its time)
PLAIN_ACTS = ("none", "relu", "tanh")
INDICES = (np.int64, np.int32)


def _front(values: list[int] | tuple[int, ...], fill: int) -> list[int]:
    return [fill] * (4 - len(values)) + list(values)


def _over(v: View, out: tuple[int, ...]) -> list[int]:
    """``v``'s strides over the output's index space, padded at the front (0 where it broadcasts)."""
    if len(v.shape) > len(out):
        raise NoKernel(f"an operand of shape {v.shape} for an output of shape {out}")
    own = [s if n != 1 else 0 for s, n in zip(v.strides, v.shape, strict=True)]
    return _front([0] * (len(out) - len(v.shape)) + own, 0)


def _start(row: np.ndarray, code: int, out: tuple[int, ...]) -> None:
    if not 1 <= len(out) <= 4:
        raise NoKernel(f"a {len(out)}-D output (these kernels take 1 to 4 dims)")
    row[S_OP], row[SQ_RANK] = code, len(out)


def _double(value: float) -> np.int64:
    return np.float64(value).view(np.int64)


# ---- gather, normalise, map --------------------------------------------------------------------------------


def embedding(t: LayerRow) -> int:
    """Rows of a 2-D table gathered by int64 or int32 ids."""
    args, row = t.args, t.row
    table = dense_view(t.view(args["weight"]), "weight")
    ids = t.view(args["indices"], INDICES)
    out = out_shape(t.node)
    if len(table.shape) != 2:
        raise NoKernel("a table that is not 2-D")
    _start(row, K_EMBEDDING, out)
    row[S_W], row[SQ_ROWS] = table.address, table.shape[0]
    row[S_X], row[SQ_DTYPE] = ids.address, DTYPES[ids.base.dtype.type]
    row[S_XSTRIDE : S_XSTRIDE + 4] = _front([*ids.strides, 0], 0)
    return 0


def _row_input(node: torch.fx.Node, x: View, row: np.ndarray, code: int) -> tuple[int, ...]:
    """A kernel over whole rows of the last dim: x read at its strides, which must be 1 along that dim."""
    out = out_shape(node)
    if x.shape != out:
        raise NoKernel(f"input of shape {x.shape} for an output of shape {out}")
    if out and out[-1] > 1 and x.strides[-1] != 1:
        raise NoKernel("the last dim of the input is strided")
    _start(row, code, out)
    row[S_X] = x.address
    row[S_XSTRIDE : S_XSTRIDE + 4] = _over(x, out)
    return out


def layer_norm(t: LayerRow) -> int:
    """Layer norm over the last dim."""
    args, row = t.args, t.row
    if len(args["normalized_shape"]) != 1:
        raise NoKernel("normalised over more than the last dim")
    out = _row_input(t.node, t.view(args["input"]), row, K_LAYERNORM)
    for slot, key in ((S_W, "weight"), (S_BIAS, "bias")):
        if args.get(key) is not None:
            p = dense_view(t.view(args[key]), key)
            if p.shape != out[-1:]:
                raise NoKernel(f"{key} of shape {p.shape}")
            row[slot] = p.address
    row[S_SCALAR] = _double(float(args["eps"]))
    return 0


def softmax(t: LayerRow) -> int:
    """Softmax over the last dim, float32."""
    args = t.args
    nd = len(out_shape(t.node))
    if nd == 0 or args["dim"] % nd != nd - 1:
        raise NoKernel("softmax over a dim other than the last")
    if args.get("dtype") is not None or args.get("half_to_float"):
        raise NoKernel("softmax with a dtype")
    _row_input(t.node, t.view(args["self"]), t.row, K_SOFTMAX)
    return 0


def gelu(t: LayerRow) -> int:
    """GELU's tanh form on the map kernel; the erf form on the element-wise kernel (``bind_cnn.ewise``)."""
    args, row = t.args, t.row
    if args.get("approximate", "none") != "tanh":
        return bind_cnn.ewise(t)
    out = out_shape(t.node)
    x = t.view(args["self"])
    _start(row, K_MAP, out)
    row[S_X], row[S_ACT] = x.address, SEQ_ACTS["gelu_tanh"]
    row[S_XSTRIDE : S_XSTRIDE + 4] = _over(x, out)
    return 0


def where(t: LayerRow) -> int:
    """where(cond, x, y) and masked_fill(y, cond, x): out = cond ? x : y, x and y tensors or scalars."""
    args, row, view = t.args, t.row, t.view
    if "mask" in args:
        cond, x, y = args["mask"], args["value"], args["self"]
    else:
        cond, x, y = args["condition"], args["self"], args["other"]
    out = out_shape(t.node)
    _start(row, K_WHERE, out)
    c = view(cond, (np.bool_,))
    row[SQ_Z], row[SQ_DTYPE] = c.address, DTYPES[np.bool_]
    row[SQ_ZSTRIDE : SQ_ZSTRIDE + 4] = _over(c, out)
    for operand, addr, strides, scalar in ((x, S_X, S_XSTRIDE, S_SCALAR), (y, S_Y, S_YSTRIDE, SQ_YSCALAR)):
        if isinstance(operand, torch.fx.Node):
            v = view(operand)
            row[addr] = v.address
            row[strides : strides + 4] = _over(v, out)
        elif isinstance(operand, (int, float, bool)):
            row[scalar] = _double(float(operand))
        else:
            raise NoKernel(f"operand {operand!r}")
    return 0


def convert(t: LayerRow) -> int:
    """to / _to_copy / type_as into float32 (the output's type is checked by build_program)."""
    row = t.row
    out = out_shape(t.node)
    x = t.view(t.args["self"], tuple(DTYPES))
    _start(row, K_CONVERT, out)
    row[S_X], row[SQ_DTYPE] = x.address, DTYPES[x.base.dtype.type]
    row[S_XSTRIDE : S_XSTRIDE + 4] = _over(x, out)
    return 0


def view_copy(t: LayerRow) -> int:
    """A view that ``plan_nodes`` made a layer: a reshape that cannot view its input, or a transpose or a
    slice its consumer cannot read where it lies (``TileOp.reads``). Copies the view in row-major order,
    its dims merged where they step as one (Swin's 6-D windows are 4-D runs; MobileViT's unfold and fold
    of 2x2 patches stay 5-D or 6-D, the two dims before the last 4 in SQ_XOUTER)."""
    x = t.view(t.args["self"])
    if op_name(t.node) not in RESHAPES:  # the same elements in the view's order; a reshape's is x's
        x = viewed(t.node, x)
    dims, strides = coalesced(x)
    if len(dims) > 6:
        raise NoKernel(f"a {len(x.shape)}-D input that does not merge into 6 dims")
    dims, strides = [1] * (6 - len(dims)) + list(dims), [0] * (6 - len(strides)) + list(strides)
    _start(t.row, K_COPY, out_shape(t.node))
    t.row[S_X] = x.address
    t.row[S_XSHAPE : S_XSHAPE + 4] = dims[2:]
    t.row[S_XSTRIDE : S_XSTRIDE + 4] = strides[2:]
    t.row[SQ_XOUTER : SQ_XOUTER + 4] = dims[:2] + strides[:2]
    return 0


# ---- matrix products ---------------------------------------------------------------------------------------


def gemm_layout(rows: int, cols: int, s_row: int, s_col: int) -> tuple[int, int, int]:
    """How sgemm reads a [rows, cols] operand with these strides, and the strides the kernel then uses:
    as rows (unit column stride, leading dim = row stride), transposed (unit row stride, leading dim =
    column stride), or packed. A dim of size 1 takes whatever stride makes a valid leading dim."""
    if (cols == 1 or s_col == 1) and (rows == 1 or s_row >= cols):
        return GEMM_ROWS, (s_row if rows > 1 else max(cols, 1)), 1
    if (rows == 1 or s_row == 1) and (cols == 1 or s_col >= rows):
        return GEMM_TRANS, 1, (s_col if cols > 1 else max(rows, 1))
    return GEMM_PACK, s_row, s_col


def _batch(v: View, out: tuple[int, ...]) -> list[int]:
    """Strides of a matrix operand's batch dims over the output's, padded at the front to 2."""
    return _over(View(v.base, v.offset, v.strides[:-2], v.shape[:-2], False), out[:-2])[2:]


def _operands(args: dict) -> tuple[Any, Any, Any, float, float]:
    """(a, b, added term, alpha, beta) of matmul / mm / bmm / addmm / baddbmm / matmul_add."""
    if "batch1" in args or "mat1" in args:
        a, b = ("batch1", "batch2") if "batch1" in args else ("mat1", "mat2")
        return args[a], args[b], args["self"], float(args["alpha"]), float(args["beta"])
    if "residual" in args:  # fuse_matmul's: alpha * (a @ b) + bias + residual
        return args["self"], args["other"], args["residual"], float(args["alpha"]), 1.0
    return args["self"], args.get("other", args.get("mat2")), None, 1.0, 1.0


def matmul(t: LayerRow) -> int:
    """matmul / mm / bmm / addmm / baddbmm / ``fuse_matmul``'s matmul_add."""
    args, row, view, graph, i = t.args, t.row, t.view, t.graph, t.index
    a_node, b_node, z_node, alpha, beta = _operands(args)
    a, b = view(a_node), view(b_node)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise NoKernel("1-D operands")
    if a.shape[-1] != b.shape[-2]:
        raise NoKernel(f"operands of shapes {a.shape} and {b.shape}")
    out = out_shape(t.node)
    _start(row, K_MATMUL, out)
    a_strides = [*_batch(a, out), a.strides[-2], a.strides[-1]]
    scratch = _gemm(row, graph, i, out, a, a_strides, b, [*_batch(b, out), b.strides[-2], b.strides[-1]])
    if _packable(b, b_node, alpha, out, graph, i, a_strides):
        _pack_b(row, b, b_node, graph, i, a_strides)
        scratch = max(scratch, _panel_rows(graph, i, out) * a.shape[-1])
    row[S_SCALAR] = _double(alpha)
    if isinstance(z_node, torch.fx.Node):
        z = view(z_node)
        row[SQ_Z], row[SQ_YSCALAR] = z.address, _double(beta)
        row[SQ_ZSTRIDE : SQ_ZSTRIDE + 4] = _over(z, out)
    if args.get("bias") is not None:
        bias = dense_view(view(args["bias"]), "bias")
        if bias.shape != out[-1:]:
            raise NoKernel(f"a bias of shape {bias.shape}")
        row[S_BIAS] = bias.address
    return scratch


def _pack_b(row: np.ndarray, b: View, b_node: torch.fx.Node, graph: TileGraph, i: int, a: list[int]) -> None:
    """A constant B ([K, N], any strides) for the packed micro-kernels: for each piece [c0, c1) of the
    layer's columns, B[:, c0:c1] as contiguous rows, the pieces one after another, so that a tile streams
    its weights from memory in order (read in place, with rows N apart, they ran slower than OpenBLAS).
    Where ``rows_kernel`` says so (``a``: A's strides over the output), each piece is stored instead in
    panels of PANEL_ROWS_T columns (k-major) for ``pw_gemm_rows``, which reads A in place.
    Made once per node and kept in its meta: every program of the graph shares it."""
    cuts = tuple(int(c) for c in graph.grid(i)[-1])
    panels = rows_kernel(cuts, a)

    def blocks() -> np.ndarray:
        full = b.array()
        pieces = [full[:, c0:c1].astype(np.float32) for c0, c1 in itertools.pairwise(cuts)]
        if panels:  # [K, w] -> [w / 16][K][16], the last piece padded with zero columns
            pieces[-1] = np.pad(pieces[-1], ((0, 0), (0, -pieces[-1].shape[1] % PANEL_ROWS_T)))
            pieces = [p.reshape(p.shape[0], -1, PANEL_ROWS_T).transpose(1, 0, 2) for p in pieces]
        return np.concatenate([np.ascontiguousarray(p).reshape(-1) for p in pieces])

    how = ("panels" if panels else "blocks", b.shape, b.strides, cuts)
    row[S_WPACK], row[S_WPACK_T] = packed_once(b_node, how, blocks).ctypes.data, panels


def rows_kernel(cuts: tuple[int, ...], a: list[int]) -> bool:
    """Whether a product with a constant B runs ``pw_gemm_rows`` (A's elements broadcast from where they
    lie, B in panels of 16 columns: BERT's linear layers ~150 -> ~210 GFLOP/s, no A packed per tile):
    on the vector kernels of either width (one source, tile_gemm_t.c; AVX2 runs a panel as two vectors),
    with every column piece but the last a whole number of panels (a piece starts at K times its first
    column) and A's columns adjacent. Not at the generic level, where its scalar loop loses to OpenBLAS."""
    widths = [c1 - c0 for c0, c1 in itertools.pairwise(cuts)]
    return gemm_isa() != "generic" and all(w % PANEL_ROWS_T == 0 for w in widths[:-1]) and a[-1] == 1


def _packable(
    b: View, b_node: Any, alpha: float, out: tuple[int, ...], graph: TileGraph, i: int, a: list[int]
) -> bool:
    """A constant 2-D B, no scale, and either ``rows_kernel`` (any number of rows) or rows enough to
    fill a panel of pw_gemm_packed (a CNN head at batch 1 is a matrix-vector product: 8 rows computed
    for 1; OpenBLAS then took 0.33 ms per half of ResNet-50's head, ``rows_kernel`` ~0.05). Not at the
    generic level: the packed kernel's scalar loop there ran 14-25x slower than OpenBLAS's SSE family
    (128 x 768 x 768: 183 against 12.7 ms)."""
    rows = out[-2] if len(out) >= 2 else 1
    return (
        gemm_isa() != "generic"
        and len(b.shape) == 2
        and alpha == 1.0
        and is_constant(b_node)
        and b.shape[1] == out[-1]
        and (rows >= PANEL_ROWS or rows_kernel(tuple(int(c) for c in graph.grid(i)[-1]), a))
    )


def linear(t: LayerRow) -> int:
    """A linear layer (and ``fuse_epilogue``'s linear_act): with a constant weight, as a product on the
    packed micro-kernels; otherwise (a strided input or GELU) as a matmul with the weight transposed in
    place, or else the plain linear kernel (``bind_cnn.linear``)."""
    args, row, view, graph, i = t.args, t.row, t.view, t.graph, t.index
    act = args.get("act") or "none"
    x = view(args["input"])
    if act in PLAIN_ACTS and x.contiguous and not is_constant(args["weight"]):
        return bind_cnn.linear(t)
    if act not in SEQ_ACTS:
        raise NoKernel(f"activation {act}")
    w = view(args["weight"])
    if len(x.shape) < 2 or len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
        raise NoKernel(f"a weight of shape {w.shape} for an input of shape {x.shape}")
    out = out_shape(t.node)
    _start(row, K_MATMUL, out)
    x_strides = [*_batch(x, out), x.strides[-2], x.strides[-1]]
    scratch = _gemm(row, graph, i, out, x, x_strides, w, [0, 0, w.strides[1], w.strides[0]])
    w_t = View(w.base, w.offset, (w.strides[1], w.strides[0]), (w.shape[1], w.shape[0]), False)
    if _packable(w_t, args["weight"], 1.0, out, graph, i, x_strides):
        _pack_b(row, w_t, args["weight"], graph, i, x_strides)
        scratch = max(scratch, _panel_rows(graph, i, out) * w.shape[1])
    row[S_SCALAR], row[S_ACT] = _double(1.0), SEQ_ACTS[act]
    if args.get("bias") is not None:
        row[S_BIAS] = dense_view(view(args["bias"]), "bias").address
    return scratch


def _panel_rows(graph: TileGraph, i: int, out: tuple[int, ...]) -> int:
    """The largest tile's rows, rounded up to whole panels (the packed A of matmul_packed)."""
    return -(-graph.largest_extent(i, len(out) - 2) // PANEL_ROWS) * PANEL_ROWS


def _gemm(
    row: np.ndarray, graph: TileGraph, i: int, out: tuple[int, ...], a: View, a_strides: list[int], b: View,
    b_strides: list[int],
) -> int:  # fmt: skip
    """A and B with strides [batch0, batch1, row, col] over the output: how sgemm reads each, and the
    scratch the packed ones need for this layer's largest tile."""
    m, k, n = out[-2], a.shape[-1], out[-1]
    lay_a, *a_strides[2:] = gemm_layout(m, k, a_strides[2], a_strides[3])
    lay_b, *b_strides[2:] = gemm_layout(k, n, b_strides[2], b_strides[3])
    row[S_X], row[S_Y], row[SQ_K], row[SQ_LAYOUT_A], row[SQ_LAYOUT_B] = a.address, b.address, k, lay_a, lay_b
    row[S_XSTRIDE : S_XSTRIDE + 4] = a_strides
    row[S_YSTRIDE : S_YSTRIDE + 4] = b_strides
    if GEMM_PACK not in (lay_a, lay_b):
        return 0
    return k * (graph.largest_extent(i, len(out) - 2) + graph.largest_extent(i, len(out) - 1))
