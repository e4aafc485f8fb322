"""Eager's source positions for 2-D resizing (``upsample_nearest2d``, ``upsample_bilinear2d``), made once
in float32 as ATen's CPU kernels make them, so that the tiles' range maps and the native kernels
(``native/tile_resize.c``) read exactly the rows and columns eager reads.

Nearest: ``src = min(floor(o * scale), in - 1)`` with ``scale = float32(1 / factor)`` when a factor is
given, else ``float32(in) / out``; an output of the input's size copies, one of twice its size reads
``o >> 1`` (ATen's ``nearest_idx``). Bilinear: ATen's ``area_pixel_compute_source_index`` (half-pixel
centres clamped at 0, rounded once as by a fused multiply-add, or ``o * (in - 1) / (out - 1)`` with
``align_corners``), the index floored and
clamped, the second index one further unless at the edge, the weight clamped into [0, 1]; an output of
the input's size copies (weights 1 and 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.fx

from pathweave.frontend.shapes import tensor_specs

#: the ops this module serves, by their ATen names
RESIZES = ("upsample_nearest2d", "upsample_bilinear2d")


@dataclass(frozen=True)
class Resize:
    """One 2-D resize: the input's and the output's [H, W], the scale factors eager uses (None: from the
    sizes), ``align_corners`` (bilinear only) and the mode."""

    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    scales: tuple[float | None, float | None]
    align_corners: bool
    bilinear: bool


def resize_of(node: torch.fx.Node, args: dict[str, Any]) -> Resize:
    """The resize a node computes, from either overload (``.vec``: a size or factors; ``.default``:
    a size and a factor per dim)."""
    x = args.get("input", args.get("self"))
    if "scale_factors" in args:
        factors = args["scale_factors"]
        scales = (None, None) if factors is None else tuple(float(f) for f in (list(factors) * 2)[:2])
    else:
        scales = (args.get("scales_h"), args.get("scales_w"))
    x_shape, out_shape = tensor_specs(x)[0].shape, tensor_specs(node)[0].shape
    return Resize(
        (x_shape[-2], x_shape[-1]), (out_shape[-2], out_shape[-1]),
        tuple(None if s is None else float(s) for s in scales),  # type: ignore[arg-type]
        bool(args.get("align_corners") or False), "bilinear" in str(node.target),
    )  # fmt: skip


def _f32(v: float) -> np.float32:
    return np.float32(v)


def nearest_index(n: int, m: int, scale: float | None) -> np.ndarray:
    """The source index of each of ``m`` outputs along a dim of ``n`` inputs (int64)."""
    o = np.arange(m, dtype=np.int64)
    if m == n:
        return o
    if m == 2 * n:
        return o >> 1
    ratio = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(n) / _f32(m)
    return np.minimum(np.floor(o.astype(np.float32) * ratio).astype(np.int64), n - 1)


def linear_tables(n: int, m: int, align: bool, scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per output along a dim: its two source indices ([m, 2] int64) and their weights ([m, 2] float32)."""
    o = np.arange(m, dtype=np.int64)
    if m == n:
        return np.stack([o, o], 1), np.tile(np.array([1.0, 0.0], np.float32), (m, 1))
    if align:
        ratio = _f32(n - 1) / _f32(m - 1) if m > 1 else _f32(0.0)
        real = ratio * o.astype(np.float32)
    else:
        ratio = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(n) / _f32(m)
        # one rounding, as the fused multiply-add ATen's AVX2 / AVX-512 builds compile this to (the float64
        # product of two float32 is exact)
        centre = (o.astype(np.float32) + _f32(0.5)).astype(np.float64)
        real = np.maximum((np.float64(ratio) * centre - 0.5).astype(np.float32), _f32(0.0))
    i0 = np.minimum(np.floor(real).astype(np.int64), n - 1)
    l1 = np.minimum(np.maximum(real - i0.astype(np.float32), _f32(0.0)), _f32(1.0)).astype(np.float32)
    i1 = i0 + (i0 < n - 1)
    return np.stack([i0, i1], 1), np.stack([_f32(1.0) - l1, l1], 1).astype(np.float32)


def source_index(r: Resize, dim: int) -> np.ndarray:
    """[m, 2] int64: the first and last source index each output of spatial dim ``dim`` (0: H) reads."""
    n, m, scale = r.in_hw[dim], r.out_hw[dim], r.scales[dim]
    if r.bilinear:
        return linear_tables(n, m, r.align_corners, scale)[0]
    idx = nearest_index(n, m, scale)
    return np.stack([idx, idx], 1)


def kernel_tables(r: Resize) -> tuple[np.ndarray, np.ndarray | None]:
    """The tables ``native/tile_resize.c`` reads: int64 source indices (nearest: one per output row, then
    one per output column; bilinear: two each) and, for bilinear, their float32 weights laid out alike."""
    dims = list(zip(r.in_hw, r.out_hw, r.scales, strict=True))
    if not r.bilinear:
        index = np.concatenate([nearest_index(n, m, s) for n, m, s in dims])
        return np.ascontiguousarray(index, np.int64), None
    tables = [linear_tables(n, m, r.align_corners, s) for n, m, s in dims]
    index = np.concatenate([idx.reshape(-1) for idx, _ in tables])
    weights = np.concatenate([lam.reshape(-1) for _, lam in tables])
    return np.ascontiguousarray(index, np.int64), np.ascontiguousarray(weights, np.float32)
