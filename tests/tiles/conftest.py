"""Fixtures shared by the tile tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import pathweave
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.strategy import TilesStrategy


@pytest.fixture(params=tile_runtime.GEMM_ISAS)
def level(request: pytest.FixtureRequest) -> Iterator[str]:
    """The level forced for the whole test (build and run), skipped where this CPU lacks it."""
    if request.param not in tile_runtime.runnable_gemm_isas():
        pytest.skip(f"this CPU has no {request.param}")
    chosen = tile_runtime.gemm_isa()
    tile_runtime.use_gemm_isa(request.param)
    try:
        yield request.param
    finally:
        tile_runtime.use_gemm_isa(chosen)


@pytest.fixture
def avx2() -> Iterator[None]:
    """The AVX2 level forced for the whole test (the channel-blocked kernels run there only), skipped
    where this CPU lacks it; the level chosen before is restored after."""
    if "avx2" not in tile_runtime.runnable_gemm_isas():
        pytest.skip("this CPU has no AVX2")
    chosen = tile_runtime.gemm_isa()
    tile_runtime.use_gemm_isa("avx2")
    try:
        yield
    finally:
        tile_runtime.use_gemm_isa(chosen)


class _Branches(torch.nn.Module):
    """Two convolution branches over one input, added: tiles of both can run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.left = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.right = torch.nn.Conv2d(16, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return self.left(y) + self.right(y)


@pytest.fixture(scope="module")
def branches() -> Iterator[TilesStrategy]:
    """A small two-branch CNN as tiles on 2 workers (profiling, tracing, simulation)."""
    torch.manual_seed(0)
    strat = TilesStrategy(pathweave.capture(_Branches().eval(), torch.randn(1, 3, 40, 40)), threads=2)
    yield strat
    strat.close()
