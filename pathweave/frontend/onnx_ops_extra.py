"""ONNX indexing, scan, normalization and window ops -> torch (see ``onnx_ops``): TopK, the Scatter
family, OneHot, CumProd, EyeLike, LpNormalization, GroupNormalization, MeanVarianceNormalization, Det
and the Hann, Hamming and Blackman windows (constants: their size is fixed at capture).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, _str, aten, op, torch_dtype
from pathweave.frontend.onnx_ops_more import NO_ARITH

_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@op("TopK", attrs=("axis", "largest", "sorted"))
def topk(n: OnnxNode) -> Any:
    """A stable sort, so that of equal values the lower index comes first, as ONNX requires."""
    n.refuse_dtypes(*NO_ARITH)
    x = n.val(0)
    axis = n.at.get("axis", -1) % max(x.dim(), 1)
    k = n.ints(1, "K")[0]
    if not 0 <= k <= x.shape[axis]:
        raise UnsupportedError(f"TopK K={k} on an axis of {x.shape[axis]}")
    out = n.call(_topk, n.x(0), k, axis, bool(n.at.get("largest", 1)))
    return n.call(operator.getitem, out, 0), n.call(operator.getitem, out, 1)


def _topk(x: torch.Tensor, k: int, axis: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
    return values.narrow(axis, 0, k), indices.narrow(axis, 0, k)


def _reduction(n: OnnxNode) -> str:
    reduction = _str(n.at, "reduction", "none")
    if reduction != "none" and reduction not in _REDUCE:
        raise UnsupportedError(f"reduction {reduction!r} is not supported")
    return reduction


@op("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def scatter_elements(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    if n.val(1).dtype not in (torch.int32, torch.int64):
        raise UnsupportedError(f"indices of dtype {n.val(1).dtype}")
    axis = n.at.get("axis", 0) % max(n.rank(), 1)
    return n.call(_scatter_elements, n.x(0), n.x(1), n.x(2), axis, _reduction(n))


def _scatter_elements(data: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor, axis: int, reduction: str):
    idx = idx.to(torch.int64)
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    if reduction == "none":
        return data.scatter(axis, idx, upd)
    return data.scatter_reduce(axis, idx, upd, _REDUCE[reduction], include_self=True)


@op("ScatterND", attrs=("reduction",))
def scatter_nd(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    if n.val(1).dtype != torch.int64 or n.val(1).shape[-1] > n.rank(0):
        raise UnsupportedError(f"ScatterND indices of shape {list(n.val(1).shape)} into rank {n.rank(0)}")
    return n.call(_scatter_nd, n.x(0), n.x(1), n.x(2), _reduction(n))


def _scatter_nd(data: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, reduction: str):
    """Each index tuple (the last axis of ``indices``) picks a slice of ``data``: flatten the indexed
    axes into one, scatter rows."""
    k = indices.shape[-1]
    dims = torch.tensor(data.shape[:k], dtype=torch.int64)
    idx = indices.reshape(-1, k)
    idx = torch.where(idx < 0, idx + dims, idx)
    strides = torch.ones(k, dtype=torch.int64)
    for i in range(k - 2, -1, -1):
        strides[i] = strides[i + 1] * data.shape[i + 1]
    rows = (idx * strides).sum(-1)
    flat = data.reshape(-1, *data.shape[k:]).clone()
    upd = updates.reshape(-1, *data.shape[k:])
    if reduction == "none":
        flat[rows] = upd
    else:
        index = rows.reshape(-1, *([1] * (upd.dim() - 1))).expand_as(upd)
        flat = flat.scatter_reduce(0, index, upd, _REDUCE[reduction], include_self=True)
    return flat.reshape(data.shape)


@op("OneHot", attrs=("axis",))
def one_hot(n: OnnxNode) -> Any:
    depth = n.const(1, "depth").reshape(-1)[0].item()
    if depth != int(depth) or depth < 1:
        raise UnsupportedError(f"OneHot depth {depth} is not a positive whole number")
    rank = n.rank(0) + 1
    axis = n.at.get("axis", -1) % rank
    return n.call(_one_hot, n.x(0), int(depth), n.x(2), axis)


def _one_hot(indices: torch.Tensor, depth: int, values: torch.Tensor, axis: int) -> torch.Tensor:
    idx = indices.to(torch.int64)  # float indices are cast, truncating
    idx = torch.where(idx < 0, idx + depth, idx)  # from -depth; anything else out of range is all off
    hot = torch.arange(depth).reshape(-1, *([1] * idx.dim())) == idx.unsqueeze(0)
    return torch.where(hot, values[1], values[0]).movedim(0, axis)


@op("CumProd", attrs=("exclusive", "reverse"))
def cumprod(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    axis = n.ints(1, "axis")[0] % max(n.rank(), 1)
    return n.call(_cumprod, n.x(0), axis, bool(n.at.get("exclusive", 0)), bool(n.at.get("reverse", 0)))


def _cumprod(x: torch.Tensor, axis: int, exclusive: bool, reverse: bool) -> torch.Tensor:
    y = x.flip(axis) if reverse else x
    out = torch.cumprod(y, axis, dtype=x.dtype)
    if exclusive:
        first = torch.ones_like(out.narrow(axis, 0, 1))
        out = torch.cat([first, out.narrow(axis, 0, out.shape[axis] - 1)], axis)
    return out.flip(axis) if reverse else out


@op("EyeLike", attrs=("dtype", "k"))
def eye_like(n: OnnxNode) -> Any:
    x = n.val(0)
    if x.dim() != 2:
        raise UnsupportedError(f"EyeLike of a rank-{x.dim()} input (2 only)")
    dtype = torch_dtype(n.at["dtype"], "EyeLike's dtype") if "dtype" in n.at else x.dtype
    k = n.at.get("k", 0)
    rows, cols = torch.arange(x.shape[0]).reshape(-1, 1), torch.arange(x.shape[1]).reshape(1, -1)
    return n.constant((cols - rows == k).to(dtype))


@op("LpNormalization", attrs=("axis", "p"))
def lp_normalization(n: OnnxNode) -> Any:
    n.floats_only()
    p = n.at.get("p", 2)
    if p not in (1, 2):
        raise UnsupportedError(f"LpNormalization p={p} (1 or 2 only)")
    return n.call(_lp_normalize, n.x(0), p, n.at.get("axis", -1) % max(n.rank(), 1))


def _lp_normalize(x: torch.Tensor, p: int, axis: int) -> torch.Tensor:
    """x / its Lp norm along ``axis``; 0 where the norm is 0."""
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else torch.sqrt((x * x).sum(axis, keepdim=True))
    return torch.where(norm == 0, torch.zeros_like(x), x / norm)


@op("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def group_norm(n: OnnxNode) -> Any:
    """Scale and bias are per channel from opset 21, per group before."""
    n.floats_only()
    if n.at.get("stash_type", 1) != 1:
        raise UnsupportedError(f"stash_type {n.at['stash_type']} is not supported (only 1, float32)")
    groups, channels = int(n.at["num_groups"]), n.val(0).shape[1]
    if channels % groups:
        raise UnsupportedError(f"{channels} channels in {groups} groups")
    per_group = n.val(1).shape[0] == groups and groups != channels
    return n.call(_group_norm, n.x(0), n.x(1), n.x(2), groups, n.at.get("epsilon", 1e-5), per_group)


def _group_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, groups: int, eps: float,
                per_group: bool) -> torch.Tensor:  # fmt: skip
    xs = x.to(torch.float32).reshape(x.shape[0], groups, -1)
    mean = xs.mean(-1, keepdim=True)
    var = ((xs - mean) ** 2).mean(-1, keepdim=True)
    y = ((xs - mean) / torch.sqrt(var + eps)).reshape(x.shape).to(x.dtype)
    if per_group:
        scale, bias = (t.repeat_interleave(x.shape[1] // groups) for t in (scale, bias))
    shape = [1, -1] + [1] * (x.dim() - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


@op("MeanVarianceNormalization", attrs=("axes",))
def mean_variance_normalization(n: OnnxNode) -> Any:
    n.floats_only()
    axes = sorted(a % n.rank() for a in n.at.get("axes", [0, 2, 3]))
    return n.call(_mvn, n.x(0), axes)


def _mvn(x: torch.Tensor, axes: list[int]) -> torch.Tensor:
    mean = x.mean(axes, keepdim=True)
    var = (x * x).mean(axes, keepdim=True) - mean * mean
    return (x - mean) / (torch.sqrt(var) + 1e-9)


@op("Det")
def det(n: OnnxNode) -> Any:
    n.floats_only()
    return n.call(aten.linalg_det.default, n.x(0))


@op("HannWindow", "HammingWindow", "BlackmanWindow", attrs=("output_datatype", "periodic"))
def window(n: OnnxNode) -> Any:
    size = n.ints(0, "size")[0]
    if size < 1:
        raise UnsupportedError(f"{n.op_type} of size {size}")
    periodic = bool(n.at.get("periodic", 1))
    dtype = torch_dtype(n.at.get("output_datatype", 1), f"{n.op_type}'s output_datatype")
    make = {"HannWindow": torch.hann_window, "BlackmanWindow": torch.blackman_window,
            "HammingWindow": lambda s, periodic, dtype: torch.hamming_window(
                s, periodic, alpha=25 / 46, beta=21 / 46, dtype=dtype)}[n.op_type]  # fmt: skip
    return n.constant(make(size, periodic=periodic, dtype=torch.float64).to(dtype))


@op("CenterCropPad", attrs=("axes",))
def center_crop_pad(n: OnnxNode) -> Any:
    """Each listed axis cropped (from (size - target) // 2) or zero-padded (as much before as the half
    of the difference, rounded down) to the target length."""
    x = n.val(0)
    target = n.ints(1, "shape")
    axes = [a % x.dim() for a in n.at.get("axes", range(x.dim()))]
    if len(target) != len(axes):
        raise UnsupportedError(f"CenterCropPad: {len(target)} lengths for {len(axes)} axes")
    begin, end = [0] * x.dim(), [0] * x.dim()
    for a, t in zip(axes, target, strict=True):
        diff = t - x.shape[a]  # > 0: pad; < 0: crop (negative pads)
        begin[a] = diff // 2 if diff >= 0 else -((-diff) // 2)
        end[a] = diff - begin[a]
    pads: list[int] = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        pads += [b, e]
    return n.call(aten.constant_pad_nd.default, n.x(0), pads, 0)


@op("ReverseSequence", attrs=("batch_axis", "time_axis"))
def reverse_sequence(n: OnnxNode) -> Any:
    batch, time = n.at.get("batch_axis", 1), n.at.get("time_axis", 0)
    if {batch, time} != {0, 1}:
        raise UnsupportedError(f"ReverseSequence with batch_axis {batch} and time_axis {time}")
    return n.call(_reverse_sequence, n.x(0), n.x(1), batch, time)


def _reverse_sequence(x: torch.Tensor, lens: torch.Tensor, batch: int, time: int) -> torch.Tensor:
    """Per batch entry b, the first lens[b] time steps reversed, the rest kept."""
    steps = torch.arange(x.shape[time]).reshape(-1, 1)  # (time, 1)
    lens = lens.to(torch.int64).reshape(1, -1)  # (1, batch)
    index = torch.where(steps < lens, lens - 1 - steps, steps)  # (time, batch)
    if batch == 0:
        index = index.t()
    index = index.reshape(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(time, index)


@op("RotaryEmbedding", attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def rotary_embedding(n: OnnxNode) -> Any:
    n.floats_only()
    x = n.val(0)
    if x.dim() == 3 and not n.at.get("num_heads"):
        raise UnsupportedError("RotaryEmbedding on a 3-d input needs num_heads")
    position = n.x(3) if n.has(3) else None
    return n.call(_rotary, n.x(0), n.x(1), n.x(2), position, bool(n.at.get("interleaved", 0)),
                  int(n.at.get("rotary_embedding_dim", 0)), int(n.at.get("num_heads", 0)))  # fmt: skip


def _rotary(x, cos, sin, position, interleaved: bool, dim: int, heads: int) -> torch.Tensor:
    """x as (batch, seq, heads, head_size); the first ``dim`` features of each head rotated in pairs
    (adjacent when ``interleaved``, else the two halves) by the cached angles."""
    shape = x.shape
    y = x.transpose(1, 2) if x.dim() == 4 else x.reshape(shape[0], shape[1], heads, -1)
    dim = dim or y.shape[3]
    if position is not None:
        cos, sin = cos[position], sin[position]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    rot, keep = y[..., :dim], y[..., dim:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else rot.chunk(2, -1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rot = torch.stack([real, imag], -1).reshape(rot.shape) if interleaved else torch.cat([real, imag], -1)
    out = torch.cat([rot, keep], -1)
    return out.transpose(1, 2) if x.dim() == 4 else out.reshape(shape)


@op("BitCast", attrs=("to",))
def bitcast(n: OnnxNode) -> Any:
    """The same bits read as another type of the same width."""
    src = n.val(0).dtype
    dst = torch_dtype(n.at["to"], "BitCast's target")
    if src.itemsize != dst.itemsize:
        raise UnsupportedError(f"BitCast from {src} to {dst}: the widths differ")
    return n.call(_bitcast, n.x(0), dst)


def _bitcast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if x.dtype == torch.bool or dtype == torch.bool:  # bool views need the byte detour
        return x.view(torch.uint8).view(dtype) if x.dtype == torch.bool else x.view(torch.uint8).bool()
    return x.contiguous().view(dtype)


_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest", "cubic": "bicubic",
               "bicubic": "bicubic"}  # fmt: skip


@op("GridSample", attrs=("align_corners", "mode", "padding_mode"))
def grid_sample(n: OnnxNode) -> Any:
    """torch's grid_sample computes the same sampling (opset 16 names bilinear/bicubic, 20 linear/cubic);
    volumes (5-d) take nearest and linear only, as torch does."""
    n.floats_only()
    mode = _GRID_MODES.get(_str(n.at, "mode", "linear" if n.opset >= 20 else "bilinear"))
    padding = _str(n.at, "padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection") or n.rank(0) not in (4, 5):
        raise UnsupportedError(f"GridSample mode {n.at.get('mode')!r}, padding {padding!r}, rank {n.rank(0)}")
    if n.rank(0) == 5 and mode == "bicubic":
        raise UnsupportedError("GridSample cubic on volumes is not supported")
    return n.call(torch.nn.functional.grid_sample, n.x(0), n.x(1), mode, padding,
                  bool(n.at.get("align_corners", 0)))  # fmt: skip


@op("AffineGrid", attrs=("align_corners",))
def affine_grid(n: OnnxNode) -> Any:
    n.floats_only()
    size = n.ints(1, "size")
    return n.call(torch.nn.functional.affine_grid, n.x(0), size, bool(n.at.get("align_corners", 0)))


@op("Col2Im", attrs=("dilations", "pads", "strides"))
def col2im(n: OnnxNode) -> Any:
    """2-d images only, as torch's fold."""
    image, block = n.ints(1, "image_shape"), n.ints(2, "block_shape")
    if len(image) != 2:
        raise UnsupportedError(f"Col2Im of a {len(image)}-d image (2-d only)")
    pads = list(n.at.get("pads", [0, 0, 0, 0]))
    if pads[:2] != pads[2:]:
        raise UnsupportedError(f"Col2Im with asymmetric pads {pads}")
    return n.call(torch.nn.functional.fold, n.x(0), image, block, list(n.at.get("dilations", [1, 1])),
                  pads[:2], list(n.at.get("strides", [1, 1])))  # fmt: skip
