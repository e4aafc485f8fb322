"""A tile graph made runnable (``build_program``): one row of kernel parameters per layer, filled by the
layer's binder from the op table (``tiles.ops``), the buffers the rows read and write, and the scratch
each worker needs.

Every layer writes a contiguous buffer (float32; bool for the comparisons): its own, or a block of one
arena placed by liveness (``memory.plan_buffers``, whose added edges make each reuse wait for the reads of
the old value).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch.fx
import torch.utils._pytree as pytree

from pathweave.analysis.ops import op_name
from pathweave.errors import InputError
from pathweave.tiles.abi import (
    K_CONV,
    K_DEPTHWISE,
    K_DWPW,
    PACKS,
    S_GROUPS,
    S_KH,
    S_KW,
    S_LAYOUT,
    S_OP,
    S_OSHAPE,
    S_OUT,
    S_POINTWISE,
    S_WPACK,
    S_WPACK_T,
    S_XSHAPE,
    SLOTS,
    WINDOW_FOLD,
)
from pathweave.tiles.blocked import blocked_values
from pathweave.tiles.conv_layout import WINOGRAD_MIN_CHANNELS
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.maps import NodeMaps, bound_args
from pathweave.tiles.ops import GRAPH_ONLY, TILE_OPS, no_kernel_error
from pathweave.tiles.rows import (
    BUFFER_DTYPES,
    LayerRow,
    NoKernel,
    View,
    base_node,
    input_dtype,
    out_shape,
    output_dtype,
    pad4,
    resolve,
)
from pathweave.tiles.runtime import gemm_isa


@dataclass
class TileProgram:
    layers: np.ndarray  # int64 [L, SLOTS]
    inputs: list[np.ndarray]  # the graph inputs' static buffers, filled before each run
    outputs: list[View]  # where the graph outputs are read after a run, in the output node's leaf order
    scratch_floats: int
    keep: list[np.ndarray] = field(default_factory=list)  # weights, buffers, aux arrays the C side reads

    def __post_init__(self) -> None:
        # (address, shape, torch dtype, bytes) of each contiguous buffer (inputs) and output view, else None
        self._loads = [_span(b, b.ctypes.data, b.shape, b.flags.c_contiguous) for b in self.inputs]
        self._reads = [_span(v.base, v.address, v.shape, v.contiguous) for v in self.outputs]

    def load(self, flat: list[torch.Tensor]) -> None:
        """Copy the inputs into their buffers: a contiguous CPU tensor of the buffer's shape and dtype with
        one memmove, anything else through NumPy (a view, a negated or conjugate view, another device)."""
        for i, (buf, span, x) in enumerate(zip(self.inputs, self._loads, flat, strict=True)):
            # a plain tensor only: a wrapper subclass or a ZeroTensor has no data at data_ptr() (0)
            fast = span is not None and type(x) in _PLAIN and x.device.type == "cpu" and x.dtype == span[2]
            if fast and x.shape == span[1] and x.is_contiguous() and not (x.is_neg() or x.is_conj()):
                try:
                    address = x.data_ptr()
                except RuntimeError:  # no storage (a tensor inside torch.func's transforms)
                    address = 0
                if address or not span[3]:
                    ctypes.memmove(span[0], address, span[3])
                    continue
            try:
                np.copyto(buf, x.detach().cpu().resolve_neg().resolve_conj().numpy(), casting="no")
            except RuntimeError as exc:  # no data to read: a ZeroTensor (zeros), a functional or fake tensor
                if type(x) in _PLAIN and x._is_zerotensor():
                    buf.fill(0)
                    continue
                raise InputError(
                    f"input {i} ({type(x).__name__}) has no data the tiles can read ({exc}); pass a plain "
                    "tensor (torch.func transforms and tensor subclasses are not supported)"
                ) from exc

    def read(self) -> tuple[torch.Tensor, ...]:
        """A new tensor of each graph output (copied from where the last run left it)."""
        out = []
        for view, span in zip(self.outputs, self._reads, strict=True):
            if span is None:
                out.append(torch.from_numpy(view.array().copy()))
                continue
            address, dims, dtype, nbytes = span
            value = torch.empty(dims, dtype=dtype)
            ctypes.memmove(value.data_ptr(), address, nbytes)
            out.append(value)
        return tuple(out)


#: torch's dtype of each NumPy dtype a buffer may have
_TORCH_DTYPES = {np.dtype(v): k for k, v in BUFFER_DTYPES.items()}
#: the tensor types whose data ``TileProgram.load`` copies from ``data_ptr()``
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _span(
    base: np.ndarray, address: int, dims: tuple[int, ...], contiguous: bool
) -> tuple[int, tuple[int, ...], torch.dtype, int] | None:
    """What ``TileProgram.load`` and ``read`` copy with one memmove (NumPy's and torch's conversions cost
    more: their Python runs cold after an inference): a contiguous block of ``base``'s dtype."""
    dtype = _TORCH_DTYPES.get(base.dtype)
    if not contiguous or dtype is None:
        return None
    return int(address), tuple(int(d) for d in dims), dtype, math.prod(dims) * base.itemsize


def build_program(
    gm: torch.fx.GraphModule,
    graph: TileGraph,
    plans: dict[torch.fx.Node, NodeMaps],
    offsets: np.ndarray | None = None,
    winograd_min_channels: int = WINOGRAD_MIN_CHANNELS,
) -> TileProgram:
    """Kernel rows for every layer of ``graph`` (built from ``gm`` with the same
    ``winograd_min_channels``). Raises one UnsupportedError naming every layer the native kernels cannot
    run. ``offsets`` (``memory.plan_buffers``) places each layer's output in one shared arena; without
    them every layer has its own buffer."""
    nodes = {n.name: n for n in gm.graph.nodes}
    keep: list[np.ndarray] = []
    bases, inputs = _buffers(gm, graph, nodes, offsets)

    def view(arg: Any, dtypes: tuple[type, ...] = (np.float32,)) -> View:
        """Where ``arg`` lies; a kernel names the element types it reads (float32 unless it says)."""
        v = resolve(gm, arg, plans, bases, keep)
        if v.base.dtype.type not in dtypes:
            names = ", ".join(np.dtype(d).name for d in dtypes)
            raise NoKernel(f"{arg.name} is {v.base.dtype}; the kernel reads {names}")
        return v

    rows = np.zeros((graph.num_layers, SLOTS), dtype=np.int64)
    isa = gemm_isa()
    blocked = blocked_values(gm, graph, isa, winograd_min_channels)
    failed: dict[str, str] = {}
    scratch = 0
    for i, name in enumerate(graph.layer_names):
        node = nodes[str(name)]
        layer = LayerRow(
            node, bound_args(node), rows[i], view, graph, i, keep, winograd_min_channels, blocked, isa
        )
        layer.row[S_OUT] = bases[node].ctypes.data
        layer.row[S_OSHAPE : S_OSHAPE + 4] = pad4(out_shape(node), 1)
        try:
            scratch = max(scratch, _bind(layer))
        except NoKernel as exc:
            failed[node.name] = f"{op_name(node)}: {exc}"
    if failed:
        raise no_kernel_error(failed)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = [view(a, tuple(BUFFER_DTYPES.values())) for a in pytree.tree_leaves(out_node.args[0])]
    keep.extend(bases.values())
    return TileProgram(rows, inputs, outputs, scratch, keep)


def _bind(layer: LayerRow) -> int:
    """Fill the layer's row by its op's binder; the scratch floats one of its tiles needs."""
    bind = TILE_OPS[op_name(layer.node)].bind
    if bind is None:
        raise NoKernel(GRAPH_ONLY)
    return bind(layer)


def _buffers(
    gm: torch.fx.GraphModule,
    graph: TileGraph,
    nodes: dict[str, torch.fx.Node],
    offsets: np.ndarray | None,
) -> tuple[dict[torch.fx.Node, np.ndarray], list[np.ndarray]]:
    """Every graph input's static buffer (also returned in order) and every layer's output buffer."""
    bases: dict[torch.fx.Node, np.ndarray] = {}
    inputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":  # float32, or ids and masks that only some kernels read (view dtypes)
            bases[node] = np.zeros(out_shape(node), dtype=input_dtype(node))
            inputs.append(bases[node])
    sizes = [math.prod(out_shape(nodes[str(name)])) for name in graph.layer_names]
    arena = None
    if offsets is not None:
        end = max((int(o) + n for o, n in zip(offsets, sizes, strict=True)), default=0)
        arena = np.zeros(end, dtype=np.float32)
    for i, name in enumerate(graph.layer_names):
        node = nodes[str(name)]
        dtype = _layer_dtype(node)
        if arena is None:
            bases[node] = np.zeros(out_shape(node), dtype=dtype)
        else:  # a block of sizes[i] floats holds as many values of a narrower type (bool: a quarter used)
            block = arena[offsets[i] : offsets[i] + sizes[i]].view(np.uint8)
            bases[node] = block[: sizes[i] * np.dtype(dtype).itemsize].view(dtype).reshape(out_shape(node))
    return bases, inputs


def _layer_dtype(node: torch.fx.Node) -> type:
    """The numpy type of a layer's output buffer: one its kernel writes (``TileOp.writes``)."""
    return output_dtype(node, TILE_OPS[op_name(node)].writes)


def layer_itemsizes(gm: torch.fx.GraphModule, graph: TileGraph) -> np.ndarray:
    """Bytes per element of each layer's output buffer (``_buffers``' types: bool 1, float32 4), what the
    buffer plan needs to find which floats of a block a tile writes."""
    nodes = {n.name: n for n in gm.graph.nodes}
    sizes = [np.dtype(_layer_dtype(nodes[str(name)])).itemsize for name in graph.layer_names]
    return np.asarray(sizes, dtype=np.int64)


def output_layers(gm: torch.fx.GraphModule, graph: TileGraph) -> set[int]:
    """The layers (by index in ``graph``) whose buffers hold the graph's outputs, directly or through
    views: they are read after the run, so their memory is never reused."""
    index = {str(n): i for i, n in enumerate(graph.layer_names)}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    found = set()
    for leaf in pytree.tree_leaves(out_node.args[0]):
        node = base_node(leaf, index)
        if isinstance(node, torch.fx.Node) and node.name in index:
            found.add(index[node.name])
    return found


#: what ``kernel_names`` calls each convolution path (PACKS' layouts by value)
CONV_KERNELS = {PACKS[None]: "direct", PACKS["narrow"]: "narrow", PACKS["padded"]: "padded",
                PACKS["winograd"]: "winograd", PACKS["blocked"]: "1x1 blocked"}  # fmt: skip


def kernel_names(layers: np.ndarray) -> list[str]:
    """Which path each convolution row of a program takes ("winograd", "padded", "narrow", "direct" on the
    packed micro-kernels, "1x1" on the input as it lies, "1x1 blocked" on the channel-blocked kernel
    (``tiles/blocked.py``), "window blocked" (a kh x kw window on that kernel; "window folded": its few input
    channels folded with its taps), "depthwise", "depthwise blocked" (between blocked values,
    ``blocked.depthwise_capable``), "depthwise+1x1" (``fuse_depthwise``), "sgemm"); "" for other layers."""
    names = []
    for row in layers:
        if row[S_OP] == K_DEPTHWISE:
            names.append("depthwise blocked" if row[S_LAYOUT] else "depthwise")
        elif row[S_OP] == K_DWPW:
            names.append("depthwise+1x1")
        elif row[S_OP] != K_CONV:
            names.append("")
        elif row[S_WPACK]:
            kind = CONV_KERNELS[int(row[S_WPACK_T])]
            if kind == "direct" and row[S_POINTWISE]:
                kind = "1x1"
            elif kind == "1x1 blocked" and row[S_KH] * row[S_KW] > 1:
                kind = "window folded" if int(row[S_LAYOUT]) & WINDOW_FOLD else "window blocked"
            names.append(kind)
        else:  # OpenBLAS, or tile_kernels.c's depthwise loop (windows of more taps than tile_depthwise.c's)
            depthwise = row[S_XSHAPE + 1] == row[S_GROUPS] and not row[S_POINTWISE]  # tile_kernels.c's test
            names.append("depthwise loop" if depthwise else "sgemm")
    return names
