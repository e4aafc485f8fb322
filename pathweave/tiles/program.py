"""A tile graph made runnable: one row of kernel parameters per layer for the native layer kernels
(``native/tile_kernels.h`` names the same slots), the buffers they read and write, and the scratch
each worker needs.

Every layer writes a contiguous float32 buffer: its own, or a block of one arena placed by liveness
(``tile_memory.plan_buffers``, whose added edges make each reuse wait for the reads of the old value).
Views are not layers: a layer reads a view's producer through the view's strides, found by replaying
the view ops on a contiguous meta tensor of the producer's shape.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from pathweave.analysis.ops import op_name
from pathweave.errors import UnsupportedError
from pathweave.meta import PACKED_WEIGHTS, Packed
from pathweave.passes.util import constant
from pathweave.tiles.graph import TileGraph, conv_layout
from pathweave.tiles.ops import IDENTITY_VIEWS, MULTI_VIEWS, VIEWS, NodeMaps, as_ints, bound_args
from pathweave.tiles.runtime import gemm_isa, winograd_scratch

SLOTS = 48
# slots and codes as in native/tile_kernels.h
S_OP, S_ACT, S_OUT, S_X, S_Y, S_W, S_BIAS, S_SCALAR = range(8)
S_OSHAPE, S_XSTRIDE, S_XSHAPE, S_YSTRIDE, S_BINOP, S_ALPHA = 8, 12, 16, 20, 24, 25
S_KH, S_KW, S_SH, S_SW, S_PH, S_PW, S_DH, S_DW, S_GROUPS = range(28, 37)
S_POINTWISE, S_COUNT_PAD, S_DIVISOR, S_AUX, S_NAUX = 37, 38, 39, 40, 41
S_WPACK, S_WPACK_T, S_PROFILE = 42, 43, 47
#: rows per panel of packed convolution weights (native/tile_gemm.h): PW_MR, and PW_TR for the transposed
#: micro-kernel
PANEL_ROWS, PANEL_ROWS_T = 8, 16
#: entries after the row offsets of a padded convolution (PW_KOFF_PAD in native/tile_gemm.h)
KOFF_PAD = 8
#: how a convolution uses its packed weights (slot S_WPACK_T, PW_PACK_* in native/tile_kernels.h)
PACKS = {None: 0, "narrow": 1, "padded": 2, "winograd": 3}
K_CONV, K_MAXPOOL, K_AVGPOOL, K_ADAPTIVE, K_LINEAR, K_EWISE, K_CAT, K_AFFINE, K_PAD, K_SUM = range(1, 11)
BATCH_NORMS = ("batch_norm", "_native_batch_norm_legit_no_training", "batch_norm_act")
ACTS = {"none": 0, "relu": 1, "gelu": 2, "tanh": 3, "sigmoid": 5}  # 4: tile_program_seq's tanh GELU
BINOPS = {"add": 1, "sub": 2, "mul": 3, "div": 4, "rsub": 5}
UNARY = {"relu": "relu", "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid"}


@dataclass(frozen=True)
class View:
    """Where a layer finds one tensor input: a base array, an element offset into it, strides, shape."""

    base: np.ndarray
    offset: int
    strides: tuple[int, ...]
    shape: tuple[int, ...]
    contiguous: bool  # row-major without gaps (torch's is_contiguous of the replayed view)

    @property
    def address(self) -> int:
        return int(self.base.ctypes.data) + self.base.itemsize * self.offset

    def array(self) -> np.ndarray:
        flat = self.base.reshape(-1)[self.offset :]
        strides = tuple(self.base.itemsize * s for s in self.strides)
        return np.lib.stride_tricks.as_strided(flat, self.shape, strides)


@dataclass
class TileProgram:
    layers: np.ndarray  # int64 [L, SLOTS]
    inputs: list[np.ndarray]  # the graph inputs' static buffers, filled before each run
    outputs: list[View]  # where the graph outputs are read after a run, in the output node's leaf order
    scratch_floats: int
    keep: list[np.ndarray] = field(default_factory=list)  # weights, buffers, aux arrays the C side reads


class NoKernel(Exception):
    """A layer the native kernels cannot run; build_program collects them into one UnsupportedError."""


def _val(node: torch.fx.Node) -> Any:
    """The node's value, or its first one where it has several (batch norm's (out, mean, invstd))."""
    val = node.meta.get("val")
    return val[0] if isinstance(val, (tuple, list)) and val else val


def out_shape(node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(int(d) for d in _val(node).shape)


def _pad4(values: list[int] | tuple[int, ...], fill: int) -> list[int]:
    return [*values, *[fill] * (4 - len(values))]


def build_program(
    gm: torch.fx.GraphModule,
    graph: TileGraph,
    plans: dict[torch.fx.Node, NodeMaps],
    offsets: np.ndarray | None = None,
) -> TileProgram:
    """Kernel rows for every layer of ``graph`` (built from ``gm``). Raises one UnsupportedError naming
    every layer the native kernels cannot run. ``offsets`` (``tile_memory.plan_buffers``) places each
    layer's output in one shared arena; without them every layer has its own buffer."""
    nodes = {n.name: n for n in gm.graph.nodes}
    keep: list[np.ndarray] = []
    bases: dict[torch.fx.Node, np.ndarray] = {}
    inputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":  # float32, or ids and masks that only some kernels read (view dtypes)
            bases[node] = np.zeros(out_shape(node), dtype=_input_dtype(node))
            inputs.append(bases[node])
    sizes = [math.prod(out_shape(nodes[str(name)])) for name in graph.layer_names]
    arena = None
    if offsets is not None:
        end = max((int(o) + n for o, n in zip(offsets, sizes, strict=True)), default=0)
        arena = np.zeros(end, dtype=np.float32)
    for i, name in enumerate(graph.layer_names):
        node = nodes[str(name)]
        _float32(node)
        if arena is None:
            bases[node] = np.zeros(out_shape(node), dtype=np.float32)
        else:
            bases[node] = arena[offsets[i] : offsets[i] + sizes[i]].reshape(out_shape(node))

    def view(arg: Any, dtypes: tuple[type, ...] = (np.float32,)) -> View:
        """Where ``arg`` lies; a kernel names the element types it reads (float32 unless it says)."""
        v = _resolve(gm, arg, plans, bases, keep)
        if v.base.dtype.type not in dtypes:
            names = ", ".join(np.dtype(d).name for d in dtypes)
            raise NoKernel(f"{arg.name} is {v.base.dtype}; the kernel reads {names}")
        return v

    rows = np.zeros((graph.num_layers, SLOTS), dtype=np.int64)
    failed: dict[str, str] = {}
    scratch = 0
    for i, name in enumerate(graph.layer_names):
        node = nodes[str(name)]
        row = rows[i]
        row[S_OUT] = bases[node].ctypes.data
        row[S_OSHAPE : S_OSHAPE + 4] = _pad4(out_shape(node), 1)
        try:
            scratch = max(scratch, _describe(node, row, view, keep, graph, i))
        except NoKernel as exc:
            failed[node.name] = f"{op_name(node)}: {exc}"
    if failed:
        lines = "\n".join(f"  {n}: {why}" for n, why in failed.items())
        raise UnsupportedError(
            f"{len(failed)} layer(s) have no native tile kernel:\n{lines}",
            ops=sorted({why.split(":")[0] for why in failed.values()}),
        )
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = [view(a, tuple(BUFFER_DTYPES.values())) for a in pytree.tree_leaves(out_node.args[0])]
    keep.extend(bases.values())
    return TileProgram(rows, inputs, outputs, scratch, keep)


def output_layers(gm: torch.fx.GraphModule, graph: TileGraph) -> set[int]:
    """The layers (by index in ``graph``) whose buffers hold the graph's outputs, directly or through
    views: they are read after the run, so their memory is never reused."""
    index = {str(n): i for i, n in enumerate(graph.layer_names)}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    found = set()
    for leaf in pytree.tree_leaves(out_node.args[0]):
        node = leaf
        while isinstance(node, torch.fx.Node) and node.name not in index and node.all_input_nodes:
            node = node.all_input_nodes[0]
        if isinstance(node, torch.fx.Node) and node.name in index:
            found.add(index[node.name])
    return found


def _float32(node: torch.fx.Node) -> None:
    val = _val(node)
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
        raise UnsupportedError(f"node {node.name}: the native tile kernels compute float32 tensors only, "
                               f"not {getattr(val, 'dtype', type(val).__name__)}")  # fmt: skip


#: element types a graph input or a constant may have; kernels check what they read (``view(dtypes=...)``)
BUFFER_DTYPES = {torch.float32: np.float32, torch.int64: np.int64, torch.int32: np.int32,
                 torch.bool: np.bool_}  # fmt: skip


def _input_dtype(node: torch.fx.Node) -> type:
    dtype = getattr(_val(node), "dtype", None)
    if dtype not in BUFFER_DTYPES:
        raise UnsupportedError(f"node {node.name}: the native tile kernels read float32, int64, int32 and "
                               f"bool inputs only, not {dtype}")  # fmt: skip
    return BUFFER_DTYPES[dtype]


def _resolve(
    gm: torch.fx.GraphModule,
    arg: torch.fx.Node,
    plans: dict[torch.fx.Node, NodeMaps],
    bases: dict[torch.fx.Node, np.ndarray],
    keep: list[np.ndarray],
) -> View:
    """Follow ``arg`` through views to a base array; the view ops replayed on a meta tensor of the base's
    shape give the offset and strides at which the base holds ``arg``."""
    chain = []
    node = arg
    while node not in bases:
        if node.op == "get_attr":
            value = constant(gm, node)
            if value is None or value.dtype not in BUFFER_DTYPES:
                raise UnsupportedError(f"node {node.name}: constant of type {getattr(value, 'dtype', None)}")
            bases[node] = value.detach().contiguous().numpy()
            keep.append(bases[node])
            break
        if node.target is operator.getitem and node.args[0] in bases:
            if node.args[1] != 0:  # a layer's first output is its buffer; it has no other
                raise UnsupportedError(
                    f"node {node.name}: output {node.args[1]} of layer {node.args[0].name}"
                )
            node = node.args[0]
            continue
        plan = plans.get(node)
        multi = node.op == "call_function" and op_name(node) in MULTI_VIEWS
        if not multi and (plan is None or plan.role != "view"):
            raise UnsupportedError(f"node {node.name}: neither a layer, an input, a constant nor a view")
        chain.append(node)
        node = node.all_input_nodes[0]
    base = bases[node]
    t = torch.empty(base.shape, dtype=torch.float32, device="meta")
    for v in reversed(chain):
        t = _replay(v, node, t)
        node = v
    strides, dims = tuple(int(s) for s in t.stride()), tuple(int(d) for d in t.shape)
    return View(base, int(t.storage_offset()), strides, dims, t.is_contiguous())


def _replay(view: torch.fx.Node, source: torch.fx.Node, t: torch.Tensor) -> torch.Tensor:
    """Run one view op on the meta stand-in ``t`` of its source."""
    if op_name(view) in IDENTITY_VIEWS:  # the same values: read the source as it lies
        return t
    args = torch.fx.node.map_arg(view.args, lambda a: t if a is source else a)
    kwargs = torch.fx.node.map_arg(view.kwargs, lambda a: t if a is source else a)
    if any(isinstance(a, torch.fx.Node) for a in (*view.args, *view.kwargs.values()) if a is not source):
        raise UnsupportedError(f"view {view.name} reads another tensor")
    out = view.target(*args, **kwargs)
    if isinstance(out, torch.Tensor) and out is not t and not out._is_view():
        raise UnsupportedError(f"view {view.name} copies its input ({op_name(view)} of a strided tensor)")
    return out  # a split gives a tuple: the getitem after it picks the piece


def _describe(node: torch.fx.Node, row: np.ndarray, view: Any, keep: list, graph: TileGraph, i: int) -> int:
    """Fill ``row`` for ``node``; returns the scratch floats one of its tiles needs."""
    name = op_name(node)
    args = bound_args(node)
    from pathweave.tiles.bind_transformer import (
        describe_seq,  # the transformer kernels; that module builds on this one
    )

    scratch = describe_seq(node, name, args, row, view, graph, i)
    if scratch is not None:
        return scratch
    if name in ("conv2d", "conv2d_act"):
        return _conv(node, args, row, view, graph, i, keep)
    if name in ("max_pool2d", "avg_pool2d"):
        _pool(name, args, row, view)
        return 0
    if name in ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"):
        x = dense_view(view(args["self"]), "input")
        if len(x.shape) != 4:
            raise NoKernel("only 4-D inputs")
        row[S_OP], row[S_X] = K_ADAPTIVE, x.address
        row[S_XSHAPE : S_XSHAPE + 4] = x.shape
        return 0
    if name in ("linear", "linear_act"):
        _linear(node, args, row, view)
        return 0
    if name == "cat_batch_norm_act":  # each input's copy applies the batch norm and the activation
        _cat(node, args, row, view, keep)
        row[S_Y], row[S_BIAS] = _affine_params(node, args, view, keep)
        row[S_ACT] = ACTS[args["act"]]
        return 0
    if name in ("cat", "stack"):
        _cat(node, args, row, view, keep, stack=name == "stack")
        return 0
    if name == "sum":
        _sum(node, args, row, view)
        return 0
    if name in BATCH_NORMS:
        _batch_norm(node, args, row, view, keep)
        return 0
    if name in ("pad", "constant_pad_nd"):
        _pad(node, args, row, view)
        return 0
    if name in BINOPS or name in UNARY:
        _ewise(node, name, args, row, view)
        return 0
    raise NoKernel("no kernel for this op")


def dense_view(v: View, what: str) -> View:
    if not v.contiguous:
        raise NoKernel(f"{what} is not contiguous (strides {v.strides} for shape {v.shape})")
    return v


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


def is_constant(node: Any) -> bool:
    """Whether ``node`` is a constant (a weight), directly or through views of one: only constants may be
    packed at build time (a weight that is an input or a layer's output changes with every run)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and len(node.all_input_nodes) == 1:
        if op_name(node) not in VIEWS and op_name(node) not in IDENTITY_VIEWS:
            return False
        node = node.all_input_nodes[0]
    return isinstance(node, torch.fx.Node) and node.op == "get_attr"


def _packed(weight: torch.fx.Node, w: View, groups: int, rows: int) -> np.ndarray | None:
    """The packed weights (panels of ``rows``), made once per weight node and shared by every program of
    the graph; None for a weight that is not a constant (it keeps the sgemm path, which reads it at run
    time)."""
    if not is_constant(weight):
        return None
    return packed_once(weight, (groups, rows), lambda: pack_weights(w.array(), groups, rows))


def packed_once(
    weight: torch.fx.Node, how: object, make: Callable[[], np.ndarray | None]
) -> np.ndarray | None:
    """``make()``'s layout of a weight, made once per weight node and layout (``how``) and kept in its
    meta, so that every program built from the graph shares it and it lives as long as the graph."""
    cached = weight.meta.get(PACKED_WEIGHTS)
    if cached is None or cached.how != how:
        cached = Packed(how, make())
        weight.meta[PACKED_WEIGHTS] = cached
    return cached.data


def _conv(
    node: torch.fx.Node, args: dict, row: np.ndarray, view: Any, graph: TileGraph, i: int, keep: list
) -> int:
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
    lo, hi = graph.layer_tile_start[i], graph.layer_tile_start[i + 1]
    if np.any(graph.tile_lo[lo:hi, 3] != 0) or np.any(graph.tile_hi[lo:hi, 3] != out[3]):
        raise NoKernel("tiles must span whole output rows")
    # narrow tiles and padded inputs take the transposed micro-kernel where the AVX-512 kernels run (with
    # 8-float vectors the column tails waste little); it needs the weights in panels of its own height
    layout = conv_layout(node) if gemm_isa() == "avx512" else None
    if layout == "winograd" and is_constant(args["weight"]):
        return _winograd(node, args, row, w, graph, i, keep)
    if layout == "winograd":  # a weight given at run time: the direct kernels read it as it comes
        layout = None
    packed = _packed(args["weight"], w, int(args["groups"]), PANEL_ROWS_T) if layout else None
    if packed is None:  # fewer output channels than its panel: the row-vector kernels' panels of 8
        layout = None
        packed = _packed(args["weight"], w, int(args["groups"]), PANEL_ROWS)
    if packed is not None:
        keep.append(packed)
        row[S_WPACK], row[S_WPACK_T] = packed.ctypes.data, PACKS[layout]
    # a 1x1 stride-1 convolution multiplies the input as it lies (no im2col, no scratch); the kernel
    # takes this decision from the row, so the scratch sized here always fits what it does
    row[S_POINTWISE] = kh == kw == 1 and (sh, sw, ph, pw) == (1, 1, 0, 0) and out[2:] == x.shape[2:]
    rows, k = graph.largest_extent(i, 2), x.shape[1] // int(args["groups"]) * kh * kw
    # the transposed kernel's sums: its positions x (channels of a tile and the rows before them in
    # their first panel, rounded up to whole panels); stride 1 over a padded copy sums whole padded rows
    width = x.shape[3] + 2 * pw if layout == "padded" and sh == 1 else out[3]
    channels = -(-(graph.largest_extent(i, 1) + PANEL_ROWS_T - 1) // PANEL_ROWS_T) * PANEL_ROWS_T
    sums = rows * width * channels if layout else 0
    if layout == "padded":  # the zero-padded copy (pw_padded_floats), the offsets of B's rows (int64)
        copy = x.shape[1] * ((rows - 1) * sh + kh) * (x.shape[3] + 2 * pw) + kw
        return (-(-copy // 16) * 16 if ph or pw or sh == 1 else 0) + 2 * (k + KOFF_PAD) + sums
    if row[S_POINTWISE]:
        return sums
    return k * rows * out[3] + sums


#: Winograd F(2x2, 3x3)'s weight transform G (U = G g G^T, native/tile_winograd.c)
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """3x3 weights [O, C, 3, 3] as the Winograd kernel reads them: U = G g G^T per (o, c) in float64, then
    per point of the 4x4 transform the transposed micro-kernel's panels of ``PANEL_ROWS_T``
    ([16 * panels, C, rows])."""
    u = np.einsum("au,ocuv,bv->aboc", WINOGRAD_G, w.astype(np.float64), WINOGRAD_G)
    u = u.reshape(16, w.shape[0], w.shape[1], 1, 1).astype(np.float32)
    return np.concatenate([pack_weights(p, 1, PANEL_ROWS_T) for p in u])


def _winograd(
    node: torch.fx.Node, args: dict, row: np.ndarray, w: View, graph: TileGraph, i: int, keep: list
) -> int:
    packed = packed_once(args["weight"], "winograd", lambda: winograd_weights(w.array()))
    keep.append(packed)
    row[S_WPACK], row[S_WPACK_T] = packed.ctypes.data, PACKS["winograd"]
    c, out = w.shape[1], out_shape(node)
    return winograd_scratch(c, graph.largest_extent(i, 2), graph.largest_extent(i, 1), out[3])


#: what ``kernel_names`` calls each convolution path (PACKS' layouts by value)
CONV_KERNELS = {PACKS[None]: "direct", PACKS["narrow"]: "narrow", PACKS["padded"]: "padded",
                PACKS["winograd"]: "winograd"}  # fmt: skip


def kernel_names(layers: np.ndarray) -> list[str]:
    """Which path each convolution row of a program takes ("winograd", "padded", "narrow", "direct" on the
    packed micro-kernels, "1x1" on the input as it lies, "depthwise", "sgemm"); "" for other layers."""
    names = []
    for row in layers:
        if row[S_OP] != K_CONV:
            names.append("")
        elif row[S_WPACK]:
            kind = CONV_KERNELS[int(row[S_WPACK_T])]
            names.append("1x1" if kind == "direct" and row[S_POINTWISE] else kind)
        else:  # OpenBLAS, or the direct depthwise loop for one input channel per group
            depthwise = row[S_XSHAPE + 1] == row[S_GROUPS] and not row[S_POINTWISE]  # tile_kernels.c's test
            names.append("depthwise" if depthwise else "sgemm")
    return names


def _pool(name: str, args: dict, row: np.ndarray, view: Any) -> None:
    x = view(args["self"])  # a view is read through its strides, with adjacent columns
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
    if name == "avg_pool2d":
        row[S_COUNT_PAD] = int(bool(args.get("count_include_pad", True)))
        row[S_DIVISOR] = int(args.get("divisor_override") or 0)


def _linear(node: torch.fx.Node, args: dict, row: np.ndarray, view: Any) -> None:
    x = dense_view(view(args["input"]), "input")
    w = dense_view(view(args["weight"]), "weight")
    out = out_shape(node)
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


def _broadcast_strides(v: View, out: tuple[int, ...]) -> list[int]:
    """The strides of ``v`` over the output's index space (right-aligned; 0 where it broadcasts)."""
    lead = len(out) - len(v.shape)
    strides = [0] * lead + [s if n != 1 else 0 for s, n in zip(v.strides, v.shape, strict=True)]
    return _pad4(strides, 0)


def _ewise(node: torch.fx.Node, name: str, args: dict, row: np.ndarray, view: Any) -> None:
    out = out_shape(node)
    if len(out) > 4:
        raise NoKernel("more than 4 dims")
    row[S_OP] = K_EWISE
    if name in UNARY:
        if name == "gelu" and args.get("approximate", "none") != "none":
            raise NoKernel("tanh-approximated gelu")
        row[S_ACT] = ACTS[UNARY[name]]
        row[S_XSTRIDE : S_XSTRIDE + 4] = _broadcast_strides(x := view(args["self"]), out)
        row[S_X] = x.address
        return
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


def _batch_norm(node: torch.fx.Node, args: dict, row: np.ndarray, view: Any, keep: list) -> None:
    """Inference batch norm (one not folded into a convolution) as x * scale + shift per channel, the
    two made here from the running statistics, the weight, the bias and eps."""
    if args.get("training"):
        raise NoKernel("training mode")
    scale, shift = _affine_params(node, args, view, keep)
    x = view(args["input"])
    row[S_OP], row[S_X], row[S_Y], row[S_BIAS] = K_AFFINE, x.address, scale, shift
    row[S_ACT] = ACTS[args.get("act") or "none"]  # tile_fuse's batch_norm_act
    row[S_XSTRIDE : S_XSTRIDE + 4] = _broadcast_strides(x, out_shape(node))
    row[S_YSTRIDE : S_YSTRIDE + 4] = [0, 1, 0, 0]  # the channel dim


def _affine_params(node: torch.fx.Node, args: dict, view: Any, keep: list) -> tuple[int, int]:
    """The addresses of an inference batch norm's scale and shift per channel (float32, kept)."""
    out = out_shape(node)
    if not 2 <= len(out) <= 4:
        raise NoKernel(f"a {len(out)}-D input")
    stats = {}
    for key in ("weight", "bias", "running_mean", "running_var"):
        arg = args.get(key)
        if isinstance(arg, torch.fx.Node) and not is_constant(arg):
            raise NoKernel(f"{key} is not a constant")
        stats[key] = None if arg is None else view(arg).array().astype(np.float64)
    channels = out[1]
    invstd = 1.0 / np.sqrt(stats["running_var"] + float(args["eps"]))
    scale = invstd * (stats["weight"] if stats["weight"] is not None else 1.0)
    shift = (stats["bias"] if stats["bias"] is not None else 0.0) - stats["running_mean"] * scale
    scale, shift = (np.ascontiguousarray(np.broadcast_to(v, (channels,)), np.float32) for v in (scale, shift))
    keep.extend((scale, shift))
    return scale.ctypes.data, shift.ctypes.data


def _pad(node: torch.fx.Node, args: dict, row: np.ndarray, view: Any) -> None:
    """Constant padding (``pad`` with mode "constant", ``constant_pad_nd``)."""
    if (args.get("mode") or "constant") != "constant":
        raise NoKernel(f"mode {args.get('mode')!r}")
    x = view(args.get("self", args.get("input")))
    out = out_shape(node)
    if len(out) > 4:
        raise NoKernel("more than 4 dims")
    pads = [int(p) for p in args["pad"]]
    before = [0] * len(out)
    for k in range(len(pads) // 2):  # pairs from the last dim backwards
        before[len(out) - 1 - k] = pads[2 * k]
    row[S_OP], row[S_X] = K_PAD, x.address
    row[S_XSHAPE : S_XSHAPE + 4] = _pad4(list(x.shape), 1)
    row[S_XSTRIDE : S_XSTRIDE + 4] = _pad4(list(x.strides), 0)
    row[S_KH : S_KH + 4] = _pad4(before, 0)
    row[S_SCALAR] = np.float64(float(args.get("value") or 0.0)).view(np.int64)


def _sum(node: torch.fx.Node, args: dict, row: np.ndarray, view: Any) -> None:
    """sum over up to two dims (keepdim or not), float32 in and out."""
    if args.get("dtype") is not None:
        raise NoKernel("a dtype argument")
    x = view(args["self"])
    out = out_shape(node)
    dims = sorted({d % len(x.shape) for d in (args.get("dim") or range(len(x.shape)))})
    if len(dims) > 2 or len(out) > 4:
        raise NoKernel(f"a sum over {len(dims)} dims into {len(out)}")
    kept = [d for d in range(len(x.shape)) if d not in dims]
    keepdim = len(out) == len(x.shape)
    strides = [0] * len(out)  # x's strides over the output's dims (0 for a kept reduced dim)
    for k, d in enumerate(kept):
        strides[d if keepdim else k] = x.strides[d]
    reduced = [(x.shape[d], x.strides[d]) for d in dims] + [(1, 0)] * (2 - len(dims))
    row[S_OP], row[S_X] = K_SUM, x.address
    row[S_XSTRIDE : S_XSTRIDE + 4] = _pad4(strides, 0)
    row[S_KH], row[S_KW], row[S_SH], row[S_SW] = reduced[0][0], reduced[1][0], reduced[0][1], reduced[1][1]


def _cat(
    node: torch.fx.Node, args: dict, row: np.ndarray, view: Any, keep: list, stack: bool = False
) -> None:
    """Concatenation; ``stack`` is one along a new dim (each input viewed with a size-1 dim there)."""
    out = out_shape(node)
    nd = len(out)
    if nd > 4:
        raise NoKernel("more than 4 dims")
    dim = args["dim"] % nd
    records, offset = [], 0
    for t in args["tensors"]:
        v = view(t)
        shape, strides = list(v.shape), list(v.strides)
        if stack:
            shape.insert(dim, 1)
            strides.insert(dim, 0)
        size = shape[dim] if math.prod(shape) else 0
        if size:
            records.append([v.address, offset, size, *_pad4(strides, 0)])
        offset += size
    aux = np.asarray(records, dtype=np.int64).reshape(-1, 7)
    keep.append(aux)
    row[S_OP], row[S_GROUPS], row[S_AUX], row[S_NAUX] = K_CAT, dim, aux.ctypes.data, len(aux)
