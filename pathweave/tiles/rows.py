"""What the kernel binders fill a program's rows from: where each tensor lies (``View``, found through
the views), the layer being bound (``LayerRow``), packed weights made once per graph, and the element
types the native kernels read.

Views are not layers: a layer reads a view's producer through the view's strides, found by replaying
the view ops on a contiguous meta tensor of the producer's shape.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.errors import UnsupportedError
from pathweave.meta import PACKED_WEIGHTS, Packed
from pathweave.passes.util import constant
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.maps import IDENTITY_VIEWS, MULTI_VIEWS, VIEW_OPS, NodeMaps

#: element types a graph input or a constant may have; kernels check what they read (``view(dtypes=...)``)
BUFFER_DTYPES = {torch.float32: np.float32, torch.int64: np.int64, torch.int32: np.int32,
                 torch.bool: np.bool_}  # fmt: skip


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


#: where a tensor argument lies, for a kernel that reads these element types (float32 unless it says)
ViewOf = Callable[..., View]


@dataclass(frozen=True)
class LayerRow:
    """One layer as its binder sees it: the node and its arguments by schema name, the int64 row to fill
    (``S_OUT`` and ``S_OSHAPE`` set already), ``view`` to find a tensor argument, the tile graph and the
    layer's index in it (tile extents size the scratch), ``keep`` for arrays the C side reads, the
    strategy's Winograd threshold (``conv_layout``), the layers whose outputs are channel-blocked and the
    kernels' instruction set level (``runtime.gemm_isa``)."""

    node: torch.fx.Node
    args: dict[str, Any]
    row: np.ndarray
    view: ViewOf
    graph: TileGraph
    index: int
    keep: list[np.ndarray]
    winograd_min_channels: int
    blocked: frozenset[str] = frozenset()  # the layers whose outputs are channel-blocked (tiles/blocked.py)
    isa: str = "generic"


#: fills a layer's row; returns the scratch floats one of its tiles needs, or raises NoKernel
Binder = Callable[[LayerRow], int]


class NoKernel(Exception):
    """A layer the native kernels cannot run; build_program collects them into one UnsupportedError."""


def value(node: torch.fx.Node) -> Any:
    """The node's value, or its first one where it has several (batch norm's (out, mean, invstd))."""
    val = node.meta.get("val")
    return val[0] if isinstance(val, (tuple, list)) and val else val


def out_shape(node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(int(d) for d in value(node).shape)


def pad4(values: list[int] | tuple[int, ...], fill: int) -> list[int]:
    return [*values, *[fill] * (4 - len(values))]


def output_dtype(node: torch.fx.Node, writes: tuple[torch.dtype, ...]) -> type:
    """The numpy type of a layer's output buffer, one of those its kernel ``writes`` (``TileOp.writes``)."""
    val = value(node)
    if not isinstance(val, torch.Tensor) or val.dtype not in writes:
        names = ", ".join(str(t) for t in writes)
        raise UnsupportedError(f"node {node.name}: its tile kernel writes {names}, "
                               f"not {getattr(val, 'dtype', type(val).__name__)}")  # fmt: skip
    return BUFFER_DTYPES[val.dtype]


def input_dtype(node: torch.fx.Node) -> type:
    dtype = getattr(value(node), "dtype", None)
    if dtype not in BUFFER_DTYPES:
        raise UnsupportedError(f"node {node.name}: the native tile kernels read float32, int64, int32 and "
                               f"bool inputs only, not {dtype}")  # fmt: skip
    return BUFFER_DTYPES[dtype]


def dense_view(v: View, what: str) -> View:
    if not v.contiguous:
        raise NoKernel(f"{what} is not contiguous (strides {v.strides} for shape {v.shape})")
    return v


def resolve(
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
            weight = constant(gm, node)
            if weight is None or weight.dtype not in BUFFER_DTYPES:
                raise UnsupportedError(f"node {node.name}: constant of type {getattr(weight, 'dtype', None)}")
            bases[node] = weight.detach().contiguous().numpy()
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


def viewed(view: torch.fx.Node, v: View) -> View:
    """``v`` (where the view op ``view``'s input lies) seen through ``view``."""
    extent = 1 + v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides, strict=True) if n > 0)
    t = torch.empty(extent, device="meta").as_strided(v.shape, v.strides, v.offset)
    t = _replay(view, view.all_input_nodes[0], t)
    strides, dims = tuple(int(s) for s in t.stride()), tuple(int(d) for d in t.shape)
    return View(v.base, int(t.storage_offset()), strides, dims, t.is_contiguous())


def coalesced(v: View) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``v``'s shape and strides with its dims of size 1 dropped and each dim merged into the one before
    it where together they step as one (the same elements in the same row-major order, in fewer dims)."""
    dims = [(n, s) for n, s in zip(v.shape, v.strides, strict=True) if n != 1]
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    return tuple(n for n, _ in merged), tuple(s for _, s in merged)


def base_node(node: Any, index: dict[str, int]) -> Any:
    """The layer (a name in ``index``) or graph input whose buffer ``node`` reads: through views to their
    first input (``node`` itself where it is none of those, or not a node)."""
    while isinstance(node, torch.fx.Node) and node.name not in index and node.all_input_nodes:
        node = node.all_input_nodes[0]
    return node


def is_constant(node: Any) -> bool:
    """Whether ``node`` is a constant (a weight), directly or through views of one: only constants may be
    packed at build time (a weight that is an input or a layer's output changes with every run)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and len(node.all_input_nodes) == 1:
        if op_name(node) not in VIEW_OPS:
            return False
        node = node.all_input_nodes[0]
    return isinstance(node, torch.fx.Node) and node.op == "get_attr"


#: bytes every packed weight starts on (``packed_once``): a cache line, so that no 32-byte vector of the
#: kernels' weight rows straddles two lines (malloc and numpy give 16; 0: as they come, for A/B)
PACK_ALIGN = 64


def cache_aligned(a: np.ndarray) -> np.ndarray:
    """``a`` (C-contiguous), or a copy of it that starts on a multiple of ``PACK_ALIGN`` bytes."""
    if not PACK_ALIGN or a.ctypes.data % PACK_ALIGN == 0:
        return a
    raw = np.empty(a.nbytes + PACK_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % PACK_ALIGN
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def packed_once(
    weight: torch.fx.Node, how: object, make: Callable[[], np.ndarray | None]
) -> np.ndarray | None:
    """``make()``'s layout of a weight, made once per weight node and layout (``how``) and kept in its
    meta, so that every program built from the graph shares it and it lives as long as the graph."""
    cached = weight.meta.get(PACKED_WEIGHTS)
    if cached is None or cached.how != how:
        data = make()
        cached = Packed(how, None if data is None else cache_aligned(data))
        weight.meta[PACKED_WEIGHTS] = cached
    return cached.data
