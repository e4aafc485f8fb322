"""Each vector kernel family of the tiles (native/tile_simd.h's widths: the pools, the transposed
micro-kernel's padded and narrow convolutions, Winograd's) against eager under every instruction set level
this CPU runs, on odd sizes (1, 3, 17, 33 columns: vector tails of both widths), strided and channels-last
inputs, and NaN and +-inf where eager propagates them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import pathweave
from pathweave.machine import cpu_isa
from pathweave.tiles import blocked
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.abi import PACKS, S_WPACK_T
from pathweave.tiles.strategy import TilesStrategy
from tests.conftest import nonfinite_input


def test_hot_loops_follow_the_forced_level(level: str) -> None:
    """im2col, Winograd's transforms, the pools and the element-wise loops (PW_HOT_FN) run the copy of the
    forced level, not the CPU's widest (GCC's target_clones chose by CPU alone)."""
    want = {"avx512": "x86-64-v4", "avx2": "x86-64-v3", "generic": "x86-64"}[level]
    assert tile_runtime.hot_copy() == want


class _Pools(torch.nn.Module):
    """The vector pools (3x3 stride 1 max and avg with count_include_pad, 3x3 and 2x2 stride-2 max) and
    the same over a strided view (a channel slice: rows a plane apart, the plane not the tensor's)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = torch.nn.functional
        v = x[:, 1:]
        return (
            f.max_pool2d(x, 3, 1, 1),
            f.avg_pool2d(x, 3, 1, 1),
            f.max_pool2d(x, 3, 2, 1),
            f.max_pool2d(x, 3, 2, 0, ceil_mode=True),
            f.max_pool2d(x, 2, 2),
            f.max_pool2d(v, 3, 1, 1),
            f.max_pool2d(v, 3, 2, 1),
        )


def _same(got: object, want: object) -> None:
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 2, 3, 3), (1, 3, 3, 17), (2, 4, 17, 33), (1, 5, 33, 3)])
def test_pools_match_eager(level: str, shape: tuple) -> None:
    net = _Pools().eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        for seed in range(2):
            x = nonfinite_input(shape, seed)
            with torch.no_grad():
                _same(strat(x), net(x))
    finally:
        strat.close()


class _StridedMax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = torch.nn.functional
        return f.max_pool2d(x, 3, 2, 1), f.max_pool2d(x, 3, 2, 0, ceil_mode=True)


def test_strided_max_pool_takes_nan_and_inf_in_every_column(level: str) -> None:
    """The 3x3 stride-2 max pool reads a vector pass's last window column (2 vectors + 1 on) apart from
    its two vectors: a NaN, or an inf among finite values, in any column and row reaches the outputs whose
    windows hold it, as in eager."""
    net = _StridedMax().eval()
    shape = (1, 2, 5, 71)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        for col in range(shape[3]):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(col))
            x[0, 0, col % shape[2], col] = float("nan")
            x[0, 1, (col + 2) % shape[2], col] = float("inf")
            with torch.no_grad():
                got, want = strat(x), net(x)
            for g, w in zip(got, want, strict=True):
                assert torch.equal(g.isnan(), w.isnan()), col
                torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    finally:
        strat.close()


class _Stride1(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = torch.nn.functional
        return f.max_pool2d(x, 3, 1, 1), f.avg_pool2d(x, 3, 1, 1)


@pytest.mark.parametrize("hw", [(9, 8), (5, 9), (17, 17), (4, 16), (13, 35)])
@pytest.mark.parametrize("tiles", [1, 3])
def test_stride1_pools_run_across_row_ends(level: str, hw: tuple, tiles: int) -> None:
    """At AVX2 the 3x3 stride-1 pools run over a plane's flat positions (pool3_flat: vectors cross row
    ends): a NaN or an inf in any column of a row, first and last rows included, reaches exactly the
    outputs whose windows hold it, the row pieces of several tiles included; max as eager bit for bit."""
    net = _Stride1().eval()
    h, w = hw
    shape = (1, 2, h, w)
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, tiles_per_layer=tiles)
    try:
        for pos in range(0, h * w, 3):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(pos))
            x[0, 0, pos // w, pos % w] = float("nan")
            x[0, 1, (pos // w + 1) % h, pos % w] = float("inf")
            with torch.no_grad():
                got, want = strat(x), net(x)
            torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
            assert torch.equal(got[1].isnan(), want[1].isnan()), pos
            torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-6, equal_nan=True)
    finally:
        strat.close()


def test_pools_read_a_channels_last_input(level: str) -> None:
    """A channels-last input is copied to the kernels' layout on the way in; the outputs stay eager's."""
    net = _Pools().eval()
    x = nonfinite_input((2, 4, 17, 33), 3).to(memory_format=torch.channels_last)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        with torch.no_grad():
            _same(strat(x), net(x))
    finally:
        strat.close()


class _Convs(torch.nn.Module):
    """Winograd 3x3s (at least 32 channels in and out; ReLU and a residual in the store), a stride-2 1x1
    and a 3x3 on the transposed kernel over their input as it lies and a zero-padded copy of it (the
    narrow layout has its own test, every level, in test_strategy.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(24, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.c = torch.nn.Conv2d(32, 128, 3, padding=1)
        self.d = torch.nn.Conv2d(128, 72, 1, stride=2)
        self.e = torch.nn.Conv2d(72, 24, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        y = torch.relu(self.b(y) + y)
        return self.e(self.d(self.c(y)))


@pytest.mark.parametrize("shape", [(1, 24, 17, 33), (2, 24, 15, 17)])
def test_conv_layouts_match_eager(level: str, shape: tuple, outputs_close, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(blocked, "WINDOW_ISAS", ())  # the transposed kernel's windows at every level
    monkeypatch.setattr(blocked, "BLOCKED_ISAS", ())  # and its stride-2 1x1 layer
    torch.manual_seed(0)
    net = _Convs().eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, winograd_min_channels=32)
    try:
        kinds = strat.program.layers[:, S_WPACK_T].tolist()
        assert kinds.count(PACKS["winograd"]) == 2 and kinds.count(PACKS["padded"]) == 2  # at every level
        for seed in range(2):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
        x = nonfinite_input(shape, 5)
        with torch.no_grad():  # NaN where eager has it (inf - inf inside the sums: NaN there too)
            got, want = strat(x), net(x)
        assert torch.equal(got.isnan(), want.isnan())
    finally:
        strat.close()


@pytest.mark.parametrize("forced", tile_runtime.GEMM_ISAS)
def test_openblas_follows_the_forced_level(forced: str) -> None:
    """OpenBLAS (the tile kernels' fallback products) loads the family of PATHWEAVE_ISA's level where it
    is below the CPU's; PATHWEAVE_OPENBLAS_CORETYPE still wins."""
    if forced not in tile_runtime.runnable_gemm_isas():
        pytest.skip(f"this CPU has no {forced}")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", tile_runtime.CORETYPE_ENV)}
    code = "from pathweave.tiles import runtime as r; print(r.blas_core())"

    def core(**extra: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], env=env | {"PATHWEAVE_ISA": forced, **extra},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    want = tile_runtime.BLAS_CORES.get(forced)
    if forced == cpu_isa():
        assert core() not in tile_runtime.BLAS_CORES.values() or cpu_isa() != "avx512"
    else:
        assert core() == want
    assert core(PATHWEAVE_OPENBLAS_CORETYPE="Nehalem") == "Nehalem"


@pytest.mark.parametrize("rows", [1, 3, 17, 33])
def test_linear_rows_kernel_at_every_vector_level(level: str, rows: int) -> None:
    """Linear layers with a constant weight run pw_gemm_rows (B in panels, S_WPACK_T 1) at both vector
    widths, and OpenBLAS at the generic level (no packed weights); eager's values, NaN and inf included."""
    torch.manual_seed(rows)
    net = torch.nn.Sequential(torch.nn.Linear(33, 48), torch.nn.ReLU(), torch.nn.Linear(48, 17)).eval()
    x = torch.randn(2, rows, 33)
    strat = TilesStrategy(pathweave.capture(net, x), threads=2)
    try:
        packed = strat.program.layers[:, S_WPACK_T].tolist()
        assert packed == ([0, 0] if level == "generic" else [1, 1])
        x[0, 0, 3], x[-1, -1, 0] = float("nan"), float("inf")
        with torch.no_grad():
            got, want = strat(x), net(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
        assert torch.equal(got.isnan(), want.isnan())
    finally:
        strat.close()
