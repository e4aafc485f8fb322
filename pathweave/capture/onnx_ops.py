"""ONNX op -> torch: one function per ONNX op type, emitting ATen ops where the fast path can use them.

Each converter gets the builder, the ONNX node's input fx nodes (None for omitted optional inputs),
its attributes as a dict, and the constant value of each input where it is an initializer or
Constant (shapes, axes, pads), and returns the fx node(s) of its outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten
Converter = Callable[..., Any]
CONVERTERS: dict[str, Converter] = {}


def op(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register


def _call(g: torch.fx.Graph, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    return g.call_function(target, args, kwargs)


def _pads(pads: list[int] | None, n: int) -> tuple[list[int], list[int] | None]:
    """ONNX [b1, b2, e1, e2] -> torch symmetric padding, or the explicit pad when asymmetric."""
    pads = list(pads or [0] * (2 * n))
    begin, end = pads[:n], pads[n:]
    if begin == end:
        return begin, None
    torch_pad: list[int] = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        torch_pad += [b, e]
    return [0] * n, torch_pad


@op("Conv")
def conv(g, ins, at, consts):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    n = len(at.get("kernel_shape", consts[1].shape[2:] if consts[1] is not None else [1, 1]))
    if at.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID"):
        raise NotImplementedError("Conv auto_pad SAME_*")
    padding, explicit = _pads(at.get("pads"), n)
    if explicit:
        x = _call(g, aten.constant_pad_nd.default, x, explicit, 0.0)
    target = aten.conv2d.default if n == 2 else aten.conv1d.default
    return _call(g, target, x, w, b, at.get("strides", [1] * n), padding, at.get("dilations", [1] * n),
                 at.get("group", 1))  # fmt: skip


def _pool(g, ins, at, kind: str):
    k = at["kernel_shape"]
    padding, explicit = _pads(at.get("pads"), len(k))
    x = ins[0]
    if explicit:
        value = float("-inf") if kind == "max" else 0.0
        x = _call(g, aten.constant_pad_nd.default, x, explicit, value)
    strides, ceil = at.get("strides", [1] * len(k)), bool(at.get("ceil_mode", 0))
    if kind == "max":
        dilations = at.get("dilations", [1] * len(k))
        return _call(g, aten.max_pool2d.default, x, k, strides, padding, dilations, ceil)
    include = bool(at.get("count_include_pad", 0))
    return _call(g, aten.avg_pool2d.default, x, k, strides, padding, ceil, include, None)


@op("MaxPool")
def max_pool(g, ins, at, consts):
    return _pool(g, ins, at, "max")


@op("AveragePool")
def avg_pool(g, ins, at, consts):
    return _pool(g, ins, at, "avg")


@op("GlobalAveragePool")
def global_avg_pool(g, ins, at, consts):
    return _call(g, aten.mean.dim, ins[0], [2, 3], True)


def _axes(ins, at, consts) -> list[int] | None:
    if len(ins) > 1 and ins[1] is not None:
        return [int(a) for a in consts[1].tolist()]
    return at.get("axes")


def _reducer(target: Any) -> Converter:
    def convert(g, ins, at, consts):
        axes = _axes(ins, at, consts)
        keep = bool(at.get("keepdims", 1))
        if axes is None:
            axes = list(range(len(ins[0].meta["val"].shape)))
        return _call(g, target, ins[0], axes, keep)

    return convert


CONVERTERS["ReduceMean"] = _reducer(aten.mean.dim)
CONVERTERS["ReduceSum"] = _reducer(aten.sum.dim_IntList)
CONVERTERS["ReduceMax"] = _reducer(aten.amax.default)

for _name, _target in {
    "Relu": aten.relu.default, "Sigmoid": aten.sigmoid.default, "Tanh": aten.tanh.default,
    "Sqrt": aten.sqrt.default, "Erf": aten.erf.default, "Exp": aten.exp.default, "Neg": aten.neg.default,
    "Log": aten.log.default, "Abs": aten.abs.default, "Reciprocal": aten.reciprocal.default,
}.items():  # fmt: skip
    CONVERTERS[_name] = lambda g, ins, at, consts, _t=_target: _call(g, _t, ins[0])

for _name, _target in {
    "Add": aten.add.Tensor, "Sub": aten.sub.Tensor, "Mul": aten.mul.Tensor, "Div": aten.div.Tensor,
    "Pow": aten.pow.Tensor_Tensor, "MatMul": aten.matmul.default, "Equal": aten.eq.Tensor,
}.items():  # fmt: skip
    CONVERTERS[_name] = lambda g, ins, at, consts, _t=_target: _call(g, _t, ins[0], ins[1])


@op("Where")
def where(g, ins, at, consts):
    return _call(g, aten.where.self, ins[0], ins[1], ins[2])


@op("Gelu")
def gelu(g, ins, at, consts):
    return _call(g, aten.gelu.default, ins[0], approximate=at.get("approximate", b"none").decode())


@op("Softmax")
def softmax(g, ins, at, consts):
    return _call(g, aten._softmax.default, ins[0], at.get("axis", -1), False)


@op("Concat")
def concat(g, ins, at, consts):
    return _call(g, aten.cat.default, list(ins), at["axis"])


@op("Gemm")
def gemm(g, ins, at, consts):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if at.get("transA", 0):
        a = _call(g, aten.t.default, a)
    if alpha == 1.0 and beta == 1.0 and at.get("transB", 0):
        return _call(g, aten.linear.default, a, b, c)  # what the fast path fuses
    if at.get("transB", 0):
        b = _call(g, aten.t.default, b)
    out = _call(g, aten.mm.default, a, b)
    if alpha != 1.0:
        out = _call(g, aten.mul.Tensor, out, alpha)
    if c is not None:
        out = _call(g, aten.add.Tensor, out, _call(g, aten.mul.Tensor, c, beta) if beta != 1.0 else c)
    return out


@op("BatchNormalization")
def batch_norm(g, ins, at, consts):
    x, scale, bias, mean, var = ins[:5]
    return _call(g, aten.batch_norm.default, x, scale, bias, mean, var, False, at.get("momentum", 0.9),
                 at.get("epsilon", 1e-5), False)  # fmt: skip


@op("LayerNormalization")
def layer_norm(g, ins, at, consts):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    shape = list(consts[1].shape) if consts[1] is not None else list(scale.meta["val"].shape)
    return _call(g, aten.layer_norm.default, x, shape, scale, bias, at.get("epsilon", 1e-5))


@op("Transpose")
def transpose(g, ins, at, consts):
    perm = at.get("perm") or list(reversed(range(len(ins[0].meta["val"].shape))))
    return _call(g, aten.permute.default, ins[0], perm)


def _onnx_reshape(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """ONNX Reshape: 0 copies the input's dim (allowzero=0), -1 is inferred."""
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])


@op("Reshape")
def reshape(g, ins, at, consts):
    return _call(g, _onnx_reshape, ins[0], [int(d) for d in consts[1].tolist()])


@op("Flatten")
def flatten(g, ins, at, consts):
    axis = at.get("axis", 1)
    return (
        _call(g, aten.flatten.using_ints, ins[0], axis, -1)
        if axis == 1
        else _call(g, _onnx_flatten, ins[0], axis)
    )


def _onnx_flatten(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.reshape(int(torch.tensor(x.shape[:axis]).prod()) if axis else 1, -1)


def _onnx_unsqueeze(x: torch.Tensor, axes: list[int]) -> torch.Tensor:
    rank = x.dim() + len(axes)
    for a in sorted(a % rank for a in axes):
        x = x.unsqueeze(a)
    return x


@op("Unsqueeze")
def unsqueeze(g, ins, at, consts):
    return _call(g, _onnx_unsqueeze, ins[0], _axes(ins, at, consts))


@op("Squeeze")
def squeeze(g, ins, at, consts):
    axes = _axes(ins, at, consts)
    return _call(g, aten.squeeze.dims, ins[0], axes) if axes else _call(g, aten.squeeze.default, ins[0])


def _onnx_gather(data: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
    """numpy.take along ``axis`` (negative indices count from the end)."""
    axis = axis % data.dim()
    idx = torch.where(indices < 0, indices + data.shape[axis], indices)
    out = data.index_select(axis, idx.reshape(-1))
    return out.reshape(*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :])


@op("Gather")
def gather(g, ins, at, consts):
    return _call(g, _onnx_gather, ins[0], ins[1], at.get("axis", 0))


def _onnx_gather_nd(data: torch.Tensor, indices: torch.Tensor, batch_dims: int) -> torch.Tensor:
    if batch_dims:
        raise NotImplementedError("GatherND with batch_dims")
    k = indices.shape[-1]
    flat = indices.reshape(-1, k)
    out = data[tuple(flat[:, i] for i in range(k))]
    return out.reshape(*indices.shape[:-1], *data.shape[k:])


@op("GatherND")
def gather_nd(g, ins, at, consts):
    return _call(g, _onnx_gather_nd, ins[0], ins[1], at.get("batch_dims", 0))


def _onnx_slice(x: torch.Tensor, starts: list[int], ends: list[int], axes: list[int], steps: list[int]):
    """Python slicing clamps out-of-range starts and ends the way ONNX does for positive steps."""
    index: list[slice] = [slice(None)] * x.dim()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[a] = slice(s, e, st)
    return x[tuple(index)]


@op("Slice")
def slice_(g, ins, at, consts):
    starts, ends = consts[1].tolist(), consts[2].tolist()
    axes = consts[3].tolist() if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = consts[4].tolist() if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if any(st <= 0 for st in steps):
        raise NotImplementedError("Slice with negative steps")
    return _call(g, _onnx_slice, ins[0], starts, ends, axes, steps)


@op("Pad")
def pad(g, ins, at, consts):
    if at.get("mode", b"constant") != b"constant":
        raise NotImplementedError(f"Pad mode {at['mode'].decode()}")
    pads = [int(p) for p in consts[1].tolist()]
    value = float(consts[2].item()) if len(ins) > 2 and ins[2] is not None else 0.0
    n = len(pads) // 2
    torch_pad: list[int] = []
    for b, e in zip(reversed(pads[:n]), reversed(pads[n:]), strict=True):
        torch_pad += [b, e]
    return _call(g, aten.constant_pad_nd.default, ins[0], torch_pad, value)


def split_sizes(ins, at, consts, n_out: int, dim_size: int) -> list[int]:
    if len(ins) > 1 and ins[1] is not None:
        return [int(s) for s in consts[1].tolist()]
    if "split" in at:
        return list(at["split"])
    chunk = -(-dim_size // n_out)
    return [min(chunk, dim_size - i * chunk) for i in range(n_out)]


@op("Cast")
def cast(g, ins, at, consts):
    from onnx import helper

    dtype = getattr(torch, str(helper.tensor_dtype_to_np_dtype(at["to"])))
    return _call(g, aten._to_copy.default, ins[0], dtype=dtype)


@op("Identity", "Dropout")
def identity(g, ins, at, consts):
    return ins[0]


@op("Expand")
def expand(g, ins, at, consts):
    return _call(g, _onnx_expand, ins[0], [int(d) for d in consts[1].tolist()])


def _onnx_expand(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    return x * torch.ones(shape, dtype=x.dtype)  # numpy-style broadcast, where 1s keep x's dims
