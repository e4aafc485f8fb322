"""Brute-force tile dependencies for the tile graph tests: perturb one input element at a time, run the
eager op, and see which output elements change. A float element is set to NaN (NaN survives every
multiply, max and sum of the ops tested, so the NaN mask is exactly the outputs that read it); an integer
or boolean element is changed and the outputs that differ are taken."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from pathweave.tiles.grid import Grid
from pathweave.tiles.ranges import Region


def dependency_mask(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], which: int
) -> np.ndarray:
    """``mask[o, i]``: output element ``o`` (flat) depends on element ``i`` of ``inputs[which]``."""
    base = fn(*inputs)
    x = inputs[which]
    mask = np.zeros((base.numel(), x.numel()), dtype=bool)
    for i in range(x.numel()):
        y = x.clone()
        flat = y.view(-1)
        if y.is_floating_point():
            flat[i] = float("nan")
        elif y.dtype == torch.bool:
            flat[i] = ~flat[i]
        else:  # an index: 0 or 1 stays valid for any table of two rows or more
            flat[i] = 1 if int(flat[i]) == 0 else 0
        args = list(inputs)
        args[which] = y
        out = fn(*args)
        changed = torch.isnan(out) if y.is_floating_point() else out != base
        mask[:, i] = changed.reshape(-1).numpy()
    return mask


def tile_labels(grid: Grid, shape: Sequence[int]) -> np.ndarray:
    """Each element's tile number under the grid."""
    labels = np.full(tuple(shape), -1, dtype=np.int64)
    for t, region in enumerate(grid.regions()):
        labels[tuple(slice(lo, hi) for lo, hi in region)] = t
    assert (labels >= 0).all()
    return labels.reshape(-1)


def brute_pairs(mask: np.ndarray, out_labels: np.ndarray, in_labels: np.ndarray) -> set[tuple[int, int]]:
    """(consumer tile, producer tile) pairs some dependent element pair falls in."""
    o, i = np.nonzero(mask)
    return set(zip(out_labels[o].tolist(), in_labels[i].tolist(), strict=True))


def derived_pairs(
    region_map: Callable[[Region], Region | None], out_grid: Grid, in_grid: Grid
) -> set[tuple[int, int]]:
    """The same pairs from the range map and the producer grid's bisection."""
    pairs = set()
    for t, region in enumerate(out_grid.regions()):
        needed = region_map(region)
        if needed is not None:
            pairs.update((t, s) for s in in_grid.hits(needed))
    return pairs


def fine_grid(shape: Sequence[int]) -> Grid:
    """Every position its own tile along every dim."""
    return Grid(tuple(tuple(range(n + 1)) for n in shape))


def uneven_grid(shape: Sequence[int], seed: int) -> Grid:
    """Up to 4 pieces of random, uneven lengths along every dim."""
    rng = np.random.default_rng(seed)
    bounds = []
    for n in shape:
        k = int(rng.integers(1, min(n, 4) + 1))
        inner = sorted(rng.choice(np.arange(1, n), size=k - 1, replace=False).tolist()) if k > 1 else []
        bounds.append((0, *inner, n))
    return Grid(tuple(bounds))
