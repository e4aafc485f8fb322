"""ONNX shape, indexing and layout ops -> torch (see ``onnx_ops``).

Shapes are static (fixed by the example inputs), so Shape and Size are constants, and shape-like
operands (Reshape's shape, Slice's starts, Pad's pads...) must be constants too: a value computed
from data would change the graph with every call.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, _str, _torch_pad, aten, op, tensor_from_proto


@op("Shape", attrs=("start", "end"))
def shape(n: OnnxNode) -> Any:
    dims = list(n.val(0).shape)
    r = len(dims)
    start, end = n.at.get("start", 0), n.at.get("end", r)
    start, end = (
        min(max(start + r if start < 0 else start, 0), r),
        min(max(end + r if end < 0 else end, 0), r),
    )
    return n.constant(torch.tensor(dims[start:end], dtype=torch.int64))


@op("Size")
def size(n: OnnxNode) -> Any:
    return n.constant(torch.tensor(n.val(0).numel(), dtype=torch.int64))


@op("ConstantOfShape", attrs=("value",))
def constant_of_shape(n: OnnxNode) -> Any:
    from onnx import numpy_helper

    dims = n.ints(0, "shape")
    value = tensor_from_proto(n.at["value"], numpy_helper) if "value" in n.at else torch.zeros(1)
    # the one element as a 0-d tensor: it expands to any shape, a 0-d one too (an empty ``shape`` input,
    # as TorchScript exports of attention masks write)
    return n.constant(value.reshape(-1)[0].expand(dims).clone())


@op("Range")
def range_(n: OnnxNode) -> Any:
    start, limit, delta = (n.const(i, "start, limit and delta") for i in range(3))
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    values = (
        start + torch.arange(count, dtype=torch.float64 if start.is_floating_point() else torch.int64) * delta
    )
    return n.constant(values.to(start.dtype))


@op("Reshape", attrs=("allowzero",))
def reshape(n: OnnxNode) -> Any:
    dims, x = n.ints(1, "shape"), n.val(0)
    if not n.at.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    known = math.prod(d for d in dims if d != -1)
    if dims.count(-1) > 1 or (-1 not in dims and known != x.numel()):
        raise UnsupportedError(f"cannot reshape {list(x.shape)} to {dims}")
    if -1 in dims:
        if known == 0 or x.numel() % known:
            raise UnsupportedError(f"cannot reshape {list(x.shape)} to {dims}")
        dims[dims.index(-1)] = x.numel() // known
    return n.call(aten.reshape.default, n.x(0), dims)


@op("Flatten", attrs=("axis",))
def flatten(n: OnnxNode) -> Any:
    x = n.val(0)
    axis = n.at.get("axis", 1)
    axis = axis + x.dim() if axis < 0 else axis
    return n.call(aten.reshape.default, n.x(0), [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


def _axes(n: OnnxNode) -> list[int] | None:
    if n.has(1):
        return n.ints(1, "axes")
    return list(n.at["axes"]) if "axes" in n.at else None


@op("Unsqueeze", attrs=("axes",))
def unsqueeze(n: OnnxNode) -> Any:
    axes = _axes(n) or []
    rank = n.rank() + len(axes)
    norm = sorted(a % rank for a in axes)
    if len(set(norm)) != len(norm) or not axes:
        raise UnsupportedError(f"Unsqueeze axes {axes} are empty or repeated")
    dims = list(n.val(0).shape)
    for a in norm:
        dims.insert(a, 1)
    return n.call(aten.reshape.default, n.x(0), dims)


@op("Squeeze", attrs=("axes",))
def squeeze(n: OnnxNode) -> Any:
    x = n.val(0)
    axes = _axes(n)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = [a % max(x.dim(), 1) for a in axes]
    if any(x.shape[a] != 1 for a in axes):
        raise UnsupportedError(f"Squeeze axes {axes} of a tensor of shape {list(x.shape)} are not all 1")
    return n.call(aten.reshape.default, n.x(0), [d for i, d in enumerate(x.shape) if i not in axes])


@op("Transpose", attrs=("perm",))
def transpose(n: OnnxNode) -> Any:
    perm = n.at.get("perm") or list(reversed(range(n.rank())))
    return n.call(aten.permute.default, n.x(0), list(perm))


@op("Concat", attrs=("axis",))
def concat(n: OnnxNode) -> Any:
    ins = [n.x(i) for i in range(len(n.ins))]
    if len({n.val(i).dtype for i in range(len(ins))}) != 1:
        raise UnsupportedError("Concat inputs of different dtypes")
    return n.call(aten.cat.default, ins, n.at["axis"])


@op("Split", attrs=("axis", "split", "num_outputs"))
def split(n: OnnxNode) -> Any:
    axis = n.at.get("axis", 0) % max(n.rank(), 1)
    dim, count = n.val(0).shape[axis], len(n.outputs)
    if n.has(1):
        sizes = n.ints(1, "split")
    elif "split" in n.at:
        sizes = list(n.at["split"])
    else:
        chunk = -(-dim // n.at.get("num_outputs", count))
        sizes = [min(chunk, dim - i * chunk) for i in range(count)]
    if sum(sizes) != dim or len(sizes) != count or min(sizes) < 0:
        raise UnsupportedError(f"split sizes {sizes} do not cut a dimension of {dim} into {count}")
    parts = n.call(aten.split_with_sizes.default, n.x(0), sizes, axis)
    return tuple(n.call(operator.getitem, parts, i) for i in range(count))


@op("Slice", attrs=("starts", "ends", "axes"))
def slice_(n: OnnxNode) -> Any:
    """Opset 10+ takes starts, ends, axes, steps as inputs, earlier opsets as attributes; Python's
    slice.indices clamps the way ONNX does, for either sign of step."""
    x = n.val(0)
    if n.opset < 10:
        starts, ends = list(n.at["starts"]), list(n.at["ends"])
        axes = list(n.at.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
        axes = n.ints(3, "axes") if n.has(3) else list(range(len(starts)))
        steps = n.ints(4, "steps") if n.has(4) else [1] * len(starts)
    out = n.x(0)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = a % x.dim()
        if st == 0:
            raise UnsupportedError("Slice step 0")
        begin, stop, step = slice(s, e, st).indices(x.shape[a])
        if step > 0:
            out = n.call(aten.slice.Tensor, out, a, begin, max(stop, begin), step)
        else:
            index = torch.arange(begin, stop, step, dtype=torch.int64)
            out = n.call(aten.index_select.default, out, a, n.constant(index))
    return n.call(aten.clone.default, out)


@op("Pad", attrs=("mode", "pads", "value"))
def pad(n: OnnxNode) -> Any:
    """constant, edge, reflect and wrap; pads are an attribute before opset 11; axes (opset 18)."""
    x, mode = n.val(0), _str(n.at, "mode", "constant")
    if n.opset < 11:
        pads, value = list(n.at["pads"]), n.at.get("value", 0.0)
    else:
        pads = n.ints(1, "pads")
        value = n.consts[2].reshape(-1)[0].item() if n.has(2) and n.consts[2] is not None else 0
    axes = [a % x.dim() for a in n.ints(3, "axes")] if n.has(3) else list(range(x.dim()))
    k = len(axes)
    if len(pads) != 2 * k:
        raise UnsupportedError(f"{len(pads)} pads for {k} axes")
    begin, end = [0] * x.dim(), [0] * x.dim()
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[k + i]
    if mode == "constant" and n.has(2) and n.consts[2] is None:  # the value is computed: pad, then fill
        padded = n.call(aten.constant_pad_nd.default, n.x(0), _torch_pad(begin, end), 0)
        inside = torch.nn.functional.pad(torch.ones(x.shape, dtype=torch.bool), _torch_pad(begin, end))
        fill = n.call(aten.reshape.default, n.x(2), [])
        return n.call(aten.where.self, n.constant(inside), padded, fill)
    if mode == "constant":
        return n.call(aten.constant_pad_nd.default, n.x(0), _torch_pad(begin, end), value)
    if mode not in ("edge", "reflect", "wrap"):
        raise UnsupportedError(f"Pad mode {mode!r} is not supported")
    out = n.x(0)
    for a in range(x.dim()):
        if begin[a] or end[a]:
            index = _pad_index(x.shape[a], begin[a], end[a], mode)
            out = n.call(aten.index_select.default, out, a, n.constant(index))
    return out


def _pad_index(size: int, begin: int, end: int, mode: str) -> torch.Tensor:
    pos = torch.arange(-begin, size + end)
    if mode == "edge":
        return pos.clamp(0, size - 1)
    if mode == "wrap":
        return pos % size
    if size == 1:
        return torch.zeros_like(pos)
    period = 2 * (size - 1)
    pos = pos % period
    return torch.where(pos >= size, period - pos, pos)


def _indices(n: OnnxNode, i: int, dim: int) -> torch.fx.Node:
    """Index input ``i`` with negative entries counted from the end of a dimension of ``dim``."""
    if n.val(i).dtype not in (torch.int32, torch.int64):
        raise UnsupportedError(f"indices of dtype {n.val(i).dtype}")
    return n.call(_wrap, n.x(i), dim)


def _wrap(idx: torch.Tensor, dim: int) -> torch.Tensor:
    idx = idx.to(torch.int64)
    return torch.where(idx < 0, idx + dim, idx)


@op("Gather", attrs=("axis",))
def gather(n: OnnxNode) -> Any:
    x = n.val(0)
    axis = n.at.get("axis", 0) % x.dim()
    idx = _indices(n, 1, x.shape[axis])
    return n.call(_onnx_gather, n.x(0), idx, axis)


def _onnx_gather(data: torch.Tensor, idx: torch.Tensor, axis: int) -> torch.Tensor:
    out = data.index_select(axis, idx.reshape(-1))
    return out.reshape([*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :]])


@op("GatherElements", attrs=("axis",))
def gather_elements(n: OnnxNode) -> Any:
    x = n.val(0)
    axis = n.at.get("axis", 0) % x.dim()
    return n.call(aten.gather.default, n.x(0), axis, _indices(n, 1, x.shape[axis]))


@op("GatherND", attrs=("batch_dims",))
def gather_nd(n: OnnxNode) -> Any:
    if n.at.get("batch_dims", 0):
        raise UnsupportedError("GatherND with batch_dims is not supported")
    data, k = n.val(0), n.val(1).shape[-1]
    if k > data.dim() or n.val(1).dtype != torch.int64:
        raise UnsupportedError(f"GatherND indices of shape {list(n.val(1).shape)} into rank {data.dim()}")
    return n.call(_onnx_gather_nd, n.x(0), n.x(1))


def _onnx_gather_nd(data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    k = indices.shape[-1]
    flat = indices.reshape(-1, k)
    index = tuple(torch.where(flat[:, i] < 0, flat[:, i] + data.shape[i], flat[:, i]) for i in range(k))
    return data[index].reshape([*indices.shape[:-1], *data.shape[k:]])


@op("Expand")
def expand(n: OnnxNode) -> Any:
    dims = n.ints(1, "shape")
    try:
        out = torch.broadcast_shapes(tuple(n.val(0).shape), tuple(dims))
    except RuntimeError as exc:
        raise UnsupportedError(f"cannot expand {list(n.val(0).shape)} to {dims}") from exc
    x = n.x(0)
    if n.rank() < len(out):
        x = n.call(aten.reshape.default, x, [1] * (len(out) - n.rank()) + list(n.val(0).shape))
    return n.call(aten.clone.default, n.call(aten.expand.default, x, list(out)))


@op("Tile")
def tile(n: OnnxNode) -> Any:
    repeats = n.ints(1, "repeats")
    if len(repeats) != n.rank() or min(repeats, default=0) < 0:
        raise UnsupportedError(f"Tile repeats {repeats} for a rank-{n.rank()} input")
    return n.call(aten.repeat.default, n.x(0), repeats)


@op("Trilu", attrs=("upper",))
def trilu(n: OnnxNode) -> Any:
    k = n.ints(1, "k")[0] if n.has(1) else 0
    target = aten.triu.default if n.at.get("upper", 1) else aten.tril.default
    return n.call(target, n.x(0), k)


@op("DepthToSpace", "SpaceToDepth", attrs=("blocksize", "mode"))
def depth_to_space(n: OnnxNode) -> Any:
    b, (batch, c, h, w) = n.at["blocksize"], n.val(0).shape
    crd = _str(n.at, "mode", "DCR") == "CRD"
    if n.op_type == "SpaceToDepth":
        x = n.call(aten.reshape.default, n.x(0), [batch, c, h // b, b, w // b, b])
        x = n.call(aten.permute.default, x, [0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4])
        return n.call(aten.reshape.default, x, [batch, c * b * b, h // b, w // b])
    if not crd:
        x = n.call(aten.reshape.default, n.x(0), [batch, b, b, c // (b * b), h, w])
        x = n.call(aten.permute.default, x, [0, 3, 4, 1, 5, 2])
    else:
        x = n.call(aten.reshape.default, n.x(0), [batch, c // (b * b), b, b, h, w])
        x = n.call(aten.permute.default, x, [0, 1, 4, 2, 5, 3])
    return n.call(aten.reshape.default, x, [batch, c // (b * b), h * b, w * b])
