"""ASPEN's tile dataflow graph (Park et al., NeurIPS 2023): every layer's output is cut into tiles, and
each tile depends on the tiles of other layers it reads, so a runtime can start a tile as soon as its
parents are done, with no barrier between operators. This builds the graph only. Dependencies are
exact where the range maps are (most ops), a superset where tile_ranges says "bounding box".

Layers are the compute nodes of an ATen graph (``tile_ops.plan_nodes``). Views (view, flatten,
transpose, getitem, clone, split, slice, ...) get no tiles: their range maps are composed into their
consumers' maps, so a consumer tile depends directly on the producer tiles under the view. Graph inputs
and weights are ready before any tile runs and are not part of the graph.

A tile's parents come from interval arithmetic: its region goes through the consumer's range map (and
the views' maps) to a region of the producer, then per dim a bisection on the producer's tile grid
(``Grid.hits``); no tensor element is ever enumerated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch.fx

from pathweave.analysis.cost import node_cost
from pathweave.analysis.ops import op_kind, op_name
from pathweave.errors import InputError, PlanError
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles.grid import Grid, make_grid
from pathweave.tiles.ops import (
    CONVERSIONS,
    ELEMENTWISE,
    MAX_DIMS,
    NodeMaps,
    RegionMap,
    as_ints,
    bound_args,
    plan_nodes,
    shape,
)

TilesPerLayer = Callable[[torch.fx.Node], int] | dict[str, int] | int | None
#: default work per tile: FLOPs plus BYTE_WORK per byte of activations read and written
WORK_PER_TILE = 4e6
BYTE_WORK = 4
#: the smallest matrix-product tile (``_min_piece``)
GEMM_MIN_COLUMNS, GEMM_MIN_ROWS = 128, 64
#: convolution channel tiles start on multiples of this (the micro-kernels' panel rows, tile_gemm.h)
CHANNEL_ALIGN = 8
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
PADDED_WIDTH_PER_PAD = 7
#: stride-2 convolutions take it from fewer products per output (ResNet-50's 7x7 stem, k = 147: 82 -> 101
#: GFLOP/s as a layer alone)
PADDED_MIN_K_STRIDED = 128
#: linear / matmul column pieces start on multiples of this (panels of native/tile_gemm_t.c's
#: pw_gemm_rows: GPT-2's LM head, 50257 columns, was cut into pieces of no whole panels)
FEATURE_ALIGN = 16
#: the smallest linear / matmul tile: rows by output features (BERT's 128 x 768 x 768 on one core:
#: ~120 GFLOP/s in tiles of 64 x 64, ~175 in tiles of 128 x 128)
MATMUL_MIN_ROWS, MATMUL_MIN_FEATURES = 128, 128
#: 3x3 stride-1 convolutions (padding 0 or 1, no dilation, one group) of at least WINOGRAD_MIN_CHANNELS
#: input and output channels run Winograd F(2x2, 3x3) (native/tile_winograd.c: 2.25x fewer multiply-adds);
#: over maps at least WINOGRAD_MIN_WIDTH wide (on 7x7 maps the 2x2 blocks compute 8x8 outputs, and the
#: transformed weights, 16/9 the size, stream from memory at batch 1: ResNet-50's 7x7 layers gained
#: nothing); their row pieces start on even rows (whole pairs), hold at least WINOGRAD_MIN_BLOCKS 2x2
#: blocks (or half the rows, whichever is fewer) and span every output channel, so that each input
#: transform is built once: 14x14 layers split by channels had both workers build it (ResNet-50 A/B
#: 0.94-0.99x for two row pieces instead). Blocks whose input holds an infinity are computed directly
#: (the transforms would subtract it from itself); WINOGRAD_MIN_CHANNELS = 10**9 keeps every 3x3 layer direct
WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_WIDTH = 32, 14
WINOGRAD_MIN_BLOCKS = 28
#: ops whose tiles line up one to one with those of their same-shaped producer by default
ALIGNED = ELEMENTWISE | CONVERSIONS | {"batch_norm", "_native_batch_norm_legit_no_training", "batch_norm_act"}

#: one input of a layer as the graph reads it: producer layer index and the maps composed to reach it
Input = tuple[int, tuple[RegionMap, ...]]


@dataclass(eq=False)
class TileGraph:
    """Tiles in layer order (a layer's tiles are contiguous, numbered in C order over its grid), their
    parents and children as CSR arrays, and per layer its node, op, shape and grid.

    Dims are padded to ``MAX_DIMS``: a padded dim has size 1, region ``(0, 1)``, one piece. A layer's grid
    boundaries along dim ``d`` are ``grid_bounds[grid_indptr[l * MAX_DIMS + d] : ...[... + 1]]``.
    """

    tile_layer: np.ndarray  # int32 [T]
    tile_lo: np.ndarray  # int32 [T, MAX_DIMS]
    tile_hi: np.ndarray  # int32 [T, MAX_DIMS]
    parents_indptr: np.ndarray  # int32 [T + 1]
    parents_indices: np.ndarray  # int32 [E], ascending within a tile
    children_indptr: np.ndarray  # int32 [T + 1]
    children_indices: np.ndarray  # int32 [E], ascending within a tile
    layer_names: np.ndarray  # str [L], the fx node names
    layer_ops: np.ndarray  # str [L], op_name of each node
    layer_shapes: np.ndarray  # int64 [L, MAX_DIMS]
    layer_ndim: np.ndarray  # int32 [L]
    layer_tile_start: np.ndarray  # int32 [L + 1]
    grid_indptr: np.ndarray  # int32 [L * MAX_DIMS + 1]
    grid_bounds: np.ndarray  # int64

    @property
    def num_tiles(self) -> int:
        return len(self.tile_layer)

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def num_edges(self) -> int:
        return len(self.parents_indices)

    def parents(self, tile: int) -> np.ndarray:
        return self.parents_indices[self.parents_indptr[tile] : self.parents_indptr[tile + 1]]

    def children(self, tile: int) -> np.ndarray:
        return self.children_indices[self.children_indptr[tile] : self.children_indptr[tile + 1]]

    def grid(self, layer: int) -> list[np.ndarray]:
        """The layer's piece boundaries along each of its (unpadded) dims."""
        at = layer * MAX_DIMS
        ptr = self.grid_indptr
        return [self.grid_bounds[ptr[at + d] : ptr[at + d + 1]] for d in range(int(self.layer_ndim[layer]))]

    def largest_extent(self, layer: int, dim: int) -> int:
        """The most positions any tile of ``layer`` spans along ``dim`` (what a kernel's scratch must
        hold for one tile)."""
        lo, hi = int(self.layer_tile_start[layer]), int(self.layer_tile_start[layer + 1])
        return int((self.tile_hi[lo:hi, dim] - self.tile_lo[lo:hi, dim]).max(initial=0))

    def tile_counts(self) -> dict[str, int]:
        """Tiles per layer, by node name, in layer order."""
        counts = np.diff(self.layer_tile_start)
        return {str(n): int(c) for n, c in zip(self.layer_names, counts, strict=True)}

    def layer_edges(self) -> set[tuple[str, str]]:
        """(producer, consumer) node names of every layer pair some tile edge joins."""
        if not self.num_edges:
            return set()
        child = np.repeat(np.arange(self.num_tiles), np.diff(self.parents_indptr))
        pairs = np.unique(np.stack([self.tile_layer[self.parents_indices], self.tile_layer[child]]), axis=1)
        return {(str(self.layer_names[p]), str(self.layer_names[c])) for p, c in pairs.T}

    def depth(self) -> int:
        """Tiles on the longest parent chain: the fewest steps any runtime needs."""
        return int(self.tile_depths().max(initial=0))

    def tile_depths(self) -> np.ndarray:
        """Per tile, the tiles on the longest parent chain that ends at it (a root: 1)."""
        depth = np.zeros(self.num_tiles, dtype=np.int64)
        starts = self.layer_tile_start
        for layer in range(self.num_layers):
            lo, hi = int(starts[layer]), int(starts[layer + 1])
            e_lo, e_hi = self.parents_indptr[lo], self.parents_indptr[hi]
            local = np.repeat(np.arange(hi - lo), np.diff(self.parents_indptr[lo : hi + 1]))
            best = np.zeros(hi - lo, dtype=np.int64)
            np.maximum.at(best, local, depth[self.parents_indices[e_lo:e_hi]])
            depth[lo:hi] = best + 1
        return depth

    def summary(self) -> str:
        """Counts of layers, tiles and edges, the longest chain, and tiles per op."""
        counts = np.diff(self.layer_tile_start)
        per_op: dict[str, list[int]] = {}
        for op, c in zip(self.layer_ops, counts, strict=True):
            per_op.setdefault(str(op), []).append(int(c))
        most = int(np.diff(self.parents_indptr).max()) if self.num_tiles else 0
        lines = [
            f"tile graph: {self.num_layers} layers, {self.num_tiles} tiles, {self.num_edges} edges "
            f"(at most {most} parents), longest chain {self.depth()} tiles",
            *(f"  {op:<40} {len(c):>4} layers {sum(c):>7} tiles" for op, c in per_op.items()),
        ]
        return "\n".join(lines)

    def verify(self) -> None:
        """Raise PlanError unless the arrays are well formed, every tile's parents are in earlier layers
        (so the tile order is a topological order and the graph is acyclic), each tile's parent and child
        lists are ascending without repeats, children are exactly the transposed parents, and every
        layer's tiles are its grid in C order."""
        _check_arrays(self)
        _check_layers(self)
        _check_edges(self)

    def save(self, path: str | Path) -> None:
        """Write every array to ``path`` with ``np.savez`` (no pickle; the name is used as given)."""
        with open(path, "wb") as f:
            np.savez(f, **{fl.name: getattr(self, fl.name) for fl in fields(self)})

    @classmethod
    def load(cls, path: str | Path) -> TileGraph:
        with np.load(path, allow_pickle=False) as data:
            missing = [fl.name for fl in fields(cls) if fl.name not in data.files]
            if missing:
                raise InputError(f"{path} is not a saved TileGraph: it lacks {', '.join(missing)}")
            return cls(**{fl.name: data[fl.name] for fl in fields(cls)})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TileGraph):
            return NotImplemented
        return all(
            getattr(self, f.name).dtype == getattr(other, f.name).dtype
            and np.array_equal(getattr(self, f.name), getattr(other, f.name))
            for f in fields(self)
        )


# ---- build -----------------------------------------------------------------------------------------------


def build_tile_graph(
    gm: torch.fx.GraphModule,
    tiles_per_layer: TilesPerLayer = None,
    *,
    work_per_tile: float = WORK_PER_TILE,
    large_gemm_tiles: bool = True,
    scale: dict[str, float] | None = None,
    plans: dict[torch.fx.Node, NodeMaps] | None = None,
) -> TileGraph:
    """The tile graph of an ATen graph (``pathweave.capture(...).gm``).

    ``tiles_per_layer`` asks for a tile count per layer: one int for all, a dict by node name (the
    layers it leaves out take the default), or a function of the fx node. By default a layer gets about
    one tile per ``work_per_tile`` of work (FLOPs from analyze.cost + ``BYTE_WORK`` * activation bytes),
    and element-wise ops and batch norms take the count of their same-shaped producer so that their tiles
    line up one to one. ``make_grid`` turns a count into a grid (positions first, then channels); under
    the default policy convolution and matmul tiles stay large enough for an efficient matrix product
    and layer norm and softmax tiles span the dims they reduce (``_min_piece``; ``large_gemm_tiles=False``
    turns that off). ``scale`` multiplies the default count of the layers it names (the tuner's knob,
    ``execute.tile_tune``); the smallest pieces still hold. ``plans``: ``plan_nodes(gm)`` where the
    caller has it already.
    Raises UnsupportedError naming every node without a range map.
    """
    plans = plan_nodes(gm) if plans is None else plans
    layers = [n for n, p in plans.items() if p.role == "layer"]
    index = {n: i for i, n in enumerate(layers)}
    inputs = [_inputs(node, plans, index) for node in layers]
    counts = _tile_counts(layers, inputs, tiles_per_layer, work_per_tile, scale or {})
    # the default policy keeps matrix-product tiles large; counts asked for are taken as they are
    least = _min_piece if tiles_per_layer is None and large_gemm_tiles else (lambda n: None)
    grids = [make_grid(shape(n), c, least(n), _align(n)) for n, c in zip(layers, counts, strict=True)]
    starts = np.concatenate([[0], np.cumsum([g.count for g in grids])]).astype(np.int64)
    if starts[-1] >= 2**31:
        raise InputError(f"{int(starts[-1])} tiles do not fit the int32 tile graph; ask for fewer")
    sizes: list[int] = []
    flat: list[int] = []
    for grid, ins in zip(grids, inputs, strict=True):
        _parents(grid, ins, grids, starts, sizes, flat)
    parents_indptr = np.concatenate([[0], np.cumsum(sizes)])
    if parents_indptr[-1] >= 2**31:
        raise InputError(f"{int(parents_indptr[-1])} tile edges do not fit int32; ask for fewer tiles")
    return _assemble(layers, grids, starts, parents_indptr, np.asarray(flat, dtype=np.int32))


def _inputs(
    node: torch.fx.Node, plans: dict[torch.fx.Node, NodeMaps], index: dict[torch.fx.Node, int]
) -> list[Input]:
    """Each source of a layer followed through views to the layer that produces it; sources that end at
    graph inputs or constants are dropped (they are ready before any tile)."""
    out: list[Input] = []
    for src, region_map in plans[node].sources:
        maps = [region_map]
        while src in plans and plans[src].role == "view":
            src, view_map = plans[src].sources[0]
            maps.append(view_map)
        if src in index:
            out.append((index[src], tuple(maps)))
    return out


def _align(node: torch.fx.Node) -> tuple[int, ...] | None:
    """Convolution channel tiles start on whole panels of the packed weights (``CHANNEL_ALIGN``, or
    ``NARROW_ALIGN`` for the transposed kernel's layers, ``conv_layout``); the column pieces of matrix
    products on multiples of ``FEATURE_ALIGN`` (the row-broadcast kernel's weight panels)."""
    dims = shape(node)
    kind = op_kind(op_name(node))
    if kind == "conv" and len(dims) == 4:
        layout = conv_layout(node)
        if layout == "winograd":
            return (1, NARROW_ALIGN, 2, 1)
        return (1, NARROW_ALIGN if layout else CHANNEL_ALIGN, 1, 1)
    if kind == "matmul" and len(dims) >= 2:
        return (*[1] * (len(dims) - 1), FEATURE_ALIGN)
    return None


def conv_layout(node: torch.fx.Node) -> str | None:
    """How a convolution's tiles compute, where not by the row-vector kernels over an im2col (None):
    "winograd" (``WINOGRAD_MIN_CHANNELS``), or the transposed micro-kernel: "narrow" (maps of few
    positions whose 48-wide column passes end in one vector, ``NARROW_MAX_POSITIONS``: ResNet-50's 7x7
    layers ~160 -> ~200 GFLOP/s), "padded" (no im2col: stride 1 and a window over maps at least
    ``PADDED_MIN_WIDTH`` or ``PADDED_WIDTH_PER_PAD`` times the padding wide or without column padding,
    before "narrow"; or stride 2 over maps
    ``PADDED_MIN_WIDTH_STRIDED`` wide: alone, a 1x1 stride-2 layer read in place ran at 119 GFLOP/s
    against 140 after an im2col, but in ResNet-50 its im2col was redone whenever other layers' tiles
    ran in between, and reading in place won 2-5%). All for one group, no dilation and at least
    ``NARROW_MIN_K`` products per output (``PADDED_MIN_K_STRIDED`` for stride 2). None: the row-vector
    kernels."""
    dims = shape(node)
    if op_kind(op_name(node)) != "conv" or len(dims) != 4:
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
    if _winograd_fits(tuple(w.shape), stride, pads) and dims[3] >= WINOGRAD_MIN_WIDTH:
        return "winograd"
    if stride == [2, 2] and dims[3] >= PADDED_MIN_WIDTH_STRIDED:
        return "padded"
    if k < NARROW_MIN_K:
        return None
    pw = as_ints(args.get("padding") or 0, 2)[1]
    # no column padding (pw = 0): padded at any width, since no sum is discarded (Inception's 7x1 and,
    # ahead of "narrow" now, its 3x1 windows over 8x8 maps)
    if window and stride == [1, 1] and dims[3] >= min(PADDED_MIN_WIDTH, PADDED_WIDTH_PER_PAD * pw):
        return "padded"
    positions = dims[2] * dims[3]
    if positions <= NARROW_MAX_POSITIONS and 0 < positions % 48 <= 16:
        return "narrow"
    return None


def _winograd_fits(weight: tuple[int, ...], stride: list[int], pads: list[int]) -> bool:
    """A 3x3 window, stride 1, padding 0 or 1, at least ``WINOGRAD_MIN_CHANNELS`` in and out."""
    return (
        weight[2:] == (3, 3)
        and stride == [1, 1]
        and max(pads) <= 1
        and min(weight[:2]) >= WINOGRAD_MIN_CHANNELS
    )


def _min_piece(node: torch.fx.Node) -> tuple[int, ...] | None:
    """The smallest piece along each dim that keeps a tile's matrix product efficient: a convolution
    tile spans at least ``GEMM_MIN_COLUMNS`` positions and ``GEMM_MIN_ROWS`` channels (on 2 cores OpenBLAS
    ran ResNet-50's 7x7 layers at 19 GFLOP/s in tiles of one row, against ~90 for tiles of 128
    positions), a linear or matmul tile ``MATMUL_MIN_ROWS`` rows and ``MATMUL_MIN_FEATURES`` features."""
    dims = shape(node)
    kind = op_kind(op_name(node))
    whole = _reduced_dims(node)
    if whole:  # a tile of a layer norm or softmax computes its rows' statistics once: whole rows
        return tuple(n if d in whole else 1 for d, n in enumerate(dims))
    if kind == "conv" and len(dims) == 4 and conv_layout(node) == "winograd":
        rows = max(1, min(dims[2] // 2, 2 * math.ceil(WINOGRAD_MIN_BLOCKS / math.ceil(dims[3] / 2))))
        return (1, dims[1], rows, 1)
    if kind == "conv" and len(dims) == 4:
        return (1, GEMM_MIN_ROWS, math.ceil(GEMM_MIN_COLUMNS / max(dims[3], 1)), 1)
    if kind == "matmul" and len(dims) >= 2:
        return (*[1] * (len(dims) - 2), MATMUL_MIN_ROWS, MATMUL_MIN_FEATURES)
    return None


def _reduced_dims(node: torch.fx.Node) -> set[int]:
    """The dims a layer norm normalises over or a softmax reduces (their range maps read them whole)."""
    nd = len(shape(node))
    name = op_name(node)
    if name in ("layer_norm", "native_layer_norm"):
        return set(range(nd - len(bound_args(node)["normalized_shape"]), nd))
    if name in ("softmax", "_softmax", "log_softmax", "_log_softmax") and nd:
        return {int(bound_args(node)["dim"]) % nd}
    return set()


def _tile_counts(
    layers: list[torch.fx.Node],
    inputs: list[list[Input]],
    policy: TilesPerLayer,
    work_per_tile: float,
    scale: dict[str, float],
) -> list[int]:
    unscaled = sorted(set(scale) - {n.name for n in layers})
    if unscaled:
        raise InputError(f"scale names nodes that are not tiled layers: {', '.join(unscaled)}")
    if scale and policy is not None:
        raise InputError("scale multiplies the default tile counts; it cannot be used with tiles_per_layer")
    if isinstance(policy, dict):
        unknown = sorted(set(policy) - {n.name for n in layers})
        if unknown:
            raise InputError(f"tiles_per_layer names nodes that are not tiled layers: {', '.join(unknown)}")
    valid = policy is None or isinstance(policy, (int, dict)) or callable(policy)
    if isinstance(policy, bool) or not valid:
        raise InputError(f"tiles_per_layer must be an int, a dict or a function, not {policy!r}")
    counts: list[int] = []
    for i, node in enumerate(layers):
        if isinstance(policy, int):
            count = policy
        elif callable(policy):
            count = policy(node)
        elif isinstance(policy, dict) and node.name in policy:
            count = policy[node.name]
        else:
            count = _default_count(node, inputs[i], layers, counts, work_per_tile)
            count = max(1, round(count * scale.get(node.name, 1.0)))
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
            raise InputError(f"tile count {count!r} for {node.format_node()}: it must be an int >= 1")
        counts.append(int(count))
    return counts


def _default_count(
    node: torch.fx.Node, inputs: list[Input], layers: list[torch.fx.Node], counts: list[int], work: float
) -> int:
    if op_name(node) in ALIGNED:
        for producer, _ in inputs:
            if shape(layers[producer]) == shape(node):
                return counts[producer]
    # activations only: a weight is shared by all tiles, an embedding table is read a few rows at a time
    moved = [node, *(a for a in node.all_input_nodes if a.op != "get_attr")]
    nbytes = sum(s.nbytes for n in moved for s in tensor_specs(n))
    return max(1, math.ceil((node_cost(node).flops + BYTE_WORK * nbytes) / work))


def _parents(
    grid: Grid, inputs: list[Input], grids: list[Grid], starts: np.ndarray, sizes: list[int], flat: list[int]
) -> None:
    """Append each tile's parents (ascending) to ``flat`` and their number to ``sizes``."""
    bases = [int(starts[p]) for p, _ in inputs]
    for region in grid.regions():
        found: list[int] = []
        for (producer, maps), base in zip(inputs, bases, strict=True):
            r = region
            for m in maps:
                r = m(r)
                if r is None:
                    break
            else:
                found.extend(base + t for t in grids[producer].hits(r))
        if len(inputs) > 1:
            found = sorted(set(found))
        sizes.append(len(found))
        flat.extend(found)


def _assemble(
    layers: list[torch.fx.Node],
    grids: list[Grid],
    starts: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
) -> TileGraph:
    n_tiles = int(starts[-1])
    lo = np.zeros((n_tiles, MAX_DIMS), dtype=np.int32)
    hi = np.ones((n_tiles, MAX_DIMS), dtype=np.int32)
    shapes = np.ones((len(layers), MAX_DIMS), dtype=np.int64)
    bounds: list[int] = []
    grid_sizes: list[int] = []
    for i, (node, grid) in enumerate(zip(layers, grids, strict=True)):
        nd = len(grid.bounds)
        shapes[i, :nd] = shape(node)
        lo[starts[i] : starts[i + 1]], hi[starts[i] : starts[i + 1]] = _boxes(grid)
        padded = [*grid.bounds, *[(0, 1)] * (MAX_DIMS - nd)]
        bounds.extend(v for b in padded for v in b)
        grid_sizes.extend(len(b) for b in padded)
    parents_indptr = indptr.astype(np.int32)
    children_indptr, children_indices = _transpose(parents_indptr, indices, n_tiles)
    return TileGraph(
        tile_layer=np.repeat(np.arange(len(layers), dtype=np.int32), np.diff(starts)),
        tile_lo=lo, tile_hi=hi, parents_indptr=parents_indptr, parents_indices=indices,
        children_indptr=children_indptr, children_indices=children_indices,
        layer_names=np.array([n.name for n in layers], dtype=np.str_),
        layer_ops=np.array([op_name(n) for n in layers], dtype=np.str_),
        layer_shapes=shapes, layer_ndim=np.array([len(g.bounds) for g in grids], dtype=np.int32),
        layer_tile_start=starts.astype(np.int32),
        grid_indptr=np.concatenate([[0], np.cumsum(grid_sizes)]).astype(np.int32),
        grid_bounds=np.asarray(bounds, dtype=np.int64),
    )  # fmt: skip


# ---- verify ----------------------------------------------------------------------------------------------

_INT32 = ("tile_layer", "tile_lo", "tile_hi", "parents_indptr", "parents_indices", "children_indptr",
          "children_indices", "layer_ndim", "layer_tile_start", "grid_indptr")  # fmt: skip


def _fail(message: str) -> None:
    raise PlanError(f"tile graph: {message}")


def _check_arrays(g: TileGraph) -> None:
    t, n_layers = g.num_tiles, g.num_layers
    want = {
        "tile_layer": (t,), "tile_lo": (t, MAX_DIMS), "tile_hi": (t, MAX_DIMS), "parents_indptr": (t + 1,),
        "parents_indices": (g.num_edges,), "children_indptr": (t + 1,), "children_indices": (g.num_edges,),
        "layer_names": (n_layers,), "layer_ops": (n_layers,), "grid_bounds": (len(g.grid_bounds),),
        "layer_shapes": (n_layers, MAX_DIMS), "layer_ndim": (n_layers,), "layer_tile_start": (n_layers + 1,),
        "grid_indptr": (n_layers * MAX_DIMS + 1,),
    }  # fmt: skip
    for name, dims in want.items():
        if getattr(g, name).shape != dims:
            _fail(f"{name} has shape {getattr(g, name).shape}, expected {dims}")
    for name in _INT32:
        if getattr(g, name).dtype != np.int32:
            _fail(f"{name} is {getattr(g, name).dtype}, expected int32")
    for name in ("layer_shapes", "grid_bounds"):
        if getattr(g, name).dtype != np.int64:
            _fail(f"{name} is {getattr(g, name).dtype}, expected int64")
    for name in ("parents", "children"):
        ptr, idx = getattr(g, f"{name}_indptr"), getattr(g, f"{name}_indices")
        if ptr[0] != 0 or ptr[-1] != len(idx) or np.any(np.diff(ptr) < 0):
            _fail(f"{name}_indptr does not run from 0 to {len(idx)} without going down")
        if len(idx) and (idx.min() < 0 or idx.max() >= t):
            _fail(f"{name}_indices name tiles outside 0..{t - 1}")


def _check_layers(g: TileGraph) -> None:
    starts = g.layer_tile_start
    if starts[0] != 0 or starts[-1] != g.num_tiles or np.any(np.diff(starts) < 1):
        _fail("layer_tile_start must rise from 0 to the tile count, at least one tile per layer")
    if not np.array_equal(g.tile_layer, np.repeat(np.arange(g.num_layers), np.diff(starts))):
        _fail("tile_layer does not match layer_tile_start")
    for layer in range(g.num_layers):
        nd = int(g.layer_ndim[layer])
        dims = [int(n) for n in g.layer_shapes[layer][:nd]]
        if not 0 <= nd <= MAX_DIMS or np.any(g.layer_shapes[layer][nd:] != 1):
            _fail(f"layer {g.layer_names[layer]}: bad rank {nd} or padding of {g.layer_shapes[layer]}")
        bounds = g.grid(layer)
        for d, b in enumerate(bounds):
            if b[0] != 0 or b[-1] != dims[d] or (dims[d] and np.any(np.diff(b) <= 0)):
                _fail(f"layer {g.layer_names[layer]}: grid along dim {d} is {b.tolist()} for size {dims[d]}")
        lo, hi = starts[layer], starts[layer + 1]
        want = _boxes(Grid(tuple(tuple(int(v) for v in b) for b in bounds)))
        if not (np.array_equal(g.tile_lo[lo:hi], want[0]) and np.array_equal(g.tile_hi[lo:hi], want[1])):
            _fail(f"layer {g.layer_names[layer]}: tile regions are not its grid in C order")


def _check_edges(g: TileGraph) -> None:
    child = np.repeat(np.arange(g.num_tiles), np.diff(g.parents_indptr))
    if np.any(g.tile_layer[g.parents_indices] >= g.tile_layer[child]):
        bad = int(np.argmax(g.tile_layer[g.parents_indices] >= g.tile_layer[child]))
        _fail(f"tile {child[bad]} has parent {g.parents_indices[bad]} in the same or a later layer")
    for name in ("parents", "children"):
        ptr, idx = getattr(g, f"{name}_indptr"), getattr(g, f"{name}_indices")
        same_row = np.repeat(np.arange(g.num_tiles), np.diff(ptr))
        if np.any((np.diff(idx) <= 0) & (same_row[1:] == same_row[:-1])):
            _fail(f"some tile's {name} are not ascending or repeat")
    ptr, idx = _transpose(g.parents_indptr, g.parents_indices, g.num_tiles)
    if not (np.array_equal(ptr, g.children_indptr) and np.array_equal(idx, g.children_indices)):
        _fail("children are not the transpose of parents")


def _transpose(indptr: np.ndarray, indices: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of the reversed edges, rows ascending (a stable sort keeps each row's entries in order)."""
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(indptr))
    order = np.argsort(indices, kind="stable")
    counts = np.bincount(indices, minlength=n)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return ptr, rows[order]


def _boxes(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Every tile's lo and hi corners in tile order (C order over the pieces), padded to MAX_DIMS."""
    lo = np.zeros((grid.count, MAX_DIMS), dtype=np.int32)
    hi = np.ones((grid.count, MAX_DIMS), dtype=np.int32)
    pieces = np.indices(grid.splits).reshape(len(grid.splits), grid.count)
    for d, b in enumerate(grid.bounds):
        edges = np.asarray(b, dtype=np.int32)
        lo[:, d], hi[:, d] = edges[pieces[d]], edges[pieces[d] + 1]
    return lo, hi
