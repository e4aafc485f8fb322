"""The ONNX backend node tests, generated from the installed ``onnx`` wheel, run through pathweave.

Each case is a one-op model (or its function expansion) with inputs and expected outputs. A case
either passes (same dtype and shape, NaN where expected, integers and bools exact, floats within a
tolerance per dtype) or ends in a ``PathweaveError``; a raw exception or a wrong result fails.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import pathweave
from pathweave.errors import PathweaveError, UnsupportedError
from pathweave.frontend.onnx_ops import numpy_to_torch

#: (rtol, atol) per output dtype; integers, bools and float8 are compared exactly
TOLERANCES = {
    torch.float64: (1e-6, 1e-8),
    torch.float32: (1e-3, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),  # one bf16 ulp is 0.4%; expanded functions round at every op
}


@functools.cache
def node_cases() -> tuple[Any, ...]:
    """Every node test case of the installed onnx (collected once: collecting twice raises)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(node.collect_testcases())


def as_array(value: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def to_torch(value: Any) -> Any:
    """A case input as a torch tensor, or unchanged where torch has no such dtype (strings, int4,
    sequences, None): pathweave must refuse those with ``InputError``."""
    value = as_array(value)
    if isinstance(value, np.generic):  # a numpy scalar is a 0-d array
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        return value
    try:
        return numpy_to_torch(value, "a case value")
    except UnsupportedError:
        return value


def difference(got: Any, want: Any) -> str | None:
    """Why ``got`` is not ``want`` (dtype, shape, NaN positions, values), or None."""
    want = to_torch(want)
    if not isinstance(want, torch.Tensor):
        return f"expected a {type(want).__name__}, got {type(got).__name__}"
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, got {type(got).__name__}"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}"
    if got.dtype.is_floating_point:
        g, w = got.double(), want.double()
        if not torch.equal(torch.isnan(g), torch.isnan(w)):
            return "NaN at other positions"
        rtol, atol = TOLERANCES.get(got.dtype, (0.0, 0.0))
        if not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            diff = (g - w).abs().nan_to_num(float("inf")).max().item()
            return f"values differ by up to {diff:.3g} (rtol {rtol}, atol {atol})"
        return None
    return None if torch.equal(got, want) else "values differ"


@dataclass(frozen=True)
class Outcome:
    kind: str  # "pass", "refused", "raw" or "wrong"
    reason: str


def run_case(case: Any, folder: Path) -> Outcome:
    """Save the case's model, optimize it with the sequential strategy and compare its outputs."""
    import onnx

    inputs, outputs = case.data_sets[0]
    path = folder / f"{case.name}.onnx"
    onnx.save(case.model, str(path))
    args = [to_torch(v) for v in inputs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = pathweave.optimize(path, *args, strategy="sequential")
            got = fn(*[a for a in args if isinstance(a, torch.Tensor)])
    except PathweaveError as exc:
        return Outcome("refused", f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return Outcome("raw", f"{type(exc).__name__}: {exc}")
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(outputs):
        return Outcome("wrong", f"{len(got)} outputs, expected {len(outputs)}")
    for i, (g, w) in enumerate(zip(got, outputs, strict=True)):
        problem = difference(g, as_array(w))
        if problem:
            return Outcome("wrong", f"output {i}: {problem}")
    return Outcome("pass", "")


_REASONS = (
    ("op not converted", "cannot convert yet"),
    ("needs a constant operand", "needs a constant"),
    ("input type not taken", "InputError"),
    ("dtype not supported", r"torch\.\w+ is not supported|ONNX type|dtype"),
    ("attribute not supported", "attribute|auto_pad|saturate|training_mode|batch_dims|fmod"),
    ("output not supported", "output \\d"),
)


def reason(outcome: Outcome) -> str:
    """A short label for a refusal, for the summary."""
    for label, pattern in _REASONS:
        if re.search(pattern, outcome.reason):
            return label
    return "other"


def summary(outcomes: dict[str, Outcome]) -> str:
    kinds = Counter(o.kind for o in outcomes.values())
    reasons = Counter(reason(o) for o in outcomes.values() if o.kind == "refused")
    counts = ", ".join(f"{kind} {kinds[kind]}" for kind in ("pass", "refused", "raw", "wrong"))
    lines = [f"ONNX node tests: {len(outcomes)} cases: {counts}"]
    lines += [f"  refused, {label}: {count}" for label, count in reasons.most_common()]
    return "\n".join(lines)
