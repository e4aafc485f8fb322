"""Kernel binders of ``native/tile_reduce.c`` (slots in ``native/tile_kernels.h``): reductions over any
dims (sum, mean, amax, amin, var, std), group norm, roll, and the comparisons and logic ops that write
bool (one byte per value). Shapes and strides are padded at the end to 4 dims, as the tile graph pads a
tile's box.
"""

from __future__ import annotations

import numpy as np
import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.tiles.abi import (
    COMPARISONS,
    DTYPES,
    K_COMPARE,
    K_GROUPNORM,
    K_REDUCE,
    K_ROLL,
    REDUCTIONS,
    S_BIAS,
    S_OP,
    S_SCALAR,
    S_W,
    S_X,
    S_XSTRIDE,
    S_Y,
    S_YSTRIDE,
    SR_DTYPE,
    SR_GROUPS,
    SR_KIND,
    SR_RSHAPE,
    SR_RSTRIDE,
)
from pathweave.tiles.maps import group_count, roll_shifts
from pathweave.tiles.rows import LayerRow, NoKernel, View, dense_view, out_shape, pad4

#: what the comparisons read: float32 or bool
COMPARED = (np.float32, np.bool_)
#: the ops that read bool only (of a number type they are bitwise)
BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "__and__", "__or__", "__xor__"}

#: dims per reduction the kernel loops over (after merging those that step as one)
MAX_REDUCED = 4


def _double(value: float) -> np.int64:
    return np.float64(value).view(np.int64)


def reduced_dims(shape: tuple[int, ...], strides: tuple[int, ...], dims: list[int]) -> list[tuple[int, int]]:
    """The reduced dims as (size, stride), outermost first: size-1 dims dropped, and a dim merged into the
    one before it (by stride) where together they step as one (mean over H and W of NCHW: one run)."""
    order = sorted(((shape[d], strides[d]) for d in dims if shape[d] != 1), key=lambda p: -p[1])
    merged: list[tuple[int, int]] = []
    for n, s in order:
        if merged and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    return merged


def _correction(name: str, args: dict) -> float:
    """var / std's correction: ``correction`` (None: 1) or ``unbiased`` (True: 1); 0 for the others."""
    if name not in ("var", "std"):
        return 0.0
    if "correction" in args:
        return 1.0 if args["correction"] is None else float(args["correction"])
    return 1.0 if args.get("unbiased", True) else 0.0


def reduce(t: LayerRow) -> int:
    """sum, mean, amax, amin, var and std over any dims of x (keepdim or not; float32 in and out)."""
    name, args, row = op_name(t.node), t.args, t.row
    if args.get("dtype") is not None:
        raise NoKernel("a dtype argument")
    x = t.view(args["self"])
    out = out_shape(t.node)
    nd = len(x.shape)
    dims = args.get("dim")
    dims = sorted({d % nd for d in (range(nd) if dims is None or dims == [] else dims)}) if nd else []
    if len(out) > 4:
        raise NoKernel(f"a {len(out)}-D output")
    runs = reduced_dims(x.shape, x.strides, dims)
    if len(runs) > MAX_REDUCED:
        raise NoKernel(f"{len(runs)} reduced dims that do not merge into {MAX_REDUCED}")
    keepdim = bool(args.get("keepdim")) and nd > 0
    strides = [0] * len(out)  # x's strides over the output's dims (0 for a kept reduced dim)
    kept = [d for d in range(nd) if d not in dims]
    for k, d in enumerate(kept):
        strides[d if keepdim else k] = x.strides[d]
    runs = [(1, 0)] * (MAX_REDUCED - len(runs)) + runs
    row[S_OP], row[S_X], row[SR_KIND] = K_REDUCE, x.address, REDUCTIONS[name]
    row[S_XSTRIDE : S_XSTRIDE + 4] = pad4(strides, 0)
    row[SR_RSHAPE : SR_RSHAPE + 4] = [n for n, _ in runs]
    row[SR_RSTRIDE : SR_RSTRIDE + 4] = [s for _, s in runs]
    row[S_SCALAR] = _double(_correction(name, args))
    return 0


def group_norm(t: LayerRow) -> int:
    """group_norm and native_group_norm of an (N, C, ...) tensor of 2 to 4 dims, weight and bias optional."""
    args, row = t.args, t.row
    x = t.view(args["input"])
    out = out_shape(t.node)
    groups = group_count(args)
    if not 2 <= len(out) <= 4 or x.shape != out:
        raise NoKernel(f"input of shape {x.shape} for an output of shape {out}")
    if groups < 1 or out[1] % groups:
        raise NoKernel(f"{out[1]} channels in {groups} groups")
    row[S_OP], row[S_X], row[SR_GROUPS] = K_GROUPNORM, x.address, groups
    row[S_XSTRIDE : S_XSTRIDE + 4] = pad4(list(x.strides), 1)
    for slot, key in ((S_W, "weight"), (S_BIAS, "bias")):
        if args.get(key) is not None:
            p = dense_view(t.view(args[key]), key)
            if p.shape != (out[1],):
                raise NoKernel(f"{key} of shape {p.shape}")
            row[slot] = p.address
    row[S_SCALAR] = _double(float(args["eps"]))
    return 0


def roll(t: LayerRow) -> int:
    """torch.roll along given dims (of up to 4); the roll of the flattened tensor (no dims) stays in ATen."""
    x = t.view(t.args["self"])
    out = out_shape(t.node)
    if len(out) > 4 or x.shape != out:
        raise NoKernel(f"a {len(out)}-D roll")
    shifts = roll_shifts(t.args, out)
    if shifts is None:
        raise NoKernel("a roll of the flattened tensor (no dims)")
    t.row[S_OP], t.row[S_X] = K_ROLL, x.address
    t.row[S_XSTRIDE : S_XSTRIDE + 4] = pad4(list(x.strides), 0)
    t.row[SR_RSTRIDE : SR_RSTRIDE + 4] = pad4(shifts, 0)
    return 0


def _over(v: View, out: tuple[int, ...]) -> list[int]:
    """``v``'s strides over the output's dims (right-aligned; 0 where it broadcasts), padded to 4."""
    lead = len(out) - len(v.shape)
    return pad4([0] * lead + [s if n != 1 else 0 for s, n in zip(v.strides, v.shape, strict=True)], 0)


def compare(t: LayerRow) -> int:
    """eq ne lt le gt ge and logical_and / or / not of float32 or bool tensors, isnan, the bitwise ops of
    bool (``BITWISE``), into bool; the second operand a tensor of the first's type or a number."""
    name, args, row = op_name(t.node), t.args, t.row
    out = out_shape(t.node)
    if len(out) > 4:
        raise NoKernel(f"a {len(out)}-D output")
    a, b = args.get("self", args.get("input")), args.get("other")
    x = t.view(a, COMPARED)
    if name in BITWISE and x.base.dtype.type is not np.bool_:
        raise NoKernel(f"{name} of {x.base.dtype}: bitwise on bool only")
    row[S_OP], row[SR_KIND], row[S_X] = K_COMPARE, COMPARISONS[name], x.address
    row[SR_DTYPE] = DTYPES[x.base.dtype.type]
    row[S_XSTRIDE : S_XSTRIDE + 4] = _over(x, out)
    if name in ("logical_not", "bitwise_not"):
        return 0
    if name == "isnan":  # x != x
        b = a
    if isinstance(b, torch.fx.Node):
        y = t.view(b, (x.base.dtype.type,))
        row[S_Y] = y.address
        row[S_YSTRIDE : S_YSTRIDE + 4] = _over(y, out)
    elif isinstance(b, (int, float)):  # bool too
        row[S_SCALAR] = _double(float(b))  # rounded to float32 by the kernel, as eager's comparison does
    else:
        raise NoKernel(f"second operand {b!r}")
    return 0
