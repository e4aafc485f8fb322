"""The tile graph (ASPEN, Park et al., NeurIPS 2023) as arrays: every layer's output cut into tiles, each
tile's parents (the tiles of other layers it reads) and children, per layer its grid; ``verify`` checks
that the arrays are well formed and acyclic. ``tiles.build`` makes one from an ATen graph.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from pathweave.errors import InputError, PlanError
from pathweave.tiles.grid import Grid

#: tiled tensors have at most this many dims (tile regions are stored padded to it)
MAX_DIMS = 4


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


# ---- checks ----------------------------------------------------------------------------------------------

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
        want = tile_boxes(Grid(tuple(tuple(int(v) for v in b) for b in bounds)))
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
    ptr, idx = transpose_csr(g.parents_indptr, g.parents_indices, g.num_tiles)
    if not (np.array_equal(ptr, g.children_indptr) and np.array_equal(idx, g.children_indices)):
        _fail("children are not the transpose of parents")


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of the reversed edges, rows ascending (a stable sort keeps each row's entries in order)."""
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(indptr))
    order = np.argsort(indices, kind="stable")
    counts = np.bincount(indices, minlength=n)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return ptr, rows[order]


def tile_boxes(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Every tile's lo and hi corners in tile order (C order over the pieces), padded to MAX_DIMS."""
    lo = np.zeros((grid.count, MAX_DIMS), dtype=np.int32)
    hi = np.ones((grid.count, MAX_DIMS), dtype=np.int32)
    pieces = np.indices(grid.splits).reshape(len(grid.splits), grid.count)
    for d, b in enumerate(grid.bounds):
        edges = np.asarray(b, dtype=np.int32)
        lo[:, d], hi[:, d] = edges[pieces[d]], edges[pieces[d] + 1]
    return lo, hi
