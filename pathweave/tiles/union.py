"""Co-execution's graph: the disjoint union of several requests' tile graphs, run as one graph by one
native runtime (ASPEN, Section 5), so that their tiles share one ready pool and fill each other's gaps.

Each part is one request slot: a model's tile graph with a program of its own (its own input and
activation buffers, the model's weights shared). The union concatenates the parts: tile indices, edge
indices and layer rows are offset by the parts before, so every tile and every layer row is unique. The
kernels key their per-worker im2col cache by the address of the layer row, which is therefore unique in
the union too. Concatenated topological orders are a topological order, and no edge joins two parts.
Depth columns stay those of each part's own graph, so the runtime's depth-first order favours the tiles
nearest their request's end in every part alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pathweave.errors import ExecutionError
from pathweave.tiles.abi import OP_LAYER
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.program import TileProgram
from pathweave.tiles.runtime import TileRuntime, scale_columns


@dataclass(frozen=True, eq=False)
class TilePart:
    """One request slot: a model's tile graph and one program instance over it."""

    graph: TileGraph
    program: TileProgram
    cols: np.ndarray  # int32 [tiles], the runtime's depth column of each tile


def make_part(graph: TileGraph, program: TileProgram) -> TilePart:
    return TilePart(graph, program, scale_columns(graph.tile_depths() - 1))


@dataclass(eq=False)
class TileUnion:
    """The parts' graphs and programs as one, in the arrays ``TileRuntime`` takes. ``tile_start[i]`` is
    the first tile of part ``i`` (a final entry holds the total), ``layer_start`` likewise for layers."""

    parts: tuple[TilePart, ...]
    tile_start: np.ndarray  # int64 [parts + 1]
    layer_start: np.ndarray  # int64 [parts + 1]
    graph: tuple[np.ndarray, ...]  # parents ptr/idx, children ptr/idx, ops, cols (TileRuntime.set_graph)
    layers: np.ndarray  # int64 [layers, SLOTS]: every part's kernel rows
    tile_layer: np.ndarray  # int32 [tiles]
    tile_lo: np.ndarray  # int32 [tiles, 4]
    tile_hi: np.ndarray  # int32 [tiles, 4]
    scratch_floats: int

    @property
    def num_tiles(self) -> int:
        return int(self.tile_start[-1])

    def locate(self, tile: int) -> tuple[int, str]:
        """The part a union tile belongs to and the name of its layer (for error messages)."""
        part = int(np.searchsorted(self.tile_start, tile, side="right")) - 1
        layer = int(self.tile_layer[tile] - self.layer_start[part])
        return part, str(self.parts[part].graph.layer_names[layer])

    def load(self, runtime: TileRuntime) -> None:
        """Make ``runtime`` run this union from its next inference on (between inferences only)."""
        runtime.set_graph(*self.graph)
        runtime.set_program(self.layers, self.tile_layer, self.tile_lo, self.tile_hi, self.scratch_floats)


def _concat_csr(
    ptrs: list[np.ndarray], idxs: list[np.ndarray], tile_start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of disjoint graphs as one: edge offsets added to the pointers, tile offsets to the
    indices."""
    edge_start = np.cumsum([0, *(len(i) for i in idxs)])
    ptr = np.concatenate([*(p[:-1] + e for p, e in zip(ptrs, edge_start, strict=False)), edge_start[-1:]])
    idx = np.concatenate([i.astype(np.int64) + t for i, t in zip(idxs, tile_start, strict=False)])
    return ptr.astype(np.int32), idx.astype(np.int32)


def union(parts: Sequence[TilePart]) -> TileUnion:
    """The disjoint union of ``parts`` (at least one), in their order."""
    if not parts:
        raise ExecutionError("a union of tile graphs needs at least one part")
    graphs = [p.graph for p in parts]
    tile_start = np.cumsum([0, *(g.num_tiles for g in graphs)]).astype(np.int64)
    layer_start = np.cumsum([0, *(g.num_layers for g in graphs)]).astype(np.int64)
    if tile_start[-1] >= np.iinfo(np.int32).max:
        raise ExecutionError(f"a union of {tile_start[-1]} tiles exceeds the runtime's int32 tile indices")
    p_ptr, p_idx = _concat_csr([g.parents_indptr for g in graphs], [g.parents_indices for g in graphs],
                               tile_start)  # fmt: skip
    c_ptr, c_idx = _concat_csr([g.children_indptr for g in graphs], [g.children_indices for g in graphs],
                               tile_start)  # fmt: skip
    ops = np.full(int(tile_start[-1]), OP_LAYER, dtype=np.int32)
    cols = np.concatenate([p.cols for p in parts]).astype(np.int32)
    tile_layer = np.concatenate([g.tile_layer + s for g, s in zip(graphs, layer_start, strict=False)])
    return TileUnion(
        parts=tuple(parts),
        tile_start=tile_start,
        layer_start=layer_start,
        graph=(p_ptr, p_idx, c_ptr, c_idx, ops, cols),
        layers=np.ascontiguousarray(np.concatenate([p.program.layers for p in parts]), dtype=np.int64),
        tile_layer=tile_layer.astype(np.int32),
        tile_lo=np.ascontiguousarray(np.concatenate([g.tile_lo for g in graphs]), dtype=np.int32),
        tile_hi=np.ascontiguousarray(np.concatenate([g.tile_hi for g in graphs]), dtype=np.int32),
        scratch_floats=max(p.program.scratch_floats for p in parts),
    )
