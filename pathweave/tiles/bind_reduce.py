"""Kernel binders of ``native/tile_reduce.c`` (slots in ``native/tile_kernels.h``): reductions over any
dims (sum, mean, amax, amin, var, std), group norm and roll. Shapes and strides are padded at the end to
4 dims, as the tile graph pads a tile's box.
"""

from __future__ import annotations

import numpy as np

from pathweave.analysis.ops import op_name
from pathweave.tiles.abi import (
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
    SR_GROUPS,
    SR_KIND,
    SR_RSHAPE,
    SR_RSTRIDE,
)
from pathweave.tiles.maps import group_count, roll_shifts
from pathweave.tiles.rows import LayerRow, NoKernel, dense_view, out_shape, pad4

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
