"""ONNX op -> torch: one function per ONNX op type, emitting ATen ops where the fast path can use them.

Each converter gets an ``OnnxNode``: the ONNX node's input fx nodes (None for omitted optional
inputs), its attributes, the constant value of each input where it is an initializer or folded
from constants (shapes, axes, pads), the opset, and which outputs the model uses. It returns the
fx node of its output, or a tuple for several. A converter either implements the op exactly for the
attributes, dtypes and opset given, or raises ``UnsupportedError`` saying what it lacks; attributes a
converter does not list are refused before it runs. Convolutions, pools and normalizations live
here; element-wise, reduction and shape ops in ``onnx_ops_more`` and ``onnx_ops_shape``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx

from pathweave.errors import UnsupportedError

aten = torch.ops.aten
Converter = Callable[["OnnxNode"], Any]
#: op type -> (converter, the attributes it implements)
CONVERTERS: dict[str, tuple[Converter, frozenset[str]]] = {}

#: ONNX TensorProto elem_type -> torch dtype, for the types pathweave computes with
ONNX_TO_TORCH: dict[int, torch.dtype] = {
    1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16, 6: torch.int32,
    7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64, 12: torch.uint32,
    13: torch.uint64, 16: torch.bfloat16, 17: torch.float8_e4m3fn, 18: torch.float8_e4m3fnuz,
    19: torch.float8_e5m2, 20: torch.float8_e5m2fnuz,
}  # fmt: skip
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


def onnx_type_name(elem_type: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"type {elem_type}"


def torch_dtype(elem_type: int, what: str) -> torch.dtype:
    """The torch dtype of an ONNX elem_type, or ``UnsupportedError`` naming ``what`` holds it."""
    if elem_type not in ONNX_TO_TORCH:
        raise UnsupportedError(
            f"{what} has ONNX type {onnx_type_name(elem_type)}, which pathweave does not compute with "
            "(supported: float64/32/16, bfloat16, float8, signed and unsigned integers, bool)"
        )
    return ONNX_TO_TORCH[elem_type]


def op(*names: str, attrs: tuple[str, ...] = ()) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = (fn, frozenset(attrs))
        return fn

    return register


@dataclass
class OnnxNode:
    """What a converter sees of one ONNX node."""

    g: torch.fx.Graph
    op_type: str
    ins: list[torch.fx.Node | None]
    at: dict[str, Any]
    consts: list[torch.Tensor | None]
    opset: int
    outputs: list[bool]  # which outputs the model uses
    add_constant: Callable[[torch.Tensor], torch.fx.Node]  # a buffer of the module, read by get_attr
    #: the example value of a computed input, where the graph may be specialised on it (else None)
    specialise: Callable[[torch.fx.Node, str], torch.Tensor | None] = lambda node, use: None

    def has(self, i: int) -> bool:
        return i < len(self.ins) and self.ins[i] is not None

    def x(self, i: int = 0) -> torch.fx.Node:
        if not self.has(i):
            raise UnsupportedError(f"input {i} is missing, and {self.op_type} needs it")
        return self.ins[i]  # type: ignore[return-value]

    def val(self, i: int = 0) -> torch.Tensor:
        """The example value of input ``i`` (its shape and dtype are fixed by the example inputs)."""
        return self.x(i).meta["val"]

    def const(self, i: int, what: str) -> torch.Tensor:
        """Input ``i``'s value: a constant, or computed from small graph inputs the caller gave (the graph
        is then specialised on their values, checked on every call)."""
        value = self.consts[i] if i < len(self.consts) else None
        if value is None and self.has(i):
            value = self.specialise(self.ins[i], f"{self.op_type}'s {what}")  # type: ignore[arg-type]
        if value is None:
            raise UnsupportedError(
                f"needs a constant {what} (input {i}), but it is computed from the data in the graph; fold "
                "it into an initializer (e.g. with onnxsim), export with static shapes, or, where it is a "
                "small graph input, pass its value as an example input"
            )
        return value

    def constant(self, value: torch.Tensor) -> torch.fx.Node:
        return self.add_constant(value)

    def ints(self, i: int, what: str) -> list[int]:
        return [int(v) for v in self.const(i, what).reshape(-1).tolist()]

    def call(self, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        return self.g.call_function(target, args, kwargs)

    def cast(self, x: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
        return self.call(aten._to_copy.default, x, dtype=dtype)

    def rank(self, i: int = 0) -> int:
        return self.val(i).dim()

    def only_outputs(self, n: int) -> None:
        if any(self.outputs[n:]):
            raise UnsupportedError(f"{self.op_type} output {n} is not supported; use output 0 only")

    def refuse_dtypes(self, *dtypes: torch.dtype, i: int = 0) -> None:
        if self.val(i).dtype in dtypes:
            raise UnsupportedError(f"{self.op_type} on {self.val(i).dtype} is not supported")

    def floats_only(self, i: int = 0) -> None:
        dtype = self.val(i).dtype
        if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise UnsupportedError(f"{self.op_type} on {dtype} is not supported; it takes floats")


def _str(at: dict, name: str, default: str) -> str:
    value = at.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _torch_pad(begin: list[int], end: list[int]) -> list[int]:
    """ONNX per-axis begin/end pads -> constant_pad_nd's last-axis-first list."""
    out: list[int] = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        out += [b, e]
    return out


@dataclass(frozen=True)
class Window:
    """A convolution or pool window: kernel, strides, dilations and explicit begin/end pads."""

    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    begin: list[int]
    end: list[int]

    def effective(self, i: int) -> int:
        return (self.kernel[i] - 1) * self.dilations[i] + 1


def window(n: OnnxNode, kernel: list[int]) -> Window:
    """Resolve auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER) to explicit pads on the input's shape."""
    k = len(kernel)
    strides, dilations = list(n.at.get("strides", [1] * k)), list(n.at.get("dilations", [1] * k))
    pads = list(n.at.get("pads", [0] * (2 * k)))
    if len(strides) != k or len(dilations) != k or len(pads) != 2 * k:
        raise UnsupportedError(f"strides, dilations or pads do not match the {k}-d kernel")
    auto = _str(n.at, "auto_pad", "NOTSET")
    begin, end = pads[:k], pads[k:]
    if auto == "VALID":
        begin, end = [0] * k, [0] * k
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        size = n.val(0).shape[2:]
        for i in range(k):
            out = -(-size[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size[i])
            small = total // 2
            begin[i], end[i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto != "NOTSET":
        raise UnsupportedError(f"auto_pad {auto!r} is not supported")
    if min(strides + dilations + kernel) < 1 or min(begin + end) < 0:
        raise UnsupportedError("strides, dilations and kernel must be positive and pads not negative")
    return Window(list(kernel), strides, dilations, begin, end)


@op("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def conv(n: OnnxNode) -> Any:
    n.floats_only()
    return conv_call(n, n.x(0), n.x(1), n.ins[2] if n.has(2) else None)


def conv_call(
    n: OnnxNode, x: torch.fx.Node, w: torch.fx.Node, bias: torch.fx.Node | None, weight_input: int = 1
) -> torch.fx.Node:
    """The convolution of ``x`` by ``w`` (shaped as input ``weight_input``) with the node's window
    attributes (shared with ConvInteger and QLinearConv)."""
    shape = n.val(weight_input).shape
    kernel = list(n.at.get("kernel_shape", shape[2:]))
    if kernel != list(shape[2:]) or len(kernel) not in (1, 2, 3):
        raise UnsupportedError(f"kernel_shape {kernel} with weights of shape {list(shape)}")
    win = window(n, kernel)
    padding = win.begin
    if win.begin != win.end:
        x = n.call(aten.constant_pad_nd.default, x, _torch_pad(win.begin, win.end), 0.0)
        padding = [0] * len(kernel)
    target = {1: aten.conv1d.default, 2: aten.conv2d.default, 3: aten.conv3d.default}[len(kernel)]
    return n.call(target, x, w, bias, win.strides, padding, win.dilations, n.at.get("group", 1))


@op("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                             "output_shape", "pads", "strides"))  # fmt: skip
def conv_transpose(n: OnnxNode) -> Any:
    """The full transposed convolution (no padding), then cropped by the pads and extended by
    output_padding (positions no input reaches: the bias alone), so any pads and output_padding work."""
    n.floats_only()
    w = n.val(1)
    kernel = list(n.at.get("kernel_shape", w.shape[2:]))
    k = len(kernel)
    if kernel != list(w.shape[2:]) or k not in (1, 2, 3):
        raise UnsupportedError(f"kernel_shape {kernel} with weights of shape {list(w.shape)}")
    begin, end, strides, dilations = _transpose_pads(n, kernel)
    target = {1: aten.conv_transpose1d.default, 2: aten.conv_transpose2d.input,
              3: aten.conv_transpose3d.input}[k]  # fmt: skip
    group = n.at.get("group", 1)
    full = n.call(target, n.x(0), n.x(1), None, strides, [0] * k, [0] * k, group, dilations)
    out = n.call(aten.constant_pad_nd.default, full, _torch_pad([-b for b in begin], [-e for e in end]), 0.0)
    if n.has(2):
        out = n.call(aten.add.Tensor, out, n.call(aten.reshape.default, n.x(2), [-1] + [1] * k))
    return out


def _transpose_pads(n: OnnxNode, kernel: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Begin and end crops of the full output (an end crop below 0 is output_padding), strides,
    dilations: from pads, or from output_shape or auto_pad as the spec derives them."""
    k, size = len(kernel), n.val(0).shape[2:]
    strides, dilations = list(n.at.get("strides", [1] * k)), list(n.at.get("dilations", [1] * k))
    extra = list(n.at.get("output_padding", [0] * k))
    pads = list(n.at.get("pads", [0] * (2 * k)))
    if len(strides) != k or len(dilations) != k or len(extra) != k or len(pads) != 2 * k:
        raise UnsupportedError(f"strides, dilations, output_padding or pads do not match the {k}-d kernel")
    if min(strides + dilations + kernel) < 1:
        raise UnsupportedError("strides, dilations and kernel must be positive")
    full = [strides[i] * (size[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    auto = _str(n.at, "auto_pad", "NOTSET")
    shape = list(n.at.get("output_shape", []))
    if shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = shape[-k:] if shape else [size[i] * strides[i] for i in range(k)]
        total = [full[i] - want[i] for i in range(k)]
        upper = auto == "SAME_UPPER"
        pads = [t // 2 if upper else t - t // 2 for t in total] + [
            t - t // 2 if upper else t // 2 for t in total
        ]
    elif auto == "VALID":
        pads = [0] * (2 * k)
    elif auto != "NOTSET":
        raise UnsupportedError(f"auto_pad {auto!r} is not supported")
    end = [pads[k + i] - extra[i] for i in range(k)]
    return pads[:k], end, strides, dilations


POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


def _pool_out(size: int, win: Window, i: int, ceil: bool) -> int:
    """ONNX pool output size; with ceil_mode a last window starting in the end padding is dropped."""
    span = size + win.begin[i] + win.end[i] - win.effective(i)
    out = (-(-span // win.strides[i]) if ceil else span // win.strides[i]) + 1
    if ceil and (out - 1) * win.strides[i] >= size + win.begin[i]:
        out -= 1
    return out


def _pool_window(n: OnnxNode) -> tuple[Window, bool]:
    n.floats_only()
    kernel = list(n.at["kernel_shape"]) if "kernel_shape" in n.at else None
    if kernel is None or len(kernel) not in (1, 2, 3) or len(kernel) != n.rank() - 2:
        raise UnsupportedError(f"kernel_shape {kernel} on a {n.rank()}-d input")
    return window(n, kernel), bool(n.at.get("ceil_mode", 0))


def _padded(n: OnnxNode, x: torch.fx.Node, win: Window, ceil: bool, value: float) -> torch.fx.Node:
    """``x`` padded explicitly, plus at the end what ceil_mode's last window needs."""
    size = n.val(0).shape[2:]
    end = list(win.end)
    for i in range(len(win.kernel)):
        need = (_pool_out(size[i], win, i, ceil) - 1) * win.strides[i] + win.effective(i)
        end[i] = need - size[i] - win.begin[i]
    return n.call(aten.constant_pad_nd.default, x, _torch_pad(win.begin, end), value)


@op("MaxPool", attrs=(*POOL_ATTRS, "storage_order"))
def max_pool(n: OnnxNode) -> Any:
    win, ceil = _pool_window(n)
    k = len(win.kernel)
    target = {1: aten.max_pool1d.default, 2: aten.max_pool2d.default, 3: aten.max_pool3d.default}[k]
    direct = win.begin == win.end and all(2 * win.begin[i] <= win.effective(i) for i in range(k))
    if len(n.outputs) > 1 and n.outputs[1]:
        if not direct or k != 2:
            raise UnsupportedError("MaxPool's Indices output only for 2-d pools with symmetric pads")
        both = n.call(aten.max_pool2d_with_indices.default, n.x(0), win.kernel, win.strides, win.begin,
                      win.dilations, ceil)  # fmt: skip
        height, width = n.val(0).shape[2:]
        index = n.call(_flat_indices, n.call(operator.getitem, both, 1), height, width,
                       bool(n.at.get("storage_order", 0)))  # fmt: skip
        return n.call(operator.getitem, both, 0), index
    if direct:
        return n.call(target, n.x(0), win.kernel, win.strides, win.begin, win.dilations, ceil)
    x = _padded(n, n.x(0), win, ceil, float("-inf"))
    return n.call(target, x, win.kernel, win.strides, [0] * k, win.dilations, False)


def _flat_indices(index: torch.Tensor, height: int, width: int, column_major: bool) -> torch.Tensor:
    """torch's indices count within each (n, c) plane, row by row; ONNX's over the whole tensor, and
    column by column within a plane for storage_order 1."""
    if column_major:
        index = (index % width) * height + index // width
    planes = torch.arange(index.shape[0] * index.shape[1]).reshape(index.shape[0], index.shape[1], 1, 1)
    return index + planes * (height * width)


@op("AveragePool", attrs=(*POOL_ATTRS, "count_include_pad"))
def avg_pool(n: OnnxNode) -> Any:
    win, ceil = _pool_window(n)
    include = bool(n.at.get("count_include_pad", 0))
    k = len(win.kernel)
    if (
        win.dilations == [1] * k
        and win.begin == win.end
        and all(2 * b <= kk for b, kk in zip(win.begin, win.kernel, strict=True))
    ):
        if k == 1:
            return n.call(aten.avg_pool1d.default, n.x(0), win.kernel, win.strides, win.begin, ceil, include)
        target = aten.avg_pool2d.default if k == 2 else aten.avg_pool3d.default
        return n.call(target, n.x(0), win.kernel, win.strides, win.begin, ceil, include, None)
    # general case: window sums by a depthwise convolution of ones, divided by the count of the
    # positions each window covers (the input, plus the explicit pads when count_include_pad)
    x, shape = n.val(0), n.val(0).shape
    sums = _window_sum(n, _padded(n, n.x(0), win, ceil, 0.0), shape[1], win, x.dtype)
    mask = torch.ones((1, 1, *shape[2:]), dtype=x.dtype)
    if include:
        mask = torch.nn.functional.pad(mask, _torch_pad(win.begin, win.end), value=1.0)
        win = Window(win.kernel, win.strides, win.dilations, [0] * k, [0] * k)
    counts = _count_windows(mask, win, ceil, n)
    return n.call(aten.div.Tensor, sums, n.constant(counts))


@op("LpPool", attrs=(*POOL_ATTRS, "p"))
def lp_pool(n: OnnxNode) -> Any:
    """(sum of |x|^p over each window)^(1/p), as a window sum of ones over |x|^p."""
    win, ceil = _pool_window(n)
    p, x = float(n.at.get("p", 2)), n.val(0)
    powered = n.call(aten.pow.Tensor_Scalar, n.call(aten.abs.default, n.x(0)), p)
    sums = _window_sum(n, _padded(n, powered, win, ceil, 0.0), x.shape[1], win, x.dtype)
    return n.call(aten.pow.Tensor_Scalar, sums, 1.0 / p)


def _window_sum(n: OnnxNode, x: torch.fx.Node, channels: int, win: Window, dtype: torch.dtype):
    k = len(win.kernel)
    ones = torch.ones((channels, 1, *win.kernel), dtype=dtype)
    target = {1: aten.conv1d.default, 2: aten.conv2d.default, 3: aten.conv3d.default}[k]
    return n.call(target, x, n.constant(ones), None, win.strides, [0] * k, win.dilations, channels)


def _count_windows(mask: torch.Tensor, win: Window, ceil: bool, n: OnnxNode) -> torch.Tensor:
    """How many positions of ``mask`` (1 = counted) each pool window covers; shapes are static."""
    k = len(win.kernel)
    size = mask.shape[2:]
    end = []
    for i in range(k):
        need = (_pool_out(size[i], win, i, ceil) - 1) * win.strides[i] + win.effective(i)
        end.append(need - size[i] - win.begin[i])
    padded = torch.nn.functional.pad(mask, _torch_pad(win.begin, end), value=0.0)
    ones = torch.ones((1, 1, *win.kernel), dtype=mask.dtype)
    conv = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}[k]
    return conv(padded, ones, None, win.strides, 0, win.dilations)


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(n: OnnxNode) -> Any:
    n.floats_only()
    dims = list(range(2, n.rank()))
    if n.op_type == "GlobalAveragePool":
        return n.call(aten.mean.dim, n.x(0), dims, True)
    return n.call(aten.amax.default, n.x(0), dims, True)


@op(
    "BatchNormalization",
    attrs=("epsilon", "momentum", "training_mode", "is_test", "spatial", "consumed_inputs"),
)
def batch_norm(n: OnnxNode) -> Any:
    n.floats_only()
    if n.at.get("training_mode", 0) or n.at.get("spatial", 1) != 1:
        raise UnsupportedError("training_mode=1 and spatial=0 are not supported; export in eval mode")
    n.only_outputs(1)
    x, scale, bias, mean, var = (n.x(i) for i in range(5))
    return n.call(aten.batch_norm.default, x, scale, bias, mean, var, False, n.at.get("momentum", 0.9),
                  n.at.get("epsilon", 1e-5), False)  # fmt: skip


@op("InstanceNormalization", attrs=("epsilon",))
def instance_norm(n: OnnxNode) -> Any:
    n.floats_only()
    return n.call(aten.instance_norm.default, n.x(0), n.x(1), n.x(2), None, None, True, 0.0,
                  n.at.get("epsilon", 1e-5), False)  # fmt: skip


def _stash(n: OnnxNode) -> torch.dtype:
    if n.at.get("stash_type", 1) != 1:
        raise UnsupportedError(f"stash_type {n.at['stash_type']} is not supported (only 1, float32)")
    return torch.float32


@op("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def layer_norm(n: OnnxNode) -> Any:
    n.floats_only()
    x, dtype, stash = n.val(0), n.val(0).dtype, _stash(n)
    axis = n.at.get("axis", -1) % x.dim()
    shape = list(x.shape[axis:])
    xs = n.cast(n.x(0), stash) if dtype != stash else n.x(0)
    normed = n.call(aten.native_layer_norm.default, xs, shape, None, None, n.at.get("epsilon", 1e-5))
    y = n.call(operator.getitem, normed, 0)
    y = n.cast(y, dtype) if dtype != stash else y
    y = n.call(aten.mul.Tensor, y, n.x(1))
    if n.has(2):
        y = n.call(aten.add.Tensor, y, n.x(2))
    return y, n.call(operator.getitem, normed, 1), n.call(operator.getitem, normed, 2)


@op("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def rms_norm(n: OnnxNode) -> Any:
    n.floats_only()
    x, stash = n.val(0), _stash(n)
    axis = n.at.get("axis", -1) % x.dim()
    return n.call(
        _onnx_rms_norm, n.x(0), n.x(1), list(range(axis, x.dim())), n.at.get("epsilon", 1e-5), stash
    )


def _onnx_rms_norm(x: torch.Tensor, scale: torch.Tensor, dims: list[int], eps: float, stash: torch.dtype):
    xs = x.to(stash)
    y = xs * torch.rsqrt((xs * xs).mean(dims, keepdim=True) + eps)
    return y.to(x.dtype) * scale


@op("LRN", attrs=("alpha", "beta", "bias", "size"))
def lrn(n: OnnxNode) -> Any:
    n.floats_only()
    size = int(n.at["size"])
    return n.call(
        _onnx_lrn, n.x(0), size, n.at.get("alpha", 1e-4), n.at.get("beta", 0.75), n.at.get("bias", 1.0)
    )


def _onnx_lrn(x: torch.Tensor, size: int, alpha: float, beta: float, bias: float) -> torch.Tensor:
    """ONNX sums channels c - floor((size-1)/2) .. c + ceil((size-1)/2) (torch centres even sizes the
    other way)."""
    sq = (x * x).unsqueeze(1)
    front, back = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = torch.nn.functional.pad(sq, [0, 0] * (x.dim() - 2) + [front, back])
    sums = sq.unfold(2, size, 1).sum(-1).squeeze(1)
    return x / (bias + alpha / size * sums) ** beta


@op("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def gemm(n: OnnxNode) -> Any:
    n.floats_only()
    a, b = n.x(0), n.x(1)
    c = n.ins[2] if n.has(2) else None
    alpha, beta = n.at.get("alpha", 1.0), n.at.get("beta", 1.0)
    if n.at.get("transA", 0):
        a = n.call(aten.t.default, a)
    if alpha == 1.0 and beta == 1.0 and n.at.get("transB", 0) and (c is None or n.val(2).dim() == 1):
        return n.call(aten.linear.default, a, b, c)  # what the fast path fuses
    if n.at.get("transB", 0):
        b = n.call(aten.t.default, b)
    out = n.call(aten.mm.default, a, b)
    if alpha != 1.0:
        out = n.call(aten.mul.Tensor, out, alpha)
    if c is not None:
        out = n.call(aten.add.Tensor, out, n.call(aten.mul.Tensor, c, beta) if beta != 1.0 else c)
    return out


@op("MatMul")
def matmul(n: OnnxNode) -> Any:
    n.refuse_dtypes(torch.bool, torch.uint16, torch.uint32, torch.uint64, *FLOAT8)
    return n.call(aten.matmul.default, n.x(0), n.x(1))


def numpy_to_torch(array: np.ndarray, what: str) -> torch.Tensor:
    """A numpy array (ml_dtypes' bfloat16 and float8 included) as a torch tensor of the same type."""
    name = array.dtype.name
    views = {"bfloat16": (np.uint16, torch.bfloat16)}
    views.update({str(d).removeprefix("torch."): (np.uint8, d) for d in FLOAT8})
    array = np.array(array, copy=True, order="C")  # ascontiguousarray would make 0-d arrays 1-d
    if name in views:
        raw, dtype = views[name]
        return torch.from_numpy(array.view(raw)).view(dtype)
    try:
        return torch.from_numpy(array)
    except TypeError as exc:
        raise UnsupportedError(f"{what} has dtype {name}, which pathweave does not compute with") from exc


def tensor_from_proto(proto: Any, numpy_helper: Any, what: str = "a constant") -> torch.Tensor:
    torch_dtype(proto.data_type, what)
    return numpy_to_torch(numpy_helper.to_array(proto), what)
