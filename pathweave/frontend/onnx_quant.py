"""ONNX QuantizeLinear and DequantizeLinear (opsets 10 to 25) -> torch: the QDQ pairs of int8 models.

Scale and zero point are per tensor, per axis, or per block of ``block_size`` along ``axis``.
Quantize divides by the scale, rounds half to even, adds the zero point and saturates to the
target's range (integers), or casts to float8 (saturating unless ``saturate=0``); dequantize
subtracts the zero point in float32 and multiplies by the scale, giving the scale's dtype or
``output_dtype``. 4-bit and 2-bit types are refused (torch has no such dtypes).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import FLOAT8, OnnxNode, aten, conv_call, op, torch_dtype
from pathweave.frontend.onnx_ops_more import _overflow, _saturate

_INTEGERS = (torch.uint8, torch.int8, torch.uint16, torch.int16)


def _spread(p: torch.Tensor, shape: torch.Size, axis: int, block: int) -> torch.Tensor:
    """A scale or zero point made broadcastable to ``shape``: as is when it has one element, along
    ``axis`` per element, or repeated ``block`` times along ``axis`` for blocked quantization."""
    if p.numel() == 1:
        return p.reshape(())
    if not block:
        dims = [1] * len(shape)
        dims[axis] = p.numel()
        return p.reshape(dims)
    return p.repeat_interleave(block, axis).narrow(axis, 0, shape[axis])


def quantize(x, scale, zero, axis: int, block: int, dtype: torch.dtype, saturate: bool, precision: Any):
    compute = precision or (torch.float64 if x.dtype == torch.float64 else torch.float32)
    q = x.to(compute) / _spread(scale, x.shape, axis, block).to(compute)
    if dtype in FLOAT8:
        return (_saturate(q, dtype) if saturate else _overflow(q, dtype)).to(dtype)
    q = torch.round(q).to(torch.int64)  # half to even, as ONNX's rint
    if zero is not None:
        q = q + _spread(zero, x.shape, axis, block).to(torch.int64)
    info = torch.iinfo(dtype)
    return q.clamp(info.min, info.max).to(dtype)


def dequantize(x, scale, zero, axis: int, block: int, dtype: torch.dtype) -> torch.Tensor:
    dx = x.to(torch.float32)
    if zero is not None and x.dtype not in FLOAT8:
        dx = dx - _spread(zero, x.shape, axis, block).to(torch.float32)
    return (dx * _spread(scale, x.shape, axis, block).to(torch.float32)).to(dtype)


def _layout(n: OnnxNode) -> tuple[int, int]:
    axis = n.at.get("axis", 1) % max(n.rank(0), 1)
    block = int(n.at.get("block_size", 0))
    scale = n.val(1)
    if block < 0 or (scale.numel() > 1 and not block and scale.dim() != 1):
        raise UnsupportedError(f"{n.op_type} scale of shape {list(scale.shape)} with block_size {block}")
    return axis, block


@op("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "saturate", "precision"))
def quantize_linear(n: OnnxNode) -> Any:
    if not n.val(0).is_floating_point() or n.val(0).dtype in FLOAT8:
        raise UnsupportedError(f"QuantizeLinear of {n.val(0).dtype} is not supported")
    if n.has(2):
        dtype = n.val(2).dtype
    elif "output_dtype" in n.at:
        dtype = torch_dtype(n.at["output_dtype"], "QuantizeLinear's output_dtype")
    else:
        dtype = torch.uint8
    if dtype not in (*_INTEGERS, *FLOAT8):
        raise UnsupportedError(f"QuantizeLinear to {dtype} is not supported")
    precision = torch_dtype(n.at["precision"], "precision") if n.at.get("precision") else None
    axis, block = _layout(n)
    zero = n.x(2) if n.has(2) and dtype not in FLOAT8 else None
    return n.call(
        quantize, n.x(0), n.x(1), zero, axis, block, dtype, bool(n.at.get("saturate", 1)), precision
    )


@op("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def dequantize_linear(n: OnnxNode) -> Any:
    if n.val(0).dtype not in (*_INTEGERS, torch.int32, *FLOAT8):
        raise UnsupportedError(f"DequantizeLinear of {n.val(0).dtype} is not supported")
    if "output_dtype" in n.at:
        dtype = torch_dtype(n.at["output_dtype"], "DequantizeLinear's output_dtype")
    else:
        dtype = n.val(1).dtype
    axis, block = _layout(n)
    zero = n.x(2) if n.has(2) else None
    return n.call(dequantize, n.x(0), n.x(1), zero, axis, block, dtype)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(n: OnnxNode) -> Any:
    """uint8 over the range of x widened to hold 0: scale (max - min) / 255, zero point rounded."""
    if n.val(0).dtype != torch.float32:
        raise UnsupportedError(f"DynamicQuantizeLinear of {n.val(0).dtype} is not supported (float32)")
    out = n.call(_dynamic_quantize, n.x(0))
    return tuple(n.call(operator.getitem, out, i) for i in range(3))


def _dynamic_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hi, lo = torch.clamp(x.max(), min=0), torch.clamp(x.min(), max=0)
    scale = torch.where(hi == lo, torch.ones_like(hi), hi - lo) / 255
    zero = torch.round(torch.clamp(0 - lo / scale, 0, 255))
    y = torch.clamp(torch.round(x / scale) + zero, 0, 255)
    return y.to(torch.uint8), scale, zero.to(torch.uint8)


def _centred(n: OnnxNode, i: int, zero: int, axis_shape: list[int] | None) -> torch.fx.Node:
    """Input ``i`` minus its zero point (input ``zero``, reshaped to ``axis_shape`` when it is a
    vector), as int64."""
    x = n.call(aten._to_copy.default, n.x(i), dtype=torch.int64)
    if not n.has(zero):
        return x
    zp = n.call(aten._to_copy.default, n.x(zero), dtype=torch.int64)
    if axis_shape is not None and n.val(zero).numel() > 1:
        zp = n.call(aten.reshape.default, zp, axis_shape)
    return n.call(aten.sub.Tensor, x, zp)


@op("MatMulInteger")
def matmul_integer(n: OnnxNode) -> Any:
    """(A - a_zero) @ (B - b_zero) in int32; a vector a_zero is per row of A, b_zero per column of B."""
    a = _centred(n, 0, 2, [-1, 1])
    b = _centred(n, 1, 3, None)
    return n.call(aten._to_copy.default, n.call(aten.matmul.default, a, b), dtype=torch.int32)


@op("ConvInteger", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def conv_integer(n: OnnxNode) -> Any:
    """The convolution of the centred inputs (padding is the zero point) in float64, exact for the
    sums of 8-bit products, as int32."""
    x = n.call(aten._to_copy.default, _centred(n, 0, 2, None), dtype=torch.float64)
    w = n.call(aten._to_copy.default, _centred(n, 1, 3, [-1] + [1] * (n.rank(1) - 1)), dtype=torch.float64)
    out = conv_call(n, x, w, None)
    return n.call(aten._to_copy.default, n.call(aten.round.default, out), dtype=torch.int32)


@op("QLinearMatMul")
def qlinear_matmul(n: OnnxNode) -> Any:
    """Integer product of the centred operands, rescaled by a_scale * b_scale / y_scale (in the scales'
    dtype, then float64), plus the output zero point, rounded half to even and saturated."""
    a = _centred(n, 0, 2, None)
    b = _centred(n, 3, 5, None)
    product = n.call(aten.matmul.default, a, b)
    dtype = n.val(7).dtype if n.has(7) else n.val(0).dtype
    zero = n.x(7) if n.has(7) else None
    return n.call(_requantize, product, n.x(1), n.x(4), n.x(6), zero, dtype)


def _requantize(c, a_scale, b_scale, y_scale, zero, dtype: torch.dtype) -> torch.Tensor:
    d = c.to(torch.float64) * (a_scale * b_scale / y_scale).to(torch.float64)
    if zero is not None:
        d = d + zero.to(torch.float64)
    info = torch.iinfo(dtype)
    return torch.clamp(torch.round(d), info.min, info.max).to(dtype)


@op("QLinearConv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def qlinear_conv(n: OnnxNode) -> Any:
    """The integer convolution of the centred inputs plus the int32 bias (float64: exact for 8-bit
    sums), rescaled by x_scale * w_scale / y_scale (w_scale per output channel or one), plus the output
    zero point, saturated and rounded half to even."""
    rank = n.rank(3)
    x = n.call(aten._to_copy.default, _centred(n, 0, 2, None), dtype=torch.float64)
    w = n.call(aten._to_copy.default, _centred(n, 3, 5, [-1] + [1] * (rank - 1)), dtype=torch.float64)
    bias = n.call(aten._to_copy.default, n.x(8), dtype=torch.float64) if n.has(8) else None
    out = conv_call(n, x, w, bias, weight_input=3)
    dtype = n.val(7).dtype if n.has(7) else n.val(0).dtype
    zero = n.x(7) if n.has(7) else None
    return n.call(_requantize_conv, out, n.x(1), n.x(4), n.x(6), zero, dtype)


def _requantize_conv(c, x_scale, w_scale, y_scale, zero, dtype: torch.dtype) -> torch.Tensor:
    if w_scale.numel() > 1:
        w_scale = w_scale.reshape(1, -1, *([1] * (c.dim() - 2)))
    return _requantize(c, x_scale, w_scale, y_scale, zero, dtype)
