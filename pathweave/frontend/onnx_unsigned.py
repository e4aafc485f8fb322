"""Unsigned integer arithmetic for the ONNX converters: torch's CPU kernels lack most ops on uint16,
uint32 and uint64 (add, compare, shift, divide raise "not implemented").

uint16 and uint32 widen to int64 by value, compute, and narrow back (which wraps modulo 2**bits, as
ONNX's unsigned arithmetic does). uint64 is reinterpreted as int64 bit for bit: addition, subtraction,
multiplication and the bitwise ops are the same bits either way; comparisons flip the sign bit first;
division works on halves so that no value needs a 65th bit.
"""

from __future__ import annotations

import torch

UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_SIGN = -(2**63)  # the int64 with only the sign bit set

_ARITH = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum,
    "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor,
    "div": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "mod": torch.remainder,
}  # fmt: skip
_COMPARE = {"eq": torch.eq, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def uint_binary(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    """``a kind b`` for two tensors of one unsigned dtype (``kind``: a key of ``_ARITH`` or
    ``_COMPARE``); comparisons give bool, the rest the operands' dtype."""
    dtype = a.dtype
    if dtype != torch.uint64:
        out = {**_ARITH, **_COMPARE}[kind](a.to(torch.int64), b.to(torch.int64))
        return out if out.dtype == torch.bool else out.to(dtype)
    x, y = a.view(torch.int64), b.view(torch.int64)
    if kind in _COMPARE:
        return _COMPARE[kind](x ^ _SIGN, y ^ _SIGN)
    if kind in ("max", "min"):
        pick_a = (x ^ _SIGN) > (y ^ _SIGN) if kind == "max" else (x ^ _SIGN) < (y ^ _SIGN)
        return torch.where(pick_a, x, y).view(dtype)
    if kind in ("div", "mod"):
        q, r = _divmod_u64(x, y)
        return (q if kind == "div" else r).view(dtype)
    return _ARITH[kind](x, y).view(dtype)


def _divmod_u64(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsigned 64-bit quotient and remainder of the bit patterns ``x``, ``y`` (int64 tensors): halve
    the dividend so that a signed division is exact, then correct the last bit."""
    big = y < 0  # a divisor of 2**63 or more: the quotient is 0 or 1
    ge = (x ^ _SIGN) >= (y ^ _SIGN)
    safe = torch.where(big, torch.ones_like(y), y)
    half = (x >> 1) & (2**63 - 1)
    q = torch.div(half, safe, rounding_mode="trunc") << 1
    r = x - q * safe
    more = (r ^ _SIGN) >= (safe ^ _SIGN)
    q, r = torch.where(more, q + 1, q), torch.where(more, r - safe, r)
    q_big, r_big = ge.to(torch.int64), torch.where(ge, x - y, x)
    return torch.where(big, q_big, q), torch.where(big, r_big, r)


def uint_not(a: torch.Tensor) -> torch.Tensor:
    wide = a.view(torch.int64) if a.dtype == torch.uint64 else a.to(torch.int64)
    out = torch.bitwise_not(wide)
    return out.view(a.dtype) if a.dtype == torch.uint64 else out.to(a.dtype)


def bit_shift(a: torch.Tensor, b: torch.Tensor, left: bool) -> torch.Tensor:
    """ONNX's BitShift for any integer dtype: left shifts drop the bits shifted out, right shifts of
    signed values fill with the sign; a shift by a negative count or by at least the bit width gives 0
    (-1 for a right shift of a negative signed value), where C masks the count."""
    dtype = a.dtype
    bits = dtype.itemsize * 8
    signed = dtype.is_signed
    wide = a.view(torch.int64) if dtype == torch.uint64 else a.to(torch.int64)
    count = b.view(torch.int64) if b.dtype == torch.uint64 else b.to(torch.int64)
    out_of_range = (count < 0) | (count >= bits)  # a uint64 count of 2**63 or more reads negative
    s = torch.where(out_of_range, torch.zeros_like(count), count)
    if left:
        out = wide << s
    elif dtype == torch.uint64:  # logical: clear the sign copies an arithmetic shift brings in
        out = torch.where(s == 0, wide, (wide >> s) & ((torch.ones_like(s) << (64 - s)) - 1))
    else:
        out = wide >> s  # sign-extended for signed, zero-extended for unsigned: both exact
    fill = torch.where(wide < 0, -1, 0) if signed and not left else torch.zeros_like(wide)
    out = torch.where(out_of_range, fill, out)
    return out.view(dtype) if dtype == torch.uint64 else out.to(dtype)
