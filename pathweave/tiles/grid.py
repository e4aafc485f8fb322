"""How a layer's output is cut into tiles, and which tiles of such a grid a region touches.

As in ASPEN, tiles split the positions first and the channels second: batch, then rows of an NCHW
tensor (or tokens of a ``[batch, tokens, features]`` one), then channels (or features). The pieces
along one dim are as even as integer division makes them.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from pathweave.tiles.ranges import Region, Window

#: the dims tiles split, in the order they are split, by rank
SPLIT_ORDER: dict[int, tuple[int, ...]] = {0: (), 1: (0,), 2: (0, 1), 3: (0, 1, 2), 4: (0, 2, 1)}


@dataclass(frozen=True)
class Grid:
    """A layer's tiles: along each dim the boundaries of its pieces (``0 = b[0] < ... < b[-1] = size``).
    Tiles are numbered in C order over the pieces, so a tile's number is ``sum(piece[d] * strides[d])``."""

    bounds: tuple[tuple[int, ...], ...]

    @cached_property
    def strides(self) -> tuple[int, ...]:
        splits = self.splits
        return tuple(math.prod(splits[d + 1 :]) for d in range(len(splits)))

    @property
    def splits(self) -> tuple[int, ...]:
        return tuple(len(b) - 1 for b in self.bounds)

    @property
    def count(self) -> int:
        return math.prod(self.splits)

    def regions(self) -> list[Region]:
        """Every tile's region, by tile number."""
        pieces = [[(b[i], b[i + 1]) for i in range(len(b) - 1)] for b in self.bounds]
        return list(itertools.product(*pieces))

    def hits(self, region: Region) -> list[int]:
        """The tiles (ascending) holding some position of the region: per dim, a bisection on the
        boundaries, then a ``Window`` drops the pieces that fall in its gaps."""
        tiles = [0]
        for b, entry, stride in zip(self.bounds, region, self.strides, strict=True):
            if len(b) == 2:
                continue  # one piece along this dim; the region is not empty
            if isinstance(entry, Window):
                lo, hi = entry.bounds()
                found = range(bisect_right(b, lo) - 1, bisect_left(b, hi))
                pieces = [i for i in found if entry.hits(b[i], b[i + 1])]
            else:
                pieces = range(bisect_right(b, entry[0]) - 1, bisect_left(b, entry[1]))
            tiles = [t + p * stride for t in tiles for p in pieces]
        return tiles


def max_tiles(shape: Sequence[int]) -> int:
    """The most tiles a tensor of this shape can be cut into (one position of each split dim)."""
    return math.prod(shape[d] for d in SPLIT_ORDER[len(shape)]) if shape else 1


def make_grid(
    shape: Sequence[int],
    tiles: int,
    min_piece: Sequence[int] | None = None,
    align: Sequence[int] | None = None,
) -> Grid:
    """About ``tiles`` tiles (at least 1, at most ``max_tiles``): each dim of ``SPLIT_ORDER`` in turn
    takes as many pieces as are left to make, up to its size (over ``min_piece[d]``, the smallest piece
    along it); the count left is then divided by it. Inner boundaries along dim d fall on multiples of
    ``align[d]`` where that leaves every piece non-empty (the convolution kernels compute output
    channels in panels of 8)."""
    splits = [1] * len(shape)
    left = max(1, tiles)
    for d in SPLIT_ORDER[len(shape)]:
        most = shape[d] // min_piece[d] if min_piece else shape[d]
        splits[d] = max(1, min(most, left))
        left = max(1, round(left / splits[d]))
    bounds = []
    for d, (n, k) in enumerate(zip(shape, splits, strict=True)):
        even = [i * n // k for i in range(k + 1)]
        step = align[d] if align else 1
        rounded = [0, *(round(b / step) * step for b in even[1:-1]), n]
        bounds.append(
            tuple(rounded) if step > 1 and all(a < b for a, b in itertools.pairwise(rounded)) else tuple(even)
        )
    return Grid(tuple(bounds))
