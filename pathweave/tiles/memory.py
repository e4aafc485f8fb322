"""Activation buffers from one arena, sized by liveness, made safe for a runtime without barriers.

Layers are placed in the arena in layer (topological) order, first fit. A layer's block is released once
the scan is ``distance`` layers past its last reader; a later layer may then take that memory. Without
barriers, "past its last reader" in layer order does not mean the readers have run: a tile of the later
layer could start while a tile that reads the old value is still waiting. So every tile that writes
memory an earlier layer held gets an edge from each tile that holds or reads the overlapping part of
that earlier value (write after read). Those edges go from earlier layers to later ones, so the graph
stays acyclic, and the runtime then orders each overwrite after the reads it would spoil.

Overlap is judged on each tile's span of the block (the first to the last float it writes: a bool
layer's one byte per value lies in a block of as many floats), which is conservative: a tile waits for
every reader of anything between its first and last float.
``distance`` trades memory for freedom: the farther apart the two layers, the more of those edges are
already implied by the graph.

Concatenations without copies: a layer whose output goes into a concatenation's slot (``concat_slots``:
along a dim with nothing but size-1 dims before it, so the slot is one contiguous run of the
concatenation's buffer; other layers may read it too) is placed at that slot, and the concatenation's
binder finds that input already where its copy would put it and copies it no more (Inception's and
GoogLeNet's branch outputs, NASNet's cells); graph inputs, views and a layer already in another slot are
copied as before. A layer in a slot has no padding after it: the kernels write nothing past a tensor's
last element (masked or scalar tails), which this relies on. The concatenation and the layers in its
slots are one block, taken when the first of them is placed and released when the last reader of any of
them is ``distance`` layers behind; they share memory by design, the only sharing ``verify`` allows
between live layers.

Outputs over residuals (``inplace``: proposals such as ``blocked.inplace_residuals``): a convolution whose
epilogue reads each residual element just before it writes the output element at the same place may
take its residual's block, where it is the residual's last reader (in layer order), neither is kept or in
a concatenation, and both have one shape and element size. Such a chain (ResNet's block outputs, each
written over the last) is one block. The overwrite is judged on boxes, not spans: each tile of the
convolution waits for every tile of an earlier layer of its chain whose box meets its own, and for
every reader of those (its own layer's tiles aside: they read only their own boxes, which do not meet).
On a Zen 3 (AVX2) ResNet-50's residual 1x1 layers wrote 3 MB at 56x56 next to the 3 MB residual they
read; over it they touch half the lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from pathweave.analysis.ops import op_name
from pathweave.errors import InputError, PlanError
from pathweave.tiles.graph import MAX_DIMS, TileGraph
from pathweave.tiles.maps import bound_args
from pathweave.tiles.rows import value

#: floats a block is aligned to (64 bytes; a layer inside a concatenation's block starts at its slot)
ALIGN = 16
#: default layers between a value's last reader and a layer that may reuse its memory
DISTANCE = 4


@dataclass(frozen=True)
class BufferPlan:
    offsets: np.ndarray  # int64 [L]: each layer's first float in the arena
    arena_floats: int
    separate_floats: int  # what one buffer per layer would take
    graph: TileGraph  # the tile graph with the write-after-read edges
    added_edges: int
    sizes: np.ndarray  # int64 [L]: floats each layer's block takes (aligned; a slot's layer: its own size)
    source: TileGraph  # the graph the plan was made for (without the added edges)
    keep: frozenset[int]  # the layers never released
    slots: dict[int, tuple[int, int]]  # a layer placed in a concatenation's slot: (that layer, float offset)
    itemsizes: np.ndarray  # int64 [L]: bytes per element of each layer's output (bool: 1, in a float block)
    inplace: dict[int, int] = field(default_factory=dict)  # a layer written over another's output: that one

    def verify(self, before: TileGraph | None = None, keep: set[int] | None = None) -> None:
        """Raise PlanError unless reuse is safe: two layers share memory only where the earlier one is
        not kept and all its readers come before the later one in layer order (or the earlier one lies
        in a slot of the later concatenation, at the offset ``slots`` gives), and every tile that writes
        over an earlier layer's tile (spans in floats of the block, by ``itemsizes``, overlapping)
        descends from that tile and from every tile that reads it in ``before`` (the graph without the
        added edges; by default the plan's own source and kept layers). Whether a slot's offset is the
        input's place in its concatenation is the binder's check (``bind_cnn._concatenate``)."""
        before = self.source if before is None else before
        keep = set(self.keep) if keep is None else keep
        n = before.num_layers
        for a, (cat, at) in self.slots.items():
            inside = (
                a < cat
                and self.offsets[a] == self.offsets[cat] + at
                and self.sizes[a] + at <= self.sizes[cat]
            )
            if not inside:
                names = before.layer_names
                raise PlanError(f"layer {names[a]} is not inside its slot of {names[cat]}")
        last_use = _last_use(before)
        ancestors = _ancestors(self.graph)
        for b, a in self.inplace.items():
            self._verify_inplace(before, keep, last_use, ancestors, b, a)
        for b in range(n):
            for a in range(b):
                if not (
                    self.offsets[a] < self.offsets[b] + self.sizes[b]
                    and self.offsets[b] < self.offsets[a] + self.sizes[a]
                ) or b in _enclosing(self.slots, a):
                    continue  # apart, or a written where the concatenation b wants it
                name_a, name_b = before.layer_names[a], before.layer_names[b]
                if a in _chain(self.inplace, b):
                    continue  # written over in place: checked on boxes above
                if a in keep or last_use[a] >= b:
                    raise PlanError(f"layers {name_a} and {name_b} share memory while {name_a} is still read")
                a_first, a_end = (v + self.offsets[a] for v in _spans(before, a, self.itemsizes[a]))
                b_first, b_end = (v + self.offsets[b] for v in _spans(before, b, self.itemsizes[b]))
                a0, b0 = int(before.layer_tile_start[a]), int(before.layer_tile_start[b])
                for j in range(len(b_first)):
                    for t in np.nonzero((a_first < b_end[j]) & (b_first[j] < a_end))[0] + a0:
                        needed = [int(t), *(int(c) for c in before.children(int(t)))]
                        missing = [m for m in needed if not ancestors[b0 + j] >> m & 1]
                        if missing:
                            raise PlanError(
                                f"tile {b0 + j} of {name_b} overwrites tile {t} of {name_a} without waiting "
                                f"for tiles {missing[:5]}"
                            )

    def _verify_inplace(
        self, before: TileGraph, keep: set[int], last_use: np.ndarray, ancestors: list[int], b: int, a: int
    ) -> None:
        """Raise PlanError unless layer ``b`` may lie over layer ``a`` (``inplace``): at its offset, of its
        shape and element size, its last reader, neither kept nor in a concatenation, and each tile of
        ``b`` descending from every tile of ``a``'s chain whose box meets its own and from their readers
        (tiles of ``b`` aside)."""
        names = before.layer_names
        fits = _may_overlay(before, a, b, keep, _in_slots(self.slots), last_use, self.itemsizes)
        if not fits or self.offsets[a] != self.offsets[b]:
            raise PlanError(f"layer {names[b]} cannot be written over layer {names[a]}")
        b0 = int(before.layer_tile_start[b])
        for j, needed in enumerate(_inplace_sources(before, self.inplace, b)):
            missing = sorted(m for m in needed if not ancestors[b0 + j] >> m & 1)
            if missing:
                raise PlanError(
                    f"tile {b0 + j} of {names[b]} overwrites {names[a]} in place without waiting for tiles "
                    f"{missing[:5]}"
                )


def _chain(inplace: dict[int, int], layer: int) -> list[int]:
    """The layers ``layer`` is written over in place, nearest first (each over the one before)."""
    chain = []
    while layer in inplace:
        layer = inplace[layer]
        chain.append(layer)
    return chain


def _may_overlay(
    graph: TileGraph,
    a: int,
    b: int,
    keep: set[int],
    in_slots: set[int],
    last_use: np.ndarray,
    widths: np.ndarray,
) -> bool:
    """Whether layer ``b`` may be written over layer ``a`` (the module docstring's conditions): ``a``
    earlier, read last by ``b``, not kept, neither in a concatenation, one shape and element size."""
    return (
        a < b
        and int(last_use[a]) == b
        and a not in keep
        and not {a, b} & in_slots
        and tuple(graph.layer_shapes[a]) == tuple(graph.layer_shapes[b])
        and widths[a] == widths[b]
    )


def _in_slots(slots: dict[int, tuple[int, int]]) -> set[int]:
    """The layers in a concatenation's slot and the concatenations."""
    return set(slots) | {cat for cat, _ in slots.values()}


def _inplace_sources(graph: TileGraph, inplace: dict[int, int], layer: int) -> list[set[int]]:
    """Per tile of ``layer`` (written over its chain in place): the tiles it must come after, each tile of
    a layer in its chain whose box meets its own and every reader of those but ``layer``'s tiles."""
    lo, hi = int(graph.layer_tile_start[layer]), int(graph.layer_tile_start[layer + 1])
    sources: list[set[int]] = [set() for _ in range(hi - lo)]
    for old in _chain(inplace, layer):
        o0, o1 = int(graph.layer_tile_start[old]), int(graph.layer_tile_start[old + 1])
        old_lo, old_hi = graph.tile_lo[o0:o1], graph.tile_hi[o0:o1]
        for j in range(hi - lo):
            meets = np.all((old_lo < graph.tile_hi[lo + j]) & (graph.tile_lo[lo + j] < old_hi), axis=1)
            for t in np.nonzero(meets)[0] + o0:
                sources[j].add(int(t))
                sources[j].update(int(c) for c in graph.children(int(t)) if not lo <= c < hi)
    return sources


def _spans(graph: TileGraph, layer: int, itemsize: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Per tile of ``layer``: the first float of its block it writes and one past its last (elements of
    ``itemsize`` bytes in C order from the block's start: a bool layer's element e is in float e // 4)."""
    lo, hi = int(graph.layer_tile_start[layer]), int(graph.layer_tile_start[layer + 1])
    shape = graph.layer_shapes[layer]
    strides = np.array([int(np.prod(shape[d + 1 :])) for d in range(MAX_DIMS)], dtype=np.int64)
    first = graph.tile_lo[lo:hi].astype(np.int64) @ strides
    last = (graph.tile_hi[lo:hi].astype(np.int64) - 1) @ strides
    size = int(itemsize)
    return first * size // 4, -(-(last + 1) * size // 4)


def concat_slots(gm: torch.fx.GraphModule, graph: TileGraph) -> dict[int, tuple[int, int]]:
    """Layers that can be written straight into a concatenation: per layer index, the concatenation's
    layer and the float offset of its slot there. A float32 ``cat`` qualifies where every dim before its
    dim has size 1 (batch 1 along channels: each slot is one contiguous run); an input qualifies where it
    is an earlier layer of the same float32 shape, taken once (the first slot of the first concatenation
    that reads it: the others copy it as before)."""
    index = {str(name): i for i, name in enumerate(graph.layer_names)}
    slots: dict[int, tuple[int, int]] = {}
    for node in gm.graph.nodes:
        cat = index.get(node.name)
        if cat is None or op_name(node) != "cat" or not _is_float32(node):
            continue
        args = bound_args(node)
        out = tuple(value(node).shape)
        dim = int(args.get("dim", 0)) % len(out)
        if any(d != 1 for d in out[:dim]):
            continue
        inner, at = math.prod(out[dim + 1 :]), 0
        for tensor in args["tensors"]:
            layer = index.get(tensor.name) if isinstance(tensor, torch.fx.Node) else None
            shape = tuple(value(tensor).shape) if isinstance(tensor, torch.fx.Node) else ()
            size = int(shape[dim]) if len(shape) == len(out) and math.prod(shape) else 0  # torch skips (0,)
            if (
                layer is not None
                and size
                and layer < cat
                and layer not in slots
                and _is_float32(tensor)
                and shape == (*out[:dim], size, *out[dim + 1 :])
            ):
                slots[layer] = (cat, at * inner)
            at += size
    return slots


def _is_float32(node: torch.fx.Node) -> bool:
    val = value(node)
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def _enclosing(slots: dict[int, tuple[int, int]], layer: int) -> list[int]:
    """The concatenations ``layer`` is written into, innermost first (one inside another's slot nests)."""
    chain = []
    while layer in slots:
        layer = slots[layer][0]
        chain.append(layer)
    return chain


def plan_buffers(
    graph: TileGraph,
    keep: set[int],
    distance: int = DISTANCE,
    slots: dict[int, tuple[int, int]] | None = None,
    itemsizes: np.ndarray | None = None,
    inplace: dict[int, int] | None = None,
) -> BufferPlan:
    """Place every layer's output in one arena. Layers in ``keep`` (read after the run: the graph's
    outputs) are never released; a layer in ``slots`` (``concat_slots``) lies in its concatenation's
    block; ``itemsizes``: bytes per element of each layer's output (default 4; a bool layer's 1 byte per
    value sits in a block of as many floats); ``inplace``: proposals (layer -> the layer whose output it
    may overwrite, as ``blocked.inplace_residuals`` makes), each taken where the module docstring's
    conditions hold. Returns the offsets and the graph with the edges that make reuse safe."""
    if distance < 1:
        raise InputError(f"distance must be >= 1, not {distance}")
    slots = dict(slots or {})
    n = graph.num_layers
    widths = np.full(n, 4, dtype=np.int64) if itemsizes is None else np.asarray(itemsizes, dtype=np.int64)
    if len(widths) != n or ((widths != 1) & (widths != 2) & (widths != 4)).any():
        raise InputError(f"itemsizes: {n} of 1, 2 or 4 bytes expected")
    sizes = [int(np.prod(graph.layer_shapes[i])) for i in range(n)]
    padded = [-(-s // ALIGN) * ALIGN for s in sizes]
    last_use = _last_use(graph)
    taken = _take_inplace(graph, inplace or {}, keep, slots, last_use, widths)
    root, rel = _roots(n, slots, taken)
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(root[i], []).append(i)
    block_last = {r: max(int(last_use[m]) for m in ms) for r, ms in members.items()}
    block_kept = {r for r, ms in members.items() if any(m in keep for m in ms)}
    held = [padded[i] if root[i] == i else sizes[i] for i in range(n)]  # what each layer covers
    free: list[tuple[int, int]] = []  # (offset, size), sorted by offset
    placed: list[tuple[int, int, int]] = []  # (layer, offset, size) of released blocks' layers
    live: list[int] = []  # roots
    base: dict[int, int] = {}  # each root's block, once taken
    offsets = np.zeros(n, dtype=np.int64)
    end = 0
    extra: dict[int, set[int]] = {}
    for i in range(n):
        for r in [r for r in live if r not in block_kept and block_last[r] + distance <= i]:
            live.remove(r)
            placed.extend((m, int(offsets[m]), held[m]) for m in members[r])
            free = _release(free, base[r], padded[r])
        r = root[i]
        if r not in base:
            off, free = _take(free, padded[r])
            if off is None:
                off, end = end, end + padded[r]
            base[r] = off
            live.append(r)
        off = offsets[i] = base[r] + rel[i]
        for a, a_off, a_size in placed:
            if a_off < off + held[i] and off < a_off + a_size:
                _war_edges(graph, (a, a_off, int(widths[a])), (i, off, int(widths[i])), extra)
    for i in taken:
        start = int(graph.layer_tile_start[i])
        for j, sources in enumerate(_inplace_sources(graph, taken, i)):
            extra.setdefault(start + j, set()).update(sources)
    kept = _prune(graph, extra) if extra else {}
    added = sum(len(v) for v in kept.values())
    edged = _with_parents(graph, kept) if added else graph
    covered = np.asarray(held, dtype=np.int64)
    separate = sum(padded)
    return BufferPlan(
        offsets, end, separate, edged, added, covered, graph, frozenset(keep), slots, widths, taken
    )


def _roots(n: int, slots: dict[int, tuple[int, int]], taken: dict[int, int]) -> tuple[list[int], list[int]]:
    """A block per root (a layer in no slot, written over nothing): itself and every layer written into
    it or over it; per layer, its root and its offset in the root's block."""
    root, rel = list(range(n)), [0] * n
    for i in slots:
        for cat in _enclosing(slots, i):
            rel[i] += slots[root[i]][1]
            root[i] = cat
    for i, a in sorted(taken.items()):  # a < i: a's root is final
        root[i], rel[i] = root[a], rel[a]
    return root, rel


def _take_inplace(
    graph: TileGraph,
    proposed: dict[int, int],
    keep: set[int],
    slots: dict[int, tuple[int, int]],
    last_use: np.ndarray,
    widths: np.ndarray,
) -> dict[int, int]:
    """The proposals that hold (``_may_overlay``); a layer named out of range raises."""
    n = graph.num_layers
    inside = _in_slots(slots)
    taken: dict[int, int] = {}
    for i, a in sorted(proposed.items()):
        if not (0 <= a < n and 0 <= i < n):
            raise InputError(f"in-place proposal {i} -> {a}: layers are 0..{n - 1}")
        if _may_overlay(graph, a, i, keep, inside, last_use, widths):
            taken[i] = a
    return taken


def _last_use(graph: TileGraph) -> np.ndarray:
    """Per layer, the last layer that reads it (itself when none does)."""
    last_use = np.arange(graph.num_layers)
    if graph.num_edges:
        child = np.repeat(np.arange(graph.num_tiles), np.diff(graph.parents_indptr))
        np.maximum.at(last_use, graph.tile_layer[graph.parents_indices], graph.tile_layer[child])
    return last_use


def _ancestors(graph: TileGraph) -> list[int]:
    """Per tile, its ancestors as bits of an int (tiles are in a topological order)."""
    reach = [0] * graph.num_tiles
    for t in range(graph.num_tiles):
        bits = 0
        for p in graph.parents(t).tolist():
            bits |= reach[p] | (1 << p)
        reach[t] = bits
    return reach


def _take(free: list[tuple[int, int]], size: int) -> tuple[int | None, list[tuple[int, int]]]:
    for k, (off, have) in enumerate(free):
        if have >= size:
            rest = [(off + size, have - size)] if have > size else []
            return off, free[:k] + rest + free[k + 1 :]
    return None, free


def _release(free: list[tuple[int, int]], off: int, size: int) -> list[tuple[int, int]]:
    """Add a block to the free list, merged with its neighbours."""
    blocks = sorted([*free, (off, size)])
    merged: list[tuple[int, int]] = []
    for o, s in blocks:
        if merged and merged[-1][0] + merged[-1][1] == o:
            merged[-1] = (merged[-1][0], merged[-1][1] + s)
        else:
            merged.append((o, s))
    return merged


def _war_edges(
    graph: TileGraph, old_at: tuple[int, int, int], new_at: tuple[int, int, int], extra: dict[int, set[int]]
) -> None:
    """Edges into the tiles of layer ``new`` from the tiles of layer ``old`` whose span overlaps theirs in
    the arena, and from every tile that reads those (each given as layer, float offset, bytes per element).
    ``new`` comes after ``old``'s last reader in layer order, so no tile of ``new`` is among its own
    sources."""
    (old, old_off, old_size), (new, new_off, new_size) = old_at, new_at
    a_first, a_end = _spans(graph, old, old_size)
    b_first, b_end = _spans(graph, new, new_size)
    a_first, a_end, b_first, b_end = a_first + old_off, a_end + old_off, b_first + new_off, b_end + new_off
    a0, b0 = int(graph.layer_tile_start[old]), int(graph.layer_tile_start[new])
    for j in range(len(b_first)):
        hit = np.nonzero((a_first < b_end[j]) & (b_first[j] < a_end))[0]
        if not len(hit):
            continue
        sources = extra.setdefault(b0 + j, set())
        for t in hit + a0:
            sources.add(int(t))
            sources.update(int(c) for c in graph.children(int(t)))


def _prune(graph: TileGraph, extra: dict[int, set[int]]) -> dict[int, list[int]]:
    """Of each tile's new parents, those it does not already descend from (through the graph and the new
    parents kept so far): latest first, since a late source often implies the earlier ones."""
    reach = [0] * graph.num_tiles
    kept: dict[int, list[int]] = {}
    for t in range(graph.num_tiles):
        bits = 0
        for p in graph.parents(t).tolist():
            bits |= reach[p] | (1 << p)
        for s in sorted(extra.get(t, ()), reverse=True):
            if not bits >> s & 1:
                kept.setdefault(t, []).append(s)
                bits |= reach[s] | (1 << s)
        reach[t] = bits
    return kept


def _with_parents(graph: TileGraph, extra: dict[int, list[int]]) -> TileGraph:
    """``graph`` with ``extra[tile]`` added to each tile's parents (CSR rebuilt, children transposed)."""
    lists = [set(graph.parents(t).tolist()) | set(extra.get(t, ())) for t in range(graph.num_tiles)]
    indptr = np.zeros(graph.num_tiles + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(p) for p in lists])
    indices = np.fromiter((p for ps in lists for p in sorted(ps)), dtype=np.int32, count=int(indptr[-1]))
    order = np.argsort(indices, kind="stable")
    child_of = np.repeat(np.arange(graph.num_tiles, dtype=np.int32), np.diff(indptr))
    children_indptr = np.zeros(graph.num_tiles + 1, dtype=np.int64)
    children_indptr[1:] = np.cumsum(np.bincount(indices, minlength=graph.num_tiles))
    return replace(
        graph,
        parents_indptr=indptr.astype(np.int32),
        parents_indices=indices,
        children_indptr=children_indptr.astype(np.int32),
        children_indices=child_of[order],
    )
