"""The convolution micro-kernels (native/tile_gemm.c) against numpy, for every instruction set this CPU
has: weight packing, rows starting inside a panel, column tails, k and column blocks, the fused
bias / residual / ReLU epilogue; and the OpenBLAS loader's choice of kernels."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

from pathweave.errors import UnsupportedError
from pathweave.tiles import runtime as tile_runtime
from pathweave.tiles.abi import PANEL_ROWS, PANEL_ROWS_T
from pathweave.tiles.bind_cnn import pack_weights

_I64, _P = ctypes.c_int64, ctypes.c_void_p


def _gemm(wp: np.ndarray, rows: int, row_skip: int, panel: int, b: np.ndarray, c: np.ndarray,
          bias: np.ndarray | None, res: np.ndarray | None, act: int) -> None:  # fmt: skip
    lib = tile_runtime._library()
    lib.pw_gemm_packed.argtypes = [_I64, _I64, _I64, _P, _I64, _P, _I64, _P, _I64, _P, _P, ctypes.c_int]
    k, cols = b.shape
    lib.pw_gemm_packed(rows, cols, k, wp.ctypes.data + 4 * panel * k * PANEL_ROWS, row_skip, b.ctypes.data,
                       cols, c.ctypes.data, c.shape[1], None if bias is None else bias.ctypes.data,
                       None if res is None else res.ctypes.data, act)  # fmt: skip


@pytest.fixture(params=tile_runtime.GEMM_ISAS)
def isa(request: pytest.FixtureRequest):
    chosen = tile_runtime.gemm_isa()
    try:
        tile_runtime.use_gemm_isa(request.param)
    except UnsupportedError:
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    tile_runtime.use_gemm_isa(chosen)


@pytest.mark.parametrize(("out", "k", "cols", "first", "count"), [
    (8, 3, 1, 0, 8),  # one panel, one column
    (21, 37, 50, 3, 11),  # rows start and end inside panels, a tail of 2 columns
    (64, 800, 13, 16, 40),  # k in three blocks
    (16, 20, 517, 0, 16),  # columns in three blocks, tail of 5
    (40, 9, 48, 33, 7),  # the last panel only, padded rows
])  # fmt: skip
def test_packed_product_with_epilogue_matches_numpy(isa: str, out: int, k: int, cols: int, first: int,
                                                    count: int) -> None:  # fmt: skip
    def call(wp: np.ndarray, b: np.ndarray, c: np.ndarray, bias: np.ndarray | None, res: np.ndarray | None,
             act: int) -> None:  # fmt: skip
        _gemm(wp, count, first % PANEL_ROWS, first // PANEL_ROWS, b, c, bias, res, act)

    _check_product(out, k, cols, first, count, PANEL_ROWS, call)


@pytest.mark.parametrize(("out", "k", "cols", "first", "count"), [
    (16, 3, 1, 0, 16),  # one panel, one position
    (64, 700, 49, 0, 64),  # a 7x7 map: 4 micro-tiles of 12 and one of 1, k in two blocks
    (80, 37, 196, 16, 48),  # a single panel after a pair, 16 positions of the last transposed block
    (50, 300, 29, 5, 37),  # rows start and end inside panels, the padding rows of the last one
])  # fmt: skip
def test_transposed_product_with_epilogue_matches_numpy(isa: str, out: int, k: int, cols: int, first: int,
                                                        count: int) -> None:  # fmt: skip
    skip, panel = first % PANEL_ROWS_T, first // PANEL_ROWS_T
    sums = np.full(cols * -(-(skip + count) // PANEL_ROWS_T) * PANEL_ROWS_T, 3.0, dtype=np.float32)
    lib = tile_runtime._library()
    lib.pw_gemm_packed_t.argtypes = [_I64, _I64, _I64, _P, _I64, _P, _I64, _P, _I64, _P, _P, ctypes.c_int, _P]

    def call(wp: np.ndarray, b: np.ndarray, c: np.ndarray, bias: np.ndarray | None, res: np.ndarray | None,
             act: int) -> None:  # fmt: skip
        at = wp.ctypes.data + 4 * panel * k * PANEL_ROWS_T
        lib.pw_gemm_packed_t(count, cols, k, at, skip, b.ctypes.data, cols, c.ctypes.data, cols,
                             None if bias is None else bias.ctypes.data,
                             None if res is None else res.ctypes.data, act, sums.ctypes.data)  # fmt: skip

    _check_product(out, k, cols, first, count, PANEL_ROWS_T, call)


def _check_product(out: int, k: int, cols: int, first: int, count: int, panel_rows: int,
                   call: Callable[..., None]) -> None:  # fmt: skip
    """Rows [first, first + count) of W @ B by ``call(wp, b, c, bias, res, act)`` against numpy, with
    and without bias, residual and ReLU; W packed in panels of ``panel_rows``."""
    rng = np.random.default_rng(out * k + cols)
    w = rng.standard_normal((out, k)).astype(np.float32)
    b = rng.standard_normal((k, cols)).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32)
    res = rng.standard_normal((out, cols)).astype(np.float32)
    b[0, cols // 2] = np.nan  # a NaN reaches one column of every row, through the ReLU too
    wp = pack_weights(w.reshape(out, k, 1, 1), 1, panel_rows)
    assert wp is not None and wp.shape == (-(-out // panel_rows), k, panel_rows)
    for act, with_bias in ((0, False), (1, True)):
        c = np.full((count, cols), 7.0, dtype=np.float32)
        call(wp, b, c, bias[first:] if with_bias else None, res[first:] if with_bias else None, act)
        want = w[first : first + count].astype(np.float64) @ b
        if with_bias:
            want += bias[first : first + count, None] + res[first : first + count]
        if act == 1:
            want = np.where(np.isnan(want), want, np.maximum(want, 0.0))
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_depthwise_weights_are_not_packed() -> None:
    w = np.ones((32, 1, 3, 3), dtype=np.float32)
    assert pack_weights(w, 32) is None  # one row per group: the sgemm path
    grouped = pack_weights(np.arange(2 * 9 * 4 * 1, dtype=np.float32).reshape(18, 4, 1, 1), 2)
    assert grouped is not None and grouped.shape == (4, 4, PANEL_ROWS)  # two groups of 9 rows, 2 panels each
    np.testing.assert_array_equal(grouped[1, :, 0], np.arange(32, 36))  # group 0, row 8: the second panel
    np.testing.assert_array_equal(grouped[1, :, 1:], 0)  # its padding rows
    np.testing.assert_array_equal(grouped[2, :, 0], np.arange(36, 40))  # group 1 starts a new panel


def test_unknown_instruction_set_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown micro-kernel set"):
        tile_runtime.use_gemm_isa("sse9")


_CORE = (
    "from pathweave.tiles import runtime as t; import os; "
    "print(t.blas_core(), os.environ.get('OPENBLAS_CORETYPE'))"
)


def _core(env: dict[str, str]) -> list[str]:
    base = {k: v for k, v in os.environ.items() if "OPENBLAS_CORETYPE" not in k}
    run = subprocess.run([sys.executable, "-c", _CORE], env={**base, **env}, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return run.stdout.split()


def test_openblas_picks_its_kernels_for_this_cpu_whatever_the_environment_says() -> None:
    own = _core({})
    assert _core({"OPENBLAS_CORETYPE": "Nehalem"}) == [own[0], "Nehalem"]  # hidden while loading, restored
    assert _core({"PATHWEAVE_OPENBLAS_CORETYPE": "Nehalem"})[0] == "Nehalem"  # the override is honoured


def test_linears_on_the_packed_kernels_over_several_column_pieces(outputs_close) -> None:
    import torch

    import pathweave
    from pathweave.tiles.abi import S_OP, S_WPACK
    from pathweave.tiles.strategy import TilesStrategy

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(72, 520), torch.nn.GELU(), torch.nn.Linear(520, 300), torch.nn.ReLU()
    ).eval()
    x = torch.randn(2, 261, 72)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2)
    rows = strat.program.layers
    pieces = [len(strat.graph.grid(i)[-1]) - 1 for i in range(strat.graph.num_layers)]
    assert max(pieces) >= 3  # several column blocks of the packed weights
    if tile_runtime.gemm_isa() == "generic":  # OpenBLAS: the scalar packed kernel ran 14-25x slower
        assert not rows[:, S_WPACK].any()
    else:  # panels of 16 columns, 300 % 16 = 12 in the last piece
        assert (rows[:, S_WPACK] != 0).sum() == 2 and all(rows[rows[:, S_WPACK] != 0, S_OP] == 36)
        from pathweave.tiles.abi import S_WPACK_T

        assert rows[rows[:, S_WPACK] != 0, S_WPACK_T].all()
    for seed in range(3):
        x = torch.randn(2, 261, 72, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


@pytest.mark.parametrize(("rows", "cols", "k", "lda"), [
    (13, 37, 600, 600),  # a row tail of 1, the last panel 5 columns wide, k in two blocks
    (24, 32, 64, 80),  # rows of A further apart than k
    (26, 48, 700, 1024),  # rows 4 KiB apart: copied before the product, block by block
    (1, 16, 1, 1),
    (3, 20, 33, 33),  # the last panel 4 columns, fewer than an AVX2 vector: its first vector alone
    (17, 17, 17, 19),  # one column past a panel: AVX2's second vector of the last panel masked to 1
])  # fmt: skip
def test_row_broadcast_product_matches_numpy(isa: str, rows: int, cols: int, k: int, lda: int) -> None:
    rng = np.random.default_rng(rows * cols + k)
    a = rng.standard_normal((rows, lda)).astype(np.float32)
    w = rng.standard_normal((cols, k)).astype(np.float32)  # a linear's weight: B = w^T
    a[0, 0] = np.nan  # the first row's NaN reaches every column of it, and no other row
    wp = pack_weights(w.reshape(cols, k, 1, 1), 1, PANEL_ROWS_T)
    c = np.full((rows, cols + 3), 7.0, dtype=np.float32)  # 3 columns past the product stay untouched
    lib = tile_runtime._library()
    lib.pw_gemm_rows.argtypes = [_I64, _I64, _I64, _P, _I64, _P, _P, _I64]
    lib.pw_gemm_rows(rows, cols, k, a.ctypes.data, lda, wp.ctypes.data, c.ctypes.data, cols + 3)
    want = a[:, :k].astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(c[:, :cols], want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    np.testing.assert_array_equal(c[:, cols:], 7.0)
    assert np.isnan(c[0, :cols]).all() and not np.isnan(c[1:]).any()


def test_linears_on_the_row_broadcast_kernel_every_instruction_set(outputs_close) -> None:
    import torch

    import pathweave
    from pathweave.tiles.abi import S_WPACK_T
    from pathweave.tiles.strategy import TilesStrategy

    chosen = tile_runtime.gemm_isa()
    if chosen == "generic":
        pytest.skip("the row-broadcast kernel is chosen only where vector kernels run")
    torch.manual_seed(0)
    model = torch.nn.Sequential(  # the second layer's rows of A are 4 KiB apart: copied block by block
        torch.nn.Linear(96, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 128)
    ).eval()
    x = torch.randn(2, 140, 96)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2)
    assert strat.program.layers[:, S_WPACK_T].sum() == 2
    try:
        for isa in tile_runtime.runnable_gemm_isas():  # the weights stay in panels; each level its loops
            tile_runtime.use_gemm_isa(isa)
            x = torch.randn(2, 140, 96, generator=torch.Generator().manual_seed(len(isa)))
            with torch.no_grad():
                outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        tile_runtime.use_gemm_isa(chosen)
        strat.close()


@pytest.mark.parametrize("batch", [1, 3])
def test_a_head_of_few_rows_on_the_row_broadcast_kernel(outputs_close, batch: int) -> None:
    import torch

    import pathweave
    from pathweave.tiles.abi import S_WPACK, S_WPACK_T
    from pathweave.tiles.strategy import TilesStrategy

    torch.manual_seed(batch)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(300, 1000)).eval()  # a CNN's head
    x = torch.randn(batch, 300, 1, 1)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2)
    try:
        rows = strat.program.layers
        if tile_runtime.gemm_isa() != "generic":  # fewer rows than a panel of 8: no longer OpenBLAS
            assert rows[:, S_WPACK].any() and rows[rows[:, S_WPACK] != 0, S_WPACK_T].all()
        else:
            assert not rows[:, S_WPACK].any()  # the packed kernel would compute 8 rows for each one
        with torch.no_grad():
            outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        strat.close()


_FORCED = (
    "import torch, pathweave; from pathweave.tiles import runtime as t; torch.manual_seed(0); "
    "m = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), "
    "torch.nn.Conv2d(32, 32, 3, padding=1)).eval(); x = torch.randn(1, 3, 17, 17); "
    "fast = pathweave.optimize(m, x, strategy='tiles'); "
    "print(t.gemm_isa(), float((fast(x) - m(x)).abs().max()), fast.summary().split(', ')[-1].split()[0])"
)


@pytest.mark.parametrize("isa", tile_runtime.GEMM_ISAS)
def test_the_environment_forces_the_instruction_set_of_every_runtime(isa: str) -> None:
    env = {**os.environ, tile_runtime.ISA_ENV: isa}
    done = subprocess.run([sys.executable, "-c", _FORCED], env=env, capture_output=True, text=True)
    if done.returncode and "cannot run the" in done.stderr:
        pytest.skip(f"this CPU has no {isa}")
    assert done.returncode == 0, done.stderr[-2000:]
    got, diff, noted = done.stdout.split()
    assert got == isa and float(diff) < 1e-3 and noted == isa  # the bench note names the kernels' level


def test_a_forced_level_the_cpu_lacks_is_an_error_not_a_silent_fallback() -> None:
    """Tiles built under PATHWEAVE_ISA above the CPU's level raise, where they ran every layer in ATen
    with a warning that did not say why (found by a hostile test on an AVX2 CPU)."""
    missing = [isa for isa in tile_runtime.GEMM_ISAS if isa not in tile_runtime.runnable_gemm_isas()]
    if not missing:
        pytest.skip("this CPU runs every level")
    env = {**os.environ, tile_runtime.ISA_ENV: missing[0]}
    code = (
        "import torch, pathweave\n"
        "from pathweave.errors import InputError\n"
        "m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()\n"
        "try:\n"
        "    pathweave.optimize(m, torch.randn(1, 3, 16, 16), strategy='tiles')\n"
        "except InputError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"refused: PATHWEAVE_ISA={missing[0]}: this CPU cannot run" in done.stdout


def test_an_unknown_forced_level_is_named() -> None:
    env = {**os.environ, tile_runtime.ISA_ENV: "avx9"}
    code = "from pathweave.tiles import runtime as t; t.gemm_isa()"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "PATHWEAVE_ISA='avx9' is not an instruction set level" in done.stderr
