"""An ATen graph cut into ASPEN's tile graph (Park et al., NeurIPS 2023): every layer's output is cut
into tiles, and each tile depends on the tiles of other layers it reads, so a runtime can start a tile
as soon as its parents are done, with no barrier between operators. Dependencies are exact where the
range maps are (most ops), a superset where ``ranges`` says "bounding box".

Layers are the compute nodes of an ATen graph (``nodes.plan_nodes``). Views (view, flatten, transpose,
getitem, clone, split, slice, ...) get no tiles: their range maps are composed into their consumers'
maps, so a consumer tile depends directly on the producer tiles under the view. Graph inputs and weights
are ready before any tile runs and are not part of the graph.

A tile's parents come from interval arithmetic: its region goes through the consumer's range map (and
the views' maps) to a region of the producer, then per dim a bisection on the producer's tile grid
(``Grid.hits``); no tensor element is ever enumerated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

import numpy as np
import torch.fx

from pathweave.analysis.cost import node_cost
from pathweave.analysis.ops import op_name
from pathweave.errors import InputError
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles import fuse_depthwise
from pathweave.tiles.conv_layout import (
    NARROW_ALIGN,
    WINOGRAD_MIN_BLOCKS,
    WINOGRAD_MIN_CHANNELS,
    conv_layout,
    is_depthwise,
)
from pathweave.tiles.graph import MAX_DIMS, TileGraph, tile_boxes, transpose_csr
from pathweave.tiles.grid import Grid, make_grid
from pathweave.tiles.maps import GROUP_NORMS, NodeMaps, RegionMap, bound_args, group_count, shape
from pathweave.tiles.nodes import plan_nodes
from pathweave.tiles.ops import TILE_OPS

TilesPerLayer = Callable[[torch.fx.Node], int] | dict[str, int] | int | None
#: default work per tile: FLOPs plus BYTE_WORK per byte of activations read and written
WORK_PER_TILE = 4e6
BYTE_WORK = 4
#: the smallest matrix-product tile (``_min_piece``)
GEMM_MIN_COLUMNS, GEMM_MIN_ROWS = 128, 64
#: the fewest positions of a 1x1 convolution's tile (at 128, MobileNetV2's 14x14 projections were one tile)
POINTWISE_MIN_COLUMNS = 64
#: a layer norm, softmax or view copy of at least this many elements takes at least 2 tiles, so that both
#: workers share it: their work per byte is above what ``BYTE_WORK`` counts (MobileViT-XS's transformer
#: layers ran one tile each, 0.1-0.4 ms with the other worker idle; 2 or 4 tiles each: the model 0.94x,
#: paired, 2 workers, AVX2 Zen 3)
SHARED_MIN_ELEMENTS = 32768
#: convolution channel tiles start on multiples of this (the micro-kernels' panel rows, tile_gemm.h)
CHANNEL_ALIGN = 8
#: linear / matmul column pieces start on multiples of this (panels of native/tile_gemm_t.c's
#: pw_gemm_rows: GPT-2's LM head, 50257 columns, was cut into pieces of no whole panels)
FEATURE_ALIGN = 16
#: the smallest linear / matmul tile: rows by output features (BERT's 128 x 768 x 768 on one core:
#: ~120 GFLOP/s in tiles of 64 x 64, ~175 in tiles of 128 x 128)
MATMUL_MIN_ROWS, MATMUL_MIN_FEATURES = 128, 128
#: depthwise convolution tiles (native/tile_depthwise.c) split channels only, in pieces of at least this
#: many, and a layer takes at least DEPTHWISE_MIN_TILES of them (where it has the channels), so that the
#: workers share it: its work per byte is low and its ~10-40 us per layer ran on one worker otherwise
DEPTHWISE_MIN_CHANNELS, DEPTHWISE_MIN_TILES = 8, 2
#: max pools take this share of the default count: their tiles split rows only, so each reads every
#: channel plane in a strip of a few rows, a short stream per plane that the prefetchers do not catch
#: (Inception-v3's four pools at 0.5x the tiles 0.62-0.92x the time, at 4x 1.7-3x, 1 worker, paired; at 2
#: workers Inception-v3 0.995x, GoogLeNet 0.984x, ResNet-50 1.002x the time; AVX2 Zen 3)
MAX_POOL_TILE_SHARE = 0.5

#: one input of a layer as the graph reads it: producer layer index and the maps composed to reach it
Input = tuple[int, tuple[RegionMap, ...]]


def build_tile_graph(
    gm: torch.fx.GraphModule,
    tiles_per_layer: TilesPerLayer = None,
    *,
    work_per_tile: float = WORK_PER_TILE,
    large_gemm_tiles: bool = True,
    scale: dict[str, float] | None = None,
    plans: dict[torch.fx.Node, NodeMaps] | None = None,
    winograd_min_channels: int = WINOGRAD_MIN_CHANNELS,
    row_split: Collection[str] = (),
) -> TileGraph:
    """The tile graph of an ATen graph (``pathweave.capture(...).gm``).

    ``tiles_per_layer`` asks for a tile count per layer: one int for all, a dict by node name (the
    layers it leaves out take the default), or a function of the fx node. By default a layer gets about
    one tile per ``work_per_tile`` of work (FLOPs from analysis.cost + ``BYTE_WORK`` * activation bytes),
    and the ops the table marks ``aligned`` (element-wise ops, batch norms) take the count of their
    same-shaped producer so that their tiles line up one to one. ``make_grid`` turns a count into a grid
    (positions first, then channels); under the default policy convolution and matmul tiles stay large
    enough for an efficient matrix product and layer norm and softmax tiles span the dims they reduce
    (``_min_piece``; ``large_gemm_tiles=False`` turns that off). ``scale`` multiplies the default count of
    the layers it names (the tuner's knob, ``tiles.tune``); the smallest pieces still hold. ``plans``:
    ``plan_nodes(gm)`` where the caller has it already. ``winograd_min_channels``: the fewest input and
    output channels of a 3x3 convolution that runs Winograd (``conv_layout``), whose row pieces start on
    even rows; the program built over the graph must be given the same. ``row_split``: depthwise layers
    whose tiles split rows, every channel in each, instead of channels (those whose kernel reads the halo
    rows where they lie, ``blocked.row_split_depthwise``): their tiles then wait for their input's rows,
    not for all of it, so a chain of 1x1 -> depthwise -> 1x1 layers runs as a wavefront of row strips.
    Raises UnsupportedError naming every node without a range map.
    """
    plans = plan_nodes(gm) if plans is None else plans
    layers = [n for n, p in plans.items() if p.role == "layer"]
    index = {n: i for i, n in enumerate(layers)}
    inputs = [_inputs(node, plans, index) for node in layers]
    counts = _tile_counts(layers, inputs, tiles_per_layer, work_per_tile, scale or {})
    # the default policy keeps matrix-product tiles large; counts asked for are taken as they are
    large = tiles_per_layer is None and large_gemm_tiles
    grids = []
    for node, count in zip(layers, counts, strict=True):
        least = _min_piece(node, winograd_min_channels, node.name in row_split) if large else _fixed(node)
        grids.append(make_grid(shape(node), count, least, _align(node, winograd_min_channels)))
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


def _fixed(node: torch.fx.Node) -> tuple[int, ...] | None:
    """The smallest piece of a layer whatever the tile count asked for: a fused depthwise + 1x1 layer's
    tiles span every channel; a convolution scaled by a gate (``fuse_scale``) splits its channels on
    blocks of ``CHANNEL_ALIGN`` only (the blocked kernel's, the only one that takes it)."""
    if op_name(node) == "dw_pw_conv":
        return (1, shape(node)[1], 1, 1)
    if op_name(node) == "conv2d_act" and bound_args(node).get("scale") is not None:
        return (1, CHANNEL_ALIGN, 1, 1)
    return None


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


def _align(node: torch.fx.Node, winograd_min_channels: int) -> tuple[int, ...] | None:
    """Convolution channel tiles start on whole panels of the packed weights (``CHANNEL_ALIGN``, or
    ``NARROW_ALIGN`` for the transposed kernel's layers, ``conv_layout``); the column pieces of matrix
    products on multiples of ``FEATURE_ALIGN`` (the row-broadcast kernel's weight panels); a group norm's
    channel pieces on whole groups."""
    dims = shape(node)
    kind = TILE_OPS[op_name(node)].kind
    if op_name(node) == "dw_pw_conv":  # every channel in each tile
        return None
    if kind == "conv" and len(dims) == 4 and is_depthwise(node):
        return (1, CHANNEL_ALIGN, 1, 1)
    if kind == "conv" and len(dims) == 4:
        layout = conv_layout(node, winograd_min_channels)
        if layout == "winograd":
            return (1, NARROW_ALIGN, 2, 1)
        return (1, NARROW_ALIGN if layout else CHANNEL_ALIGN, 1, 1)
    if kind == "matmul" and len(dims) >= 2:
        return (*[1] * (len(dims) - 1), FEATURE_ALIGN)
    if op_name(node) in GROUP_NORMS and len(dims) >= 2:  # whole groups: each group's statistics once
        return (1, dims[1] // group_count(bound_args(node)), *[1] * (len(dims) - 2))
    return None


def _min_piece(
    node: torch.fx.Node, winograd_min_channels: int, by_rows: bool = False
) -> tuple[int, ...] | None:
    """The smallest piece along each dim that keeps a tile's matrix product efficient: a convolution
    tile spans at least ``GEMM_MIN_COLUMNS`` positions (a 1x1 one ``POINTWISE_MIN_COLUMNS``) and
    ``GEMM_MIN_ROWS`` channels (on 2 cores OpenBLAS ran ResNet-50's 7x7 layers at 19 GFLOP/s in tiles of
    one row, against ~90 for tiles of 128 positions), a linear or matmul tile ``MATMUL_MIN_ROWS`` rows
    and ``MATMUL_MIN_FEATURES`` features; the table's ``whole`` dims (layer norm, softmax) span the layer.
    A depthwise layer's tiles split channels only, or rows only where ``by_rows`` (``row_split``)."""
    dims = shape(node)
    op = TILE_OPS[op_name(node)]
    whole = op.whole(node) if op.whole else set()
    if whole:  # a tile of a layer norm or softmax computes its rows' statistics once: whole rows
        return tuple(n if d in whole else 1 for d, n in enumerate(dims))
    if op_name(node) == "dw_pw_conv":  # rows only: each tile computes the depthwise rows it reads once
        return (1, dims[1], math.ceil(GEMM_MIN_COLUMNS / max(dims[3], 1)), 1)
    if op.kind == "conv" and len(dims) == 4 and is_depthwise(node):  # channels only: no halo copied twice
        return (1, dims[1], 1, 1) if by_rows else (1, DEPTHWISE_MIN_CHANNELS, dims[2], 1)
    if op.kind == "conv" and len(dims) == 4 and conv_layout(node, winograd_min_channels) == "winograd":
        rows = max(1, min(dims[2] // 2, 2 * math.ceil(WINOGRAD_MIN_BLOCKS / math.ceil(dims[3] / 2))))
        return (1, dims[1], rows, 1)
    if op.kind == "conv" and len(dims) == 4:
        weight = bound_args(node).get("weight")
        specs = tensor_specs(weight) if isinstance(weight, torch.fx.Node) else []
        pointwise = bool(specs) and tuple(specs[0].shape[2:]) == (1, 1)
        columns = POINTWISE_MIN_COLUMNS if pointwise else GEMM_MIN_COLUMNS
        return (1, GEMM_MIN_ROWS, math.ceil(columns / max(dims[3], 1)), 1)
    if op.kind == "matmul" and len(dims) >= 2:
        return (*[1] * (len(dims) - 2), MATMUL_MIN_ROWS, MATMUL_MIN_FEATURES)
    return None


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
    op = TILE_OPS[op_name(node)]
    if op.aligned:
        for producer, _ in inputs:
            if shape(layers[producer]) == shape(node):
                return counts[producer]
    # activations only: a weight is shared by all tiles, an embedding table is read a few rows at a time;
    # but the tiles of a matrix product of fewer rows than a tile takes split its weight (a classifier's)
    dims = shape(node)
    gemv = op.kind == "matmul" and len(dims) >= 2 and math.prod(dims[:-1]) < MATMUL_MIN_ROWS
    moved = [node, *(a for a in node.all_input_nodes if gemv or a.op != "get_attr")]
    nbytes = sum(s.nbytes for n in moved for s in tensor_specs(n))
    fused = op_name(node) == "dw_pw_conv"
    flops = fuse_depthwise.flops(node) if fused else node_cost(node, kind=op.kind).flops
    count = max(1, math.ceil((flops + BYTE_WORK * nbytes) / work))
    if fused:
        return max(count, fuse_depthwise.MIN_TILES)
    if op_name(node) == "max_pool2d":
        return math.ceil(count * MAX_POOL_TILE_SHARE)
    if (op.whole or op.view) and math.prod(dims) >= SHARED_MIN_ELEMENTS:
        return max(count, 2)
    return max(count, DEPTHWISE_MIN_TILES) if is_depthwise(node) else count


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
        lo[starts[i] : starts[i + 1]], hi[starts[i] : starts[i + 1]] = tile_boxes(grid)
        padded = [*grid.bounds, *[(0, 1)] * (MAX_DIMS - nd)]
        bounds.extend(v for b in padded for v in b)
        grid_sizes.extend(len(b) for b in padded)
    parents_indptr = indptr.astype(np.int32)
    children_indptr, children_indices = transpose_csr(parents_indptr, indices, n_tiles)
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
