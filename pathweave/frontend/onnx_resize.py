"""ONNX Resize (opsets 10 to 19+) and Upsample (7 to 9) -> torch, exactly as the ONNX spec computes.

Resize is separable: each resized axis maps output index ``y`` to a source coordinate ``x`` (by the
coordinate transformation mode), then mixes the input rows around ``x`` with a kernel (nearest,
linear or cubic, widened by ``antialias`` when shrinking). Shapes are static, so the mixing of one
axis is a fixed (output, input) matrix computed here in float64: nearest becomes one
``index_select`` (exact for every dtype), linear and cubic a matrix product along the axis. Edge
rows repeat the border (the spec's edge padding); ``exclude_outside`` drops and renormalises the
weights of taps outside the input; ``tf_crop_and_resize`` fills coordinates outside the crop with
``extrapolation_value``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, _str, aten, op

_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_crop_and_resize")  # fmt: skip
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
RESIZE_ATTRS = ("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode")  # fmt: skip


@dataclass(frozen=True)
class Axis:
    """How one axis is resized: sizes, the scale (numpy float32 where the model gave scales, so that
    products round as the spec's reference does) and the crop, if any."""

    size_in: int
    size_out: int
    scale: Any
    roi: tuple[float, float] | None


@dataclass(frozen=True)
class Kernel:
    mode: str  # nearest, linear, cubic
    transform: str
    nearest: str
    cubic_a: float
    antialias: bool
    exclude_outside: bool


def source_coords(axis: Axis, transform: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The source coordinate of every output index, and (tf_crop_and_resize) which fall outside."""
    y = np.arange(axis.size_out, dtype=np.float64)
    width = axis.scale * axis.size_in  # the spec's real-valued output length
    n_in = axis.size_in
    if transform == "align_corners":
        return (np.zeros_like(y) if width == 1 else y * (n_in - 1) / (width - 1)), None
    if transform == "asymmetric":
        return y / axis.scale, None
    if transform == "pytorch_half_pixel":  # the spec's 0 for one output (onnx's reference takes -0.5)
        return (np.zeros_like(y) if axis.size_out == 1 else (y + 0.5) / axis.scale - 0.5), None
    if transform == "half_pixel":
        return (y + 0.5) / axis.scale - 0.5, None
    if transform == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - axis.size_out / width)
        return offset + (y + 0.5) / axis.scale - 0.5, None
    lo, hi = axis.roi if axis.roi is not None else (0.0, 1.0)  # tf_crop_and_resize
    x = (
        np.full_like(y, (hi - lo) * (n_in - 1) / 2)
        if width == 1
        else y * (hi - lo) * (n_in - 1) / (width - 1)
    )
    x = x + lo * (n_in - 1)
    return x, (x < 0) | (x > n_in - 1)


def _keys(t: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel of Keys with parameter ``a``."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _taps(ratio: np.ndarray, scale: float, k: Kernel) -> tuple[np.ndarray, int]:
    """Weights (outputs, taps) for each output's ``ratio`` (its distance past the left tap, in (0, 1]),
    and the offset of the first tap from the left one."""
    r = ratio[:, None]
    if k.mode == "nearest":
        first = {
            "round_prefer_floor": ratio <= 0.5,
            "round_prefer_ceil": ratio < 0.5,
            "floor": np.ones_like(ratio, bool),
            "ceil": np.zeros_like(ratio, bool),
        }[k.nearest]
        first = np.where(ratio == 1, False, first)  # on a source pixel: that pixel
        return np.stack([first, ~first], axis=1).astype(np.float64), 0
    s = min(scale, 1.0) if k.antialias else 1.0
    if k.mode == "linear":
        start = math.floor(-1 / s) + 1
        w = np.clip(1 - np.abs((np.arange(start, 2 - start)[None, :] - r) * s), 0, 1)
    else:
        start = math.floor(-2 / s) + 1
        w = _keys((np.arange(start, 2 - start)[None, :] - r) * s, k.cubic_a)
    if k.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return w, start


def weights(axis: Axis, k: Kernel) -> tuple[np.ndarray, np.ndarray | None]:
    """The (output, input) float64 matrix that resizes one axis, and the rows to extrapolate."""
    x, outside = source_coords(axis, k.transform)
    left = np.floor(x)
    ratio = np.where(x == left, 1.0, x - left)
    left = np.where(x == left, left - 1, left).astype(np.int64)  # ratio 1: the pixel is the right tap
    w, start = _taps(ratio, float(axis.scale), k)
    index = left[:, None] + start + np.arange(w.shape[1])[None, :]
    if k.exclude_outside:
        w = np.where((index < 0) | (index >= axis.size_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    matrix = np.zeros((axis.size_out, axis.size_in))
    rows = np.repeat(np.arange(axis.size_out), w.shape[1])
    np.add.at(matrix, (rows, np.clip(index, 0, axis.size_in - 1).reshape(-1)), w.reshape(-1))
    return matrix, outside


def _apply(n: OnnxNode, x: torch.fx.Node, dim: int, axis: Axis, k: Kernel, fill: float) -> torch.fx.Node:
    matrix, outside = weights(axis, k)
    dtype = n.val(0).dtype
    if k.mode == "nearest" and outside is None:
        index = torch.from_numpy(matrix.argmax(axis=1))
        return n.call(aten.index_select.default, x, dim, n.constant(index))
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    mix = n.constant(torch.from_numpy(matrix).to(compute))
    mask = None if outside is None or not outside.any() else n.constant(torch.from_numpy(outside))
    return n.call(_mix, x, mix, dim, mask, fill)


def _mix(x: torch.Tensor, matrix: torch.Tensor, dim: int, outside: torch.Tensor | None, fill: float):
    """``matrix`` (out, in) applied along ``dim`` of ``x``, in the matrix's dtype; rows in ``outside``
    set to ``fill``."""
    moved = x.to(matrix.dtype).movedim(dim, -1)
    out = torch.matmul(moved, matrix.t())
    if outside is not None:
        out = torch.where(outside, torch.full_like(out, fill), out)
    return out.movedim(-1, dim).to(x.dtype)


def _optional(n: OnnxNode, i: int, what: str) -> list[float] | None:
    """An optional float/int input: None where omitted or empty (exporters write empty roi/scales)."""
    if not n.has(i):
        return None
    values = n.const(i, what).reshape(-1)
    return None if values.numel() == 0 else [v for v in values.double().tolist()]


def _plan(n: OnnxNode, rank: int, shape: list[int]) -> list[tuple[int, Axis]]:
    """The axes to resize (Resize 11+): from scales or sizes, on ``axes``, with the aspect policy."""
    axes = [a % rank for a in n.at.get("axes", range(rank))]
    roi, scales, sizes = _optional(n, 1, "roi"), _optional(n, 2, "scales"), _optional(n, 3, "sizes")
    if (scales is None) == (sizes is None) or len(scales or sizes or []) != len(axes):
        raise UnsupportedError(f"Resize needs exactly one of scales and sizes, one per axis ({len(axes)})")
    policy = _str(n.at, "keep_aspect_ratio_policy", "stretch")
    if sizes is not None:
        outs = [int(s) for s in sizes]
        factors = [o / shape[a] for o, a in zip(outs, axes, strict=True)]
        if policy in ("not_larger", "not_smaller"):
            scale = min(factors) if policy == "not_larger" else max(factors)
            factors = [scale] * len(axes)
            outs = [int(scale * shape[a] + 0.5) for a in axes]
        elif policy != "stretch":
            raise UnsupportedError(f"keep_aspect_ratio_policy {policy!r} is not supported")
    else:
        factors = list(scales)  # type: ignore[arg-type]
        outs = [int(f * shape[a]) for f, a in zip(factors, axes, strict=True)]
    if min(factors) <= 0:
        raise UnsupportedError(f"Resize scales {factors} must be positive")
    plan = []
    for i, a in enumerate(axes):
        box = None if roi is None else (roi[i], roi[len(axes) + i])
        trivial = box is None or (math.isclose(box[0], 0.0) and math.isclose(box[1], 1.0))
        if not (math.isclose(factors[i], 1.0) and outs[i] == shape[a] and trivial):
            plan.append((a, Axis(shape[a], outs[i], factors[i], box)))
    return plan


def _kernel(n: OnnxNode, transform: str, nearest: str) -> Kernel:
    mode = _str(n.at, "mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedError(f"Resize mode {mode!r} is not supported")
    if transform not in _MODES or nearest not in _NEAREST:
        raise UnsupportedError(f"coordinate_transformation_mode {transform!r} with nearest_mode {nearest!r}")
    antialias = bool(n.at.get("antialias", 0)) and mode != "nearest"
    return Kernel(mode, transform, nearest, float(n.at.get("cubic_coeff_a", -0.75)), antialias,
                  bool(n.at.get("exclude_outside", 0)))  # fmt: skip


@op("Resize", attrs=RESIZE_ATTRS)
def resize(n: OnnxNode) -> Any:
    x = n.val(0)
    if n.opset < 11:  # Resize-10: X and scales, asymmetric coordinates
        return _legacy(n, "Resize scales")
    kernel = _kernel(n, _str(n.at, "coordinate_transformation_mode", "half_pixel"),
                     _str(n.at, "nearest_mode", "round_prefer_floor"))  # fmt: skip
    if kernel.mode != "nearest" and not x.is_floating_point():  # ONNX Runtime rounds these its own way
        raise UnsupportedError(f"Resize {kernel.mode} on {x.dtype} is not supported (floats only)")
    out = n.x(0)
    fill = float(n.at.get("extrapolation_value", 0.0))
    for dim, axis in _plan(n, x.dim(), list(x.shape)):
        if axis.size_out < 1:
            raise UnsupportedError(f"Resize to an empty axis {dim}")
        out = _apply(n, out, dim, axis, kernel, fill)
    return out if out is not n.x(0) else n.call(aten.clone.default, out)


@op("Upsample", attrs=("mode", "scales", "height_scale", "width_scale"))
def upsample(n: OnnxNode) -> Any:
    """Upsample (opsets 7 to 9; deprecated from 10): asymmetric coordinates, scales an attribute before
    opset 9 and an input from 9."""
    return _legacy(n, "Upsample scales")


def _legacy(n: OnnxNode, what: str) -> Any:
    """Upsample and Resize-10: nearest (whole-number scales only: where ONNX Runtime's rounding of
    fractional ones is not the spec's) or linear, both asymmetric."""
    x = n.val(0)
    scales = list(n.at["scales"]) if "scales" in n.at else [float(v) for v in n.const(1, what).reshape(-1)]
    mode = _str(n.at, "mode", "nearest")
    if len(scales) != x.dim() or mode not in ("nearest", "linear"):
        raise UnsupportedError(f"{n.op_type} mode {mode!r} with scales {scales} on a rank-{x.dim()} input")
    if mode == "nearest" and any(s != int(s) or s < 1 for s in scales):
        raise UnsupportedError(
            f"{n.op_type} nearest with scales {scales} is not supported (whole numbers only)"
        )
    kernel = Kernel(mode, "asymmetric", "floor", -0.75, False, False)
    out = n.x(0)
    for dim, (size, s) in enumerate(zip(x.shape, scales, strict=True)):
        if s != 1:
            out = _apply(n, out, dim, Axis(size, int(size * s), s, None), kernel, 0.0)
    return out if out is not n.x(0) else n.call(aten.clone.default, out)
