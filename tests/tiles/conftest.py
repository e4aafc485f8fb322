"""Fixtures shared by the tile tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pathweave.tiles import runtime as tile_runtime


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
