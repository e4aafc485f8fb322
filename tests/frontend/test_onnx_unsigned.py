"""Unsigned arithmetic for the ONNX converters, against numpy's (which wraps modulo 2**bits)."""

import numpy as np
import pytest
import torch

from pathweave.frontend.onnx_unsigned import bit_shift, uint_binary, uint_not

NP = {torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}
NP_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "div": np.floor_divide,
    "mod": np.mod, "eq": np.equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}  # fmt: skip


def _values(dtype: torch.dtype, size: int, seed: int) -> np.ndarray:
    """Random values with the extremes (0, 1, the top bit, the maximum) mixed in."""
    info = np.iinfo(NP[dtype])
    rng = np.random.default_rng(seed)
    edges = np.array([0, 1, info.max, info.max // 2 + 1, info.max - 1], dtype=NP[dtype])
    out = rng.integers(0, info.max, size=size, dtype=NP[dtype], endpoint=True)
    out[: min(size, len(edges))] = edges[: min(size, len(edges))]
    return out


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("size", [1, 3, 17, 33])
@pytest.mark.parametrize("kind", list(NP_OPS))
def test_binary_ops_match_numpy(dtype: torch.dtype, size: int, kind: str) -> None:
    a, b = _values(dtype, size, 1), _values(dtype, size, 2)[::-1].copy()
    if kind in ("div", "mod"):
        b[b == 0] = 3  # division by zero is undefined in ONNX
    with np.errstate(over="ignore"):
        want = NP_OPS[kind](a, b)
    got = uint_binary(torch.from_numpy(a), torch.from_numpy(b), kind)
    assert got.dtype == (torch.bool if want.dtype == bool else dtype)
    assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", list(NP))
def test_not_and_broadcasting_of_a_non_contiguous_operand(dtype: torch.dtype) -> None:
    a = _values(dtype, 34, 3).reshape(17, 2)
    assert np.array_equal(uint_not(torch.from_numpy(a)).numpy(), np.invert(a))
    col = torch.from_numpy(a)[:, :1]  # a strided column, broadcast against a row
    row = torch.from_numpy(a[0].copy())
    want = np.add(a[:, :1], a[0], dtype=NP[dtype])
    assert np.array_equal(uint_binary(col, row, "add").numpy(), want)


def _shift(x: int, s: int, bits: int, signed: bool, left: bool) -> int:
    """ONNX's BitShift on Python integers: counts below 0 or of at least the width give 0 (-1 for a
    right shift of a negative value); left shifts keep the low ``bits`` bits."""
    if s < 0 or s >= bits:
        return -1 if (not left and x < 0) else 0
    if not left:
        return x >> s
    low = (x << s) % 2**bits
    return low - 2**bits if signed and low >= 2 ** (bits - 1) else low


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, *NP])
@pytest.mark.parametrize("left", [True, False])
def test_bit_shift_as_onnx_defines_it(dtype: torch.dtype, left: bool) -> None:
    """Bits shifted out are dropped; out-of-range counts are not C's masked count."""
    bits, signed = dtype.itemsize * 8, dtype.is_signed
    npt = np.dtype(str(dtype).removeprefix("torch."))
    info = np.iinfo(npt)
    a = np.array([1, info.max, info.min, 5, info.min + 3, 7, 0], dtype=npt)
    counts = [0, 1, bits - 1, bits, -1 if signed else bits + 3, 3, 2]
    b = np.array(counts, dtype=npt)
    want = [_shift(x, c, bits, signed, left) for x, c in zip(a.tolist(), counts, strict=True)]
    got = bit_shift(torch.from_numpy(a), torch.from_numpy(b), left)
    assert got.dtype == dtype
    assert got.tolist() == want
