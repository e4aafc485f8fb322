"""ONNX element-wise, comparison, logic, reduction, cast and softmax ops -> torch (see ``onnx_ops``).

ONNX keeps its operands' dtype where torch would promote: integer Div truncates toward zero, Pow
keeps the base's type, ReduceSum and CumSum of int32 stay int32. Converters say so explicitly.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import CONVERTERS, FLOAT8, OnnxNode, _str, aten, op, torch_dtype
from pathweave.frontend.onnx_unsigned import UNSIGNED, bit_shift, uint_binary, uint_not

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
#: dtypes torch's CPU kernels lack for most arithmetic (they raise, or wrap silently)
NO_ARITH = (torch.uint16, torch.uint32, torch.uint64, torch.bool, *FLOAT8)


def _same_dtype(n: OnnxNode, count: int | None = None) -> torch.dtype:
    present = [i for i in range(len(n.ins) if count is None else count) if n.has(i)]
    dtypes = {n.val(i).dtype for i in present}
    if len(dtypes) != 1:
        raise UnsupportedError(f"{n.op_type} inputs of different dtypes {sorted(map(str, dtypes))}")
    return dtypes.pop()


def _unary(target: Any, floats_only: bool = True) -> Any:
    def convert(n: OnnxNode) -> Any:
        if floats_only:
            n.floats_only()
        else:
            n.refuse_dtypes(*NO_ARITH)
        return n.call(target, n.x(0))

    return convert


def _hardswish(x: torch.Tensor) -> torch.Tensor:
    """ONNX's x * max(0, min(1, x / 6 + 1/2)): torch's x * relu6(x + 3) / 6 overflows near float's max."""
    return x * torch.clamp(x / 6 + 0.5, 0, 1)


def _sign(x: torch.Tensor) -> torch.Tensor:
    """ONNX's (and numpy's) sign keeps NaN; torch's gives 0."""
    return torch.where(torch.isnan(x), x, torch.sign(x)) if x.is_floating_point() else torch.sign(x)


for _name, _target in {
    "Sigmoid": aten.sigmoid.default, "Tanh": aten.tanh.default, "Sqrt": aten.sqrt.default,
    "Erf": aten.erf.default, "Exp": aten.exp.default, "Log": aten.log.default,
    "Reciprocal": aten.reciprocal.default, "Ceil": aten.ceil.default, "Floor": aten.floor.default,
    "Round": aten.round.default, "Sin": aten.sin.default, "Cos": aten.cos.default,
    "Tan": aten.tan.default, "Asin": aten.asin.default, "Acos": aten.acos.default,
    "Atan": aten.atan.default, "Sinh": aten.sinh.default, "Cosh": aten.cosh.default,
    "Asinh": aten.asinh.default, "Acosh": aten.acosh.default, "Atanh": aten.atanh.default,
    "Softsign": torch.nn.functional.softsign, "HardSwish": _hardswish,
    "Mish": aten.mish.default,
}.items():  # fmt: skip
    CONVERTERS[_name] = (_unary(_target), frozenset())
for _name, _target in {"Relu": aten.relu.default, "Neg": aten.neg.default, "Abs": aten.abs.default,
                       "Sign": _sign}.items():  # fmt: skip
    CONVERTERS[_name] = (_unary(_target, floats_only=False), frozenset())


@op("Softplus")
def softplus(n: OnnxNode) -> Any:
    n.floats_only()
    return n.call(_softplus, n.x(0))


def _softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.log(torch.exp(x) + 1)  # no threshold: ONNX's exact formula (inf for large x)


@op("Elu", "Celu", "LeakyRelu", "Selu", "ThresholdedRelu", "HardSigmoid", "Shrink", "Swish",
    attrs=("alpha", "beta", "gamma", "bias", "lambd"))  # fmt: skip
def activation(n: OnnxNode) -> Any:
    n.floats_only()
    at = n.at
    args = {
        "Elu": (at.get("alpha", 1.0),), "Celu": (at.get("alpha", 1.0),),
        "LeakyRelu": (at.get("alpha", 0.01),),
        "Selu": (at.get("alpha", 1.67326319217681884765625), at.get("gamma", 1.05070102214813232421875)),
        "ThresholdedRelu": (at.get("alpha", 1.0),),
        "HardSigmoid": (at.get("alpha", 0.2), at.get("beta", 0.5)),
        "Shrink": (at.get("bias", 0.0), at.get("lambd", 0.5)), "Swish": (at.get("alpha", 1.0),),
    }[n.op_type]  # fmt: skip
    return n.call(_ACTIVATIONS[n.op_type], n.x(0), *args)


_ACTIVATIONS = {
    "Elu": lambda x, a: torch.where(x < 0, a * (torch.exp(x) - 1), x),
    "Celu": lambda x, a: torch.clamp(x, min=0) + torch.clamp(a * (torch.exp(x / a) - 1), max=0),
    "LeakyRelu": lambda x, a: torch.where(x < 0, a * x, x),
    "Selu": lambda x, a, g: torch.where(x <= 0, g * (a * torch.exp(x) - a), g * x),
    "ThresholdedRelu": lambda x, a: torch.where(x > a, x, torch.zeros_like(x)),
    "HardSigmoid": lambda x, a, b: torch.clamp(a * x + b, 0, 1),
    "Shrink": lambda x, b, lam: torch.where(
        x < -lam, x + b, torch.where(x > lam, x - b, torch.zeros_like(x))
    ),
    "Swish": lambda x, a: x * torch.sigmoid(a * x),
}


@op("Gelu", attrs=("approximate",))
def gelu(n: OnnxNode) -> Any:
    n.floats_only()
    approximate = _str(n.at, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise UnsupportedError(f"Gelu approximate={approximate!r} is not supported (none or tanh)")
    return n.call(aten.gelu.default, n.x(0), approximate=approximate)


@op("SwiGLU", attrs=("alpha",))
def swiglu(n: OnnxNode) -> Any:
    """Swish of the gate A times the value B (opset 28); the shapes must match, no broadcasting."""
    n.floats_only()
    if n.val(0).shape != n.val(1).shape or n.val(0).dtype != n.val(1).dtype:
        raise UnsupportedError("SwiGLU takes a gate and a value of one shape and dtype")
    return n.call(_swiglu, n.x(0), n.x(1), float(n.at.get("alpha", 1.0)))


def _swiglu(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    return a * torch.sigmoid(alpha * a) * b


@op("PRelu")
def prelu(n: OnnxNode) -> Any:
    n.floats_only()
    return n.call(
        aten.where.self, n.call(aten.lt.Scalar, n.x(0), 0), n.call(aten.mul.Tensor, n.x(0), n.x(1)), n.x(0)
    )


@op("IsNaN")
def isnan(n: OnnxNode) -> Any:
    n.floats_only()
    return n.call(aten.isnan.default, n.x(0))


@op("IsInf", attrs=("detect_negative", "detect_positive"))
def isinf(n: OnnxNode) -> Any:
    n.floats_only()
    neg, pos = n.at.get("detect_negative", 1), n.at.get("detect_positive", 1)
    target = aten.isinf.default if neg and pos else aten.isneginf.default if neg else aten.isposinf.default
    if not neg and not pos:
        return n.call(aten.zeros_like.default, n.x(0), dtype=torch.bool)
    return n.call(target, n.x(0))


for _name, _target in {"Add": aten.add.Tensor, "Sub": aten.sub.Tensor, "Mul": aten.mul.Tensor}.items():
    CONVERTERS[_name] = (lambda n, _t=_target: _binary(n, _t), frozenset())


def _binary(n: OnnxNode, target: Any) -> torch.fx.Node:
    dtype = _same_dtype(n)
    if dtype in UNSIGNED:
        return n.call(uint_binary, n.x(0), n.x(1), n.op_type.lower())
    if dtype in NO_ARITH:
        raise UnsupportedError(f"{n.op_type} on {dtype} is not supported")
    return n.call(target, n.x(0), n.x(1))


@op("Div")
def div(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    if dtype in UNSIGNED:
        return n.call(uint_binary, n.x(0), n.x(1), "div")
    if dtype in NO_ARITH:
        raise UnsupportedError(f"Div on {dtype} is not supported")
    if dtype.is_floating_point:
        return n.call(aten.div.Tensor, n.x(0), n.x(1))
    return n.call(_int_div, n.x(0), n.x(1))


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ONNX's integer Div truncates; the most negative integer over -1 traps the CPU (SIGFPE kills the
    process, in eager PyTorch and ONNX Runtime alike), so -1 divides by negation (which wraps)."""
    minus_one = b == -1
    q = torch.div(a, torch.where(minus_one, torch.ones_like(b), b), rounding_mode="trunc")
    return torch.where(minus_one, -a, q)


def _int_mod(a: torch.Tensor, b: torch.Tensor, fmod: bool) -> torch.Tensor:
    """Remainder (``fmod``: with the dividend's sign) with x mod -1 = 0 without the trapping division."""
    minus_one = b == -1
    safe = torch.where(minus_one, torch.ones_like(b), b)
    r = torch.fmod(a, safe) if fmod else torch.remainder(a, safe)
    return torch.where(minus_one, torch.zeros_like(r), r)


@op("Pow")
def pow_(n: OnnxNode) -> Any:
    base, exp = n.val(0).dtype, n.val(1).dtype
    if exp in UNSIGNED and base.is_floating_point:  # as numpy: in float64, which holds their values
        x = n.call(aten.pow.Tensor_Tensor, n.cast(n.x(0), torch.float64), n.cast(n.x(1), torch.float64))
        return n.cast(x, base)
    if base in NO_ARITH or exp in NO_ARITH:
        raise UnsupportedError(f"Pow on {base} and {exp} is not supported")
    if not base.is_floating_point and exp.is_floating_point:
        x = n.call(aten.pow.Tensor_Tensor, n.cast(n.x(0), torch.float64), n.cast(n.x(1), torch.float64))
        return n.cast(x, base)  # ONNX keeps the base's type: the float power truncated
    if not base.is_floating_point:
        return n.call(_int_pow, n.x(0), n.x(1))
    out = n.call(aten.pow.Tensor_Tensor, n.x(0), n.x(1))
    return n.cast(out, base) if exp.is_floating_point and exp != base else out


def _int_pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.pow(x, y.to(x.dtype) if x.dtype != y.dtype else y)


@op("Mod", attrs=("fmod",))
def mod(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    if dtype in UNSIGNED:  # both signs agree: remainder and fmod are one
        return n.call(uint_binary, n.x(0), n.x(1), "mod")
    if dtype in NO_ARITH:
        raise UnsupportedError(f"Mod on {dtype} is not supported")
    if dtype.is_floating_point:
        if n.at.get("fmod", 0):
            return n.call(aten.fmod.Tensor, n.x(0), n.x(1))
        return n.call(_float_mod, n.x(0), n.x(1))
    if n.at.get("fmod", 0):
        return n.call(_int_mod, n.x(0), n.x(1), True)
    return n.call(_int_mod, n.x(0), n.x(1), False)  # sign of the divisor, like Python


def _float_mod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """numpy's float mod (ONNX's with fmod=0): the remainder takes the divisor's sign, a zero remainder
    too; torch.remainder's a - b * floor(a / b) differs at infinite divisors and signed zeros."""
    m = torch.fmod(a, b)
    m = torch.where((m != 0) & ((m < 0) != (b < 0)), m + b, m)
    return torch.where(m == 0, torch.copysign(torch.zeros_like(m), b), m)


@op("BitShift", attrs=("direction",))
def bitshift(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    if dtype == torch.bool or dtype.is_floating_point or dtype in FLOAT8:
        raise UnsupportedError(f"BitShift on {dtype} is not supported (integers only)")
    direction = _str(n.at, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise UnsupportedError(f"BitShift direction {direction!r} is not LEFT or RIGHT")
    return n.call(bit_shift, n.x(0), n.x(1), direction == "LEFT")


_COMPARE = {"Equal": aten.eq.Tensor, "Less": aten.lt.Tensor, "LessOrEqual": aten.le.Tensor,
            "Greater": aten.gt.Tensor, "GreaterOrEqual": aten.ge.Tensor}  # fmt: skip


@op(*_COMPARE)
def compare(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    if dtype in FLOAT8:
        raise UnsupportedError(f"{n.op_type} on {dtype} is not supported")
    if dtype in UNSIGNED:
        kind = {"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge"}
        return n.call(uint_binary, n.x(0), n.x(1), kind[n.op_type])
    return n.call(_COMPARE[n.op_type], n.x(0), n.x(1))


_LOGIC = {"And": aten.logical_and.default, "Or": aten.logical_or.default, "Xor": aten.logical_xor.default,
          "BitwiseAnd": aten.bitwise_and.Tensor, "BitwiseOr": aten.bitwise_or.Tensor,
          "BitwiseXor": aten.bitwise_xor.Tensor}  # fmt: skip


@op(*_LOGIC)
def logic(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    if (
        dtype.is_floating_point
        or dtype in FLOAT8
        or (dtype != torch.bool and n.op_type in ("And", "Or", "Xor"))
    ):
        raise UnsupportedError(f"{n.op_type} on {dtype} is not supported")
    if dtype in UNSIGNED:
        return n.call(uint_binary, n.x(0), n.x(1), n.op_type.removeprefix("Bitwise").lower())
    return n.call(_LOGIC[n.op_type], n.x(0), n.x(1))


@op("Not", "BitwiseNot")
def logical_not(n: OnnxNode) -> Any:
    n.refuse_dtypes(*FLOATS, *FLOAT8)
    if n.val(0).dtype in UNSIGNED:
        return n.call(uint_not, n.x(0))
    return n.call(aten.bitwise_not.default, n.x(0))


@op("Sum", "Mean", "Max", "Min")
def variadic(n: OnnxNode) -> Any:
    dtype = _same_dtype(n)
    unsigned = dtype in UNSIGNED and n.op_type != "Mean"
    if (dtype in NO_ARITH and not unsigned) or (n.op_type == "Mean" and not dtype.is_floating_point):
        raise UnsupportedError(f"{n.op_type} on {dtype} is not supported")
    target = {"Sum": aten.add.Tensor, "Mean": aten.add.Tensor, "Max": aten.maximum.default,
              "Min": aten.minimum.default}[n.op_type]  # fmt: skip
    kind = {"Sum": "add", "Max": "max", "Min": "min"}.get(n.op_type, "")
    ins = [n.x(i) for i in range(len(n.ins))]
    if unsigned:
        out = functools.reduce(lambda a, b: n.call(uint_binary, a, b, kind), ins)
    else:
        out = functools.reduce(lambda a, b: n.call(target, a, b), ins)
    if len(ins) == 1:
        out = n.call(aten.clone.default, out)
    return n.call(aten.div.Tensor, out, len(ins)) if n.op_type == "Mean" else out


@op("Clip", attrs=("min", "max"))
def clip(n: OnnxNode) -> Any:
    """Before opset 11 min and max are attributes; from 11 optional inputs."""
    dtype = n.val(0).dtype
    if dtype in NO_ARITH:
        raise UnsupportedError(f"Clip on {dtype} is not supported")
    if n.opset < 11:
        return n.call(aten.clamp.default, n.x(0), n.at.get("min"), n.at.get("max"))
    lo = n.ins[1] if n.has(1) else None
    hi = n.ins[2] if n.has(2) else None
    if lo is None and hi is None:
        return n.call(aten.clone.default, n.x(0))
    return n.call(aten.clamp.Tensor, n.x(0), lo, hi)


@op("Where")
def where(n: OnnxNode) -> Any:
    if n.val(0).dtype != torch.bool or n.val(1).dtype != n.val(2).dtype:
        raise UnsupportedError("Where needs a bool condition and two values of one dtype")
    return n.call(aten.where.self, n.x(0), n.x(1), n.x(2))


@op("Cast", "CastLike", attrs=("to", "saturate", "round_mode"))
def cast(n: OnnxNode) -> Any:
    src = n.val(0).dtype
    dst = torch_dtype(n.at["to"], "Cast's target") if n.op_type == "Cast" else n.val(1).dtype
    x = n.x(0)
    if dst in FLOAT8 or src in FLOAT8:
        if not (src.is_floating_point and dst.is_floating_point):
            raise UnsupportedError(
                f"Cast from {src} to {dst} is not supported (float8 to and from floats only)"
            )
        if dst in FLOAT8 and src in FLOAT8:
            x, src = n.cast(x, torch.float32), torch.float32
        if dst in FLOAT8 and n.at.get("saturate", 1):
            x = n.call(_saturate, x, dst)
        elif dst in FLOAT8:
            x = n.call(_overflow, x, dst)
    return n.cast(x, dst)


def _overflow(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Non-saturating float8 casts: a value past the largest finite one after rounding becomes infinity
    where the type has one (e5m2), NaN elsewhere; torch's own cast saturates some of them."""
    x32 = x.to(torch.float32)
    y = x32.to(dtype).to(torch.float32)
    big = torch.finfo(dtype).max
    over = torch.isinf(x32) | ((x32.abs() > big) & (y.abs() >= big))
    special = (
        torch.copysign(torch.full_like(x32, math.inf), x32)
        if dtype == torch.float8_e5m2
        else torch.full_like(x32, math.nan)
    )
    return torch.where(over, special, x32)


def _saturate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Saturating float8 casts clamp to the largest finite value (infinities included), keep NaN."""
    big = torch.finfo(dtype).max
    return torch.clamp(x.to(torch.float32), -big, big)


def _axes(n: OnnxNode) -> list[int] | None:
    """Reduction axes: input 1 from opset 18 (ReduceSum from 13), the ``axes`` attribute before."""
    if n.has(1):
        return n.ints(1, "axes")
    axes = n.at.get("axes")
    return None if axes is None else list(axes)


_REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")  # fmt: skip


@op(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def reduce(n: OnnxNode) -> Any:
    x = n.val(0)
    if x.dtype in NO_ARITH or (
        not x.dtype.is_floating_point
        and n.op_type not in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")
    ):
        raise UnsupportedError(f"{n.op_type} on {x.dtype} is not supported")
    axes = _axes(n)
    if not axes:
        if n.at.get("noop_with_empty_axes", 0):
            return n.call(aten.clone.default, n.x(0))
        axes = list(range(x.dim()))
    axes = sorted({a % max(x.dim(), 1) for a in axes})
    if x.numel() == 0 or x.dim() == 0:
        raise UnsupportedError(f"{n.op_type} of an empty or 0-d tensor is not supported")
    return n.call(_onnx_reduce, n.x(0), n.op_type, axes, bool(n.at.get("keepdims", 1)))


def _onnx_reduce(x: torch.Tensor, kind: str, axes: list[int], keep: bool) -> torch.Tensor:
    if kind == "ReduceMax":
        return torch.amax(x, axes, keep)
    if kind == "ReduceMin":
        return torch.amin(x, axes, keep)
    if kind == "ReduceMean":
        return torch.mean(x, axes, keep)
    if kind == "ReduceProd":
        out = x
        for a in sorted(axes, reverse=True):
            out = torch.prod(out, a, keepdim=True, dtype=x.dtype)
        return out if keep else out.squeeze(axes)
    y = {"ReduceL1": lambda: x.abs(), "ReduceL2": lambda: x * x, "ReduceSumSquare": lambda: x * x,
         "ReduceLogSumExp": lambda: torch.exp(x)}.get(kind, lambda: x)()  # fmt: skip
    s = torch.sum(y, axes, keep, dtype=x.dtype)
    return {"ReduceL2": torch.sqrt, "ReduceLogSum": torch.log, "ReduceLogSumExp": torch.log}.get(
        kind, lambda t: t
    )(s)


@op("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def argmax(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    x = n.val(0)
    axis = n.at.get("axis", 0) % max(x.dim(), 1)
    return n.call(_onnx_arg, n.x(0), n.op_type == "ArgMax", axis, bool(n.at.get("keepdims", 1)),
                  bool(n.at.get("select_last_index", 0)))  # fmt: skip


def _onnx_arg(x: torch.Tensor, is_max: bool, axis: int, keep: bool, last: bool) -> torch.Tensor:
    fn = torch.argmax if is_max else torch.argmin
    if not last:
        return fn(x, axis, keep)
    return x.shape[axis] - 1 - fn(x.flip(axis), axis, keep)


@op("CumSum", attrs=("exclusive", "reverse"))
def cumsum(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    axis = n.ints(1, "axis")[0] % max(n.rank(), 1)
    return n.call(_onnx_cumsum, n.x(0), axis, bool(n.at.get("exclusive", 0)), bool(n.at.get("reverse", 0)))


def _onnx_cumsum(x: torch.Tensor, axis: int, exclusive: bool, reverse: bool) -> torch.Tensor:
    y = x.flip(axis) if reverse else x
    out = torch.cumsum(y, axis, dtype=x.dtype)
    if exclusive:
        out = torch.cat(
            [torch.zeros_like(out.narrow(axis, 0, 1)), out.narrow(axis, 0, out.shape[axis] - 1)], axis
        )
    return out.flip(axis) if reverse else out


@op("Einsum", attrs=("equation",))
def einsum(n: OnnxNode) -> Any:
    n.refuse_dtypes(*NO_ARITH)
    equation = _str(n.at, "equation", "").replace(" ", "")
    return n.call(aten.einsum.default, equation, [n.x(i) for i in range(len(n.ins))])


@op("Identity")
def identity(n: OnnxNode) -> Any:
    return n.call(aten.clone.default, n.x(0)) if n.has(0) else n.x(0)


@op("Dropout", attrs=("ratio", "seed", "is_test"))
def dropout(n: OnnxNode) -> Any:
    """Inference only: training_mode (input 2) must be absent or a constant false, or the ratio a constant 0
    (then training drops nothing: the spec's output is the input and an all-true mask)."""
    if n.opset < 7 and not n.at.get("is_test", 0):
        raise UnsupportedError("Dropout before opset 7 without is_test=1 is random; export in eval mode")
    training = n.has(2) and bool(n.const(2, "training_mode").reshape(-1)[0])
    if training and _dropout_ratio(n) != 0.0:
        raise UnsupportedError("Dropout with training_mode=true is random; export in eval mode")
    y = n.call(aten.clone.default, n.x(0))
    mask = n.call(aten.ones_like.default, n.x(0), dtype=torch.bool if n.opset >= 10 else n.val(0).dtype)
    return y, mask


def _dropout_ratio(n: OnnxNode) -> float:
    """The drop ratio: input 1 from opset 12 (default 0.5), else the ``ratio`` attribute (default 0.5)."""
    if n.opset >= 12:
        return float(n.const(1, "ratio").reshape(-1)[0]) if n.has(1) else 0.5
    return float(n.at.get("ratio", 0.5))


@op("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",))
def softmax(n: OnnxNode) -> Any:
    """Before opset 13 the input is coerced to 2-d at ``axis`` (default 1); from 13 one axis (default -1)."""
    n.floats_only()
    x = n.val(0)
    axis = n.at.get("axis", 1 if n.opset < 13 else -1) % max(x.dim(), 1)
    fn = {"Softmax": _softmax, "LogSoftmax": _log_softmax, "Hardmax": _hardmax}[n.op_type]
    if n.opset < 13:
        flat = n.call(aten.reshape.default, n.x(0), [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])
        return n.call(aten.reshape.default, n.call(fn, flat, 1), list(x.shape))
    return n.call(fn, n.x(0), axis)


def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.softmax(x, dim)


def _log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.log_softmax(x, dim)


def _hardmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """1 at the first maximum along ``dim``."""
    idx = torch.argmax(x, dim, keepdim=True)
    return torch.zeros_like(x).scatter(dim, idx, 1.0)
