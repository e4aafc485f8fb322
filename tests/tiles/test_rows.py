"""tiles/rows.py: packed weights start on a cache line, whatever the allocator gave."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pathweave
from pathweave.tiles.abi import S_WPACK
from pathweave.tiles.rows import PACK_ALIGN, cache_aligned
from pathweave.tiles.strategy import TilesStrategy


@pytest.mark.parametrize("offset", [0, 1, 4, 12])
def test_cache_aligned_copies_what_starts_off_a_line(offset: int) -> None:
    raw = np.arange(offset + 40, dtype=np.float32)
    a = raw[offset:].reshape(5, 8)
    b = cache_aligned(a)
    assert b.ctypes.data % PACK_ALIGN == 0 and np.array_equal(a, b) and b.shape == (5, 8)
    assert (b is a) == (a.ctypes.data % PACK_ALIGN == 0)


def test_every_packed_weight_of_a_program_starts_on_a_line() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 7, stride=2, padding=3),
        torch.nn.ReLU(),
        *(torch.nn.Conv2d(16, 16, k, padding=k // 2) for k in (1, 3, 5)),
    ).eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(1, 3, 20, 20)), threads=1)
    try:
        packed = [int(row[S_WPACK]) for row in strat.program.layers if row[S_WPACK]]
        assert len(packed) >= 4 and all(p % PACK_ALIGN == 0 for p in packed)
    finally:
        strat.close()
