"""Interval arithmetic for tiles: which part of each input an output region of an op reads.

A region holds one entry per dimension. An entry is a half-open ``(lo, hi)`` range, or a ``Window``
where a strided or dilated op reads only some positions of its bounding range (a 1x1 convolution with
stride 2 reads every other row), so that a producer tile lying in the gaps is not taken for a dependency.

Every ``*_input`` map takes an output region and returns the region of one input, or None when that
input is not read at all. The op maps (conv, pool, cat, ...) are given tiles, whose entries are ranges;
the view maps (slice, permute, reshape, ...) accept any entries, since they are composed after an op map.
A map is exact, the positions read and no more along each dimension, unless its docstring says
"bounding box": then it may name positions that are not read, never miss one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

Range = tuple[int, int]


@dataclass(frozen=True)
class Window:
    """The positions ``{o*stride + j*dilation + offset : lo <= o < hi, 0 <= j < taps}`` inside
    ``[clip_lo, clip_hi)``: what a range of outputs of a windowed op reads along one dimension."""

    lo: int
    hi: int
    stride: int
    taps: int
    dilation: int
    offset: int
    clip_lo: int
    clip_hi: int

    def bounds(self) -> Range:
        """A range holding every position (its ends may fall in gaps of the window)."""
        first = self.lo * self.stride + self.offset
        last = (self.hi - 1) * self.stride + (self.taps - 1) * self.dilation + self.offset
        return max(first, self.clip_lo), min(last + 1, self.clip_hi)

    def hits(self, a: int, b: int) -> bool:
        """Whether ``[a, b)`` holds a position: min(outputs, taps) steps, never one per element."""
        a, b = max(a, self.clip_lo), min(b, self.clip_hi)
        if a >= b:
            return False
        outputs = (self.lo, self.hi - self.lo, self.stride)
        taps = (0, self.taps, self.dilation)
        # the set is symmetric in (outputs, stride) and (taps, dilation): loop over the shorter one
        (first, count, step), (run_first, run_count, run_step) = sorted((outputs, taps), key=lambda p: p[1])
        for i in range(first, first + count):
            base = self.offset + i * step
            r_lo = max(run_first, _ceil_div(a - base, run_step))
            r_hi = min(run_first + run_count, _ceil_div(b - base, run_step))
            if r_lo < r_hi:
                return True
        return False


Entry = Range | Window
Region = tuple[Entry, ...]


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _contiguous(count: int, stride: int, taps: int, dilation: int) -> bool:
    """Whether ``{o*stride + j*dilation : o < count, j < taps}`` has no gaps."""
    steps = [step for n, step in ((count, stride), (taps, dilation)) if n > 1]
    if len(steps) < 2:
        return not steps or steps[0] == 1
    if stride == 1:
        return dilation <= count
    return dilation == 1 and stride <= taps


def window(
    lo: int, hi: int, stride: int, taps: int, dilation: int, offset: int, clip_lo: int, clip_hi: int
) -> Entry | None:
    """The positions a ``Window`` with these fields describes, as a range when they have no gaps, as a
    ``Window`` when they do, None when there are none."""
    if hi <= lo or taps <= 0:
        return None
    w = Window(lo, hi, stride, taps, dilation, offset, clip_lo, clip_hi)
    box = w.bounds()
    if box[0] >= box[1]:
        return None
    if _contiguous(hi - lo, stride, taps, dilation):
        return box
    return w if w.hits(*box) else None


def bounds(entry: Entry) -> Range:
    return entry.bounds() if isinstance(entry, Window) else entry


def affine(entry: Entry, scale: int, shift: int) -> Entry:
    """The entry's positions mapped by ``x -> scale * x + shift`` (scale >= 1)."""
    if isinstance(entry, Window):
        w = entry
        return Window(
            w.lo, w.hi, w.stride * scale, w.taps, w.dilation * scale, w.offset * scale + shift,
            w.clip_lo * scale + shift, (w.clip_hi - 1) * scale + shift + 1,
        )  # fmt: skip
    lo, hi = entry
    if scale == 1:
        return lo + shift, hi + shift
    return Window(lo, hi, scale, 1, 1, shift, lo * scale + shift, (hi - 1) * scale + shift + 1)


def clip(entry: Entry, a: int, b: int) -> Entry | None:
    """The entry's positions inside ``[a, b)``, or None when there are none."""
    if isinstance(entry, Window):
        w = replace(entry, clip_lo=max(entry.clip_lo, a), clip_hi=min(entry.clip_hi, b))
        return w if w.hits(w.clip_lo, w.clip_hi) else None
    lo, hi = max(entry[0], a), min(entry[1], b)
    return (lo, hi) if lo < hi else None


def whole(shape: Sequence[int]) -> Region:
    return tuple((0, int(n)) for n in shape)


# ---- windowed ops: the region is a tile (ranges only) ---------------------------------------------------


def conv_input(
    region: Region,
    in_shape: Sequence[int],
    weight_shape: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> Region | None:
    """A convolution's input: the batch range, the input channels of the groups the output channels
    belong to, and the receptive field of each spatial range (padding reads nothing). Exact."""
    spatial = len(weight_shape) - 2
    c_dim = len(in_shape) - spatial - 1
    oc_lo, oc_hi = region[c_dim]
    out_per_group, in_per_group = weight_shape[0] // groups, weight_shape[1]
    g_lo, g_hi = oc_lo // out_per_group, (oc_hi - 1) // out_per_group + 1
    entries: list[Entry] = [*region[:c_dim], (g_lo * in_per_group, g_hi * in_per_group)]
    for i in range(spatial):
        lo, hi = region[c_dim + 1 + i]
        d = c_dim + 1 + i
        e = window(lo, hi, stride[i], weight_shape[2 + i], dilation[i], -padding[i], 0, in_shape[d])
        if e is None:  # the whole tile looks at padding: it reads no input, only the bias
            return None
        entries.append(e)
    return tuple(entries)


def pool_input(
    region: Region,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> Region | None:
    """Max or average pooling over the trailing ``len(kernel)`` dims; ceil_mode only changes the output
    size, its last windows are clipped to the input. Exact."""
    lead = len(in_shape) - len(kernel)
    entries: list[Entry] = list(region[:lead])
    for i, k in enumerate(kernel):
        lo, hi = region[lead + i]
        e = window(lo, hi, stride[i], k, dilation[i], -padding[i], 0, in_shape[lead + i])
        if e is None:
            return None
        entries.append(e)
    return tuple(entries)


def adaptive_pool_input(region: Region, in_shape: Sequence[int], out_shape: Sequence[int]) -> Region:
    """Adaptive pooling over the trailing dims where the sizes differ: output ``o`` of ``m`` reads
    ``[floor(o*n/m), ceil((o+1)*n/m))`` of ``n``; neighbouring windows touch, so ranges stay ranges. Exact."""
    entries: list[Entry] = []
    for (lo, hi), n, m in zip(region, in_shape, out_shape, strict=True):
        entries.append(((lo * n) // m, _ceil_div(hi * n, m)))
    return tuple(entries)


# ---- element-wise, normalisations, contractions ----------------------------------------------------------


def broadcast_input(region: Region, in_shape: Sequence[int]) -> Region:
    """An input broadcast to the output: trailing dims line up, a dim of size 1 reads ``(0, 1)``, leading
    output dims the input lacks are dropped. Exact."""
    tail = region[len(region) - len(in_shape) :]
    return tuple((0, 1) if n == 1 else e for e, n in zip(tail, in_shape, strict=True))


def reduce_input(region: Region, in_shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> Region:
    """Reductions and normalisations (softmax, layer_norm, sum over ``dims``): the reduced dims whole,
    the others as in the output. Exact."""
    nd = len(in_shape)
    reduced = {d % nd for d in dims} if nd else set()
    entries: list[Entry] = []
    out = iter(region)
    for d in range(nd):
        if d in reduced:
            entries.append((0, in_shape[d]))
            if keepdim:
                next(out)
        else:
            entries.append(next(out))
    return tuple(entries)


def matmul_inputs(region: Region, a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[Region, Region]:
    """``a @ b`` with torch.matmul's rules (1-D operands, broadcast batch dims): each operand's rows or
    columns of the output range, the contraction dim whole. Exact."""
    k = a_shape[-1]
    if len(a_shape) == 1 and len(b_shape) == 1:
        return ((0, k),), ((0, k),)
    if len(a_shape) == 1:  # out = batch(b) + [n]
        return ((0, k),), (*broadcast_input(region[:-1], b_shape[:-2]), (0, k), region[-1])
    if len(b_shape) == 1:  # out = batch(a) + [m]
        return (*broadcast_input(region[:-1], a_shape[:-2]), region[-1], (0, k)), ((0, k),)
    batch, m, n = region[:-2], region[-2], region[-1]
    a = (*broadcast_input(batch, a_shape[:-2]), m, (0, k))
    b = (*broadcast_input(batch, b_shape[:-2]), (0, k), n)
    return a, b


def linear_input(region: Region, in_shape: Sequence[int]) -> Region:
    """``x @ W.T``: the rows of the output range, the features whole. Exact."""
    return (*region[:-1], (0, in_shape[-1]))


def embedding_input(region: Region) -> Region:
    """The indices an embedding output reads (its last dim is the table's width). Exact."""
    return region[:-1]


# ---- joining and padding ---------------------------------------------------------------------------------


def cat_inputs(region: Region, sizes: Sequence[int], dim: int) -> list[Region | None]:
    """Each input of a concatenation along ``dim`` of inputs that long: the piece of it the output
    region overlaps, None for inputs it does not touch. Exact."""
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    return [cat_piece(region, dim, offset, n) for offset, n in zip(offsets, sizes, strict=True)]


def cat_piece(region: Region, dim: int, offset: int, size: int) -> Region | None:
    """The input of a concatenation that sits at ``[offset, offset + size)`` along ``dim``."""
    e = clip(region[dim], offset, offset + size) if size else None
    return None if e is None else (*region[:dim], affine(e, 1, -offset), *region[dim + 1 :])


def stack_inputs(region: Region, count: int, dim: int) -> list[Region | None]:
    """Each of ``count`` inputs stacked along a new ``dim``: the region without that dim, when the
    output region takes its slot. Exact."""
    return [stack_piece(region, dim, i) for i in range(count)]


def stack_piece(region: Region, dim: int, index: int) -> Region | None:
    if clip(region[dim], index, index + 1) is None:
        return None
    return (*region[:dim], *region[dim + 1 :])


def pad_input(region: Region, in_shape: Sequence[int], pad: Sequence[int]) -> Region | None:
    """Constant padding (``pad`` = before/after pairs from the last dim backwards; negative crops): the
    region shifted back, the padding reads nothing. Exact."""
    entries = list(region)
    nd = len(in_shape)
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        e = clip(affine(entries[d], 1, -pad[2 * i]), 0, in_shape[d])
        if e is None:
            return None
        entries[d] = e
    return tuple(entries)


# ---- views: any entries -----------------------------------------------------------------------------------


def slice_input(region: Region, dim: int, start: int, step: int) -> Region:
    """``x[start::step]`` along ``dim`` (start already clamped into the input). Exact."""
    return (*region[:dim], affine(region[dim], step, start), *region[dim + 1 :])


def select_input(region: Region, dim: int, index: int) -> Region:
    """``x.select(dim, index)``: the removed dim comes back as the one index. Exact."""
    return (*region[:dim], (index, index + 1), *region[dim:])


def permute_input(region: Region, perm: Sequence[int]) -> Region:
    """Output dim ``i`` is input dim ``perm[i]`` (transpose is a permutation of two dims). Exact."""
    entries: list[Entry] = [(0, 0)] * len(perm)
    for i, p in enumerate(perm):
        entries[p] = region[i]
    return tuple(entries)


def unsqueeze_input(region: Region, dim: int) -> Region:
    return (*region[:dim], *region[dim + 1 :])


def squeeze_input(region: Region, in_shape: Sequence[int], dims: Sequence[int]) -> Region:
    """The squeezed dims (of size 1 in the input) come back as ``(0, 1)``. Exact."""
    removed = {d % len(in_shape) for d in dims if in_shape[d] == 1} if in_shape else set()
    out = iter(region)
    return tuple((0, 1) if d in removed else next(out) for d in range(len(in_shape)))


def reshape_groups(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Runs of input dims paired with runs of output dims of the same size: what a view merges or splits.
    Sizes of 1 left over join the last run."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(in_shape) and j < len(out_shape):
        gi, gj, pi, pj = [i], [j], in_shape[i], out_shape[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(i)
                pi, i = pi * in_shape[i], i + 1
            else:
                gj.append(j)
                pj, j = pj * out_shape[j], j + 1
        groups.append((gi, gj))
    if not groups:
        return [(list(range(len(in_shape))), list(range(len(out_shape))))]
    groups[-1][0].extend(range(i, len(in_shape)))
    groups[-1][1].extend(range(j, len(out_shape)))
    return groups


def reshape_input(
    region: Region,
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    groups: list[tuple[list[int], list[int]]] | None = None,
) -> Region:
    """view / reshape / flatten / unflatten. Dims the view keeps pass through exactly; in a run it merges
    or splits, the output box becomes an interval of flat positions, then the smallest input box holding
    it: exact when the box spans whole trailing rows (flatten of trailing dims), a bounding box otherwise."""
    if 0 in in_shape or 0 in out_shape:
        return whole(in_shape)
    entries: list[Entry] = [(0, 0)] * len(in_shape)
    for gi, gj in groups if groups is not None else reshape_groups(in_shape, out_shape):
        if len(gi) == 1 and len(gj) == 1:
            entries[gi[0]] = region[gj[0]]
            continue
        f_lo, f_hi = _flat_interval([bounds(region[d]) for d in gj], [out_shape[d] for d in gj])
        for d, e in zip(gi, _box_of(f_lo, f_hi, [in_shape[d] for d in gi]), strict=True):
            entries[d] = e
    return tuple(entries)


def _flat_interval(box: Sequence[Range], shape: Sequence[int]) -> Range:
    """The flat positions from the box's first corner to its last one."""
    first = last = 0
    for (lo, hi), n in zip(box, shape, strict=True):
        first, last = first * n + lo, last * n + hi - 1
    return first, last + 1


def _box_of(lo: int, hi: int, shape: Sequence[int]) -> list[Range]:
    """The smallest box holding the flat positions ``[lo, hi)`` of a tensor of this shape."""
    if len(shape) <= 1:
        return [(lo, hi)] if shape else []
    inner = math.prod(shape[1:])
    first, last = lo // inner, (hi - 1) // inner
    if first == last:
        return [(first, first + 1), *_box_of(lo - first * inner, hi - first * inner, shape[1:])]
    return [(first, last + 1), *whole(shape[1:])]
