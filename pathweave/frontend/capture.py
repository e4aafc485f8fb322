"""Capture: nn.Module / ExportedProgram / .pt2 or .onnx file -> one whole torch.fx graph with shapes.

torch.export (non-strict) is tried first, fx symbolic tracing second. Either the whole model is
captured and its outputs match eager on the example inputs, or ``CaptureError`` is raised: a partial
graph is never returned.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pathweave.compare import mismatch
from pathweave.errors import CaptureError, InputError, UnsupportedError
from pathweave.frontend.export import export_program, from_exported
from pathweave.frontend.graph import Captured, describe
from pathweave.frontend.pt2 import bound_sizes, load_pt2
from pathweave.frontend.shapes import TensorSpec, tensor_spec, tensor_specs
from pathweave.frontend.trace import TraceFailure, first_line, trace_module

__all__ = ["Captured", "TensorSpec", "capture", "tensor_spec", "tensor_specs"]

#: outputs of the captured graph must match eager within these (same kernels, so only order of ops differs)
CHECK_RTOL, CHECK_ATOL = 1e-4, 1e-5


def capture(
    model: Any, *inputs: Any, name: str | None = None, method: str = "auto", check: bool = True, **kwargs: Any
) -> Captured:
    """Capture ``model`` called as ``model(*inputs, **kwargs)``.

    ``model`` is an ``nn.Module``, a ``torch.export.ExportedProgram`` or a path to a ``.pt2`` or
    ``.onnx`` file (ONNX graphs are converted to ATen ops first; see ``frontend.onnx``).
    ``method`` is "auto" (export, then fx), "export" or "fx". For ``.onnx`` files, ``crosscheck=False``
    skips the comparison with onnxruntime.
    """
    if isinstance(model, (str, os.PathLike)) and Path(model).suffix == ".onnx":
        from pathweave.frontend.onnx import convert

        crosscheck = kwargs.pop("crosscheck", None)  # against onnxruntime (see capture.onnx)
        if kwargs:
            raise InputError(f"{Path(model).name}: ONNX models take positional inputs, not {sorted(kwargs)}")
        gm, onnx_inputs, fixed = convert(Path(model), tuple(inputs) or None, crosscheck=crosscheck)
        captured = capture(gm, *onnx_inputs, name=name or Path(model).stem, method=method, check=check)
        captured.fixed = fixed  # shape-setting inputs the graph was specialised on, checked per call
        return captured
    if isinstance(model, (str, os.PathLike)):
        name = name or Path(model).stem
        model = load_pt2(Path(model))
    if isinstance(model, ExportedProgram):
        return _capture_program(model, inputs, kwargs, name or "exported_program", check)
    if not isinstance(model, torch.nn.Module):
        raise InputError(
            f"expected a torch.nn.Module, ExportedProgram or .pt2 path, got {type(model).__name__}"
        )
    if method not in ("auto", "export", "fx"):
        raise InputError(f"unknown capture method {method!r}; use 'auto', 'export' or 'fx'")
    name = name or type(model).__name__
    _check_inputs(inputs, kwargs, name, _unread(model))
    inputs, kwargs = _distinct(inputs, kwargs)
    modes = {m: m.training for m in model.modules()}  # restored one by one: a caller may mix modes
    model.eval()
    try:
        expected = _run_eager(model, inputs, kwargs, name)
        captured = _capture_module(model, inputs, kwargs, name, method)
    finally:
        for m, training in modes.items():
            m.training = training
    if check:
        _check_outputs(captured, expected)
    return captured


def _capture_module(model: torch.nn.Module, inputs: tuple, kwargs: dict, name: str, method: str) -> Captured:
    reasons = []
    if method in ("auto", "export"):
        try:
            ep = export_program(model, inputs, kwargs)
            return from_exported(ep, pytree.tree_leaves((inputs, kwargs)), name)
        except UnsupportedError:
            raise  # a model pathweave must refuse, not one fx tracing would capture better
        except Exception as exc:
            reasons.append(f"torch.export failed{_user_frame(exc)}: {first_line(exc)}")
    if method in ("auto", "fx"):
        if kwargs:
            reasons.append("fx tracing takes positional tensor inputs only")
        else:
            try:
                return trace_module(model, inputs, name)
            except TraceFailure as exc:
                reasons.append(f"fx symbolic tracing failed {exc}")
    raise CaptureError(f"could not capture {name} as one whole graph:\n  " + "\n  ".join(reasons))


def _capture_program(ep: ExportedProgram, inputs: tuple, kwargs: dict, name: str, check: bool) -> Captured:
    if not inputs and not kwargs and ep.example_inputs is not None:
        inputs, kwargs = ep.example_inputs
    _check_inputs(inputs, kwargs, name)
    try:
        bound_sizes(ep, inputs, kwargs, name)  # on fake tensors: a program that fails there never runs
        with torch.no_grad():
            expected = ep.module()(*inputs, **kwargs)
    except InputError:
        raise
    except Exception as exc:  # the program's own guards: input count, shapes, dtypes
        raise InputError(
            f"{name}: the inputs ({_signature(inputs, kwargs)}) do not fit the exported program, which "
            f"takes {_program_signature(ep)}: {first_line(exc)}"
        ) from exc
    if _symbolic(ep):  # exported with dynamic dimensions: specialise to the shapes given
        try:
            ep = export_program(ep.module(), inputs, kwargs)
        except Exception as exc:
            raise CaptureError(f"{name}: could not specialise the dynamic program to "
                               f"{_signature(inputs, kwargs)}: {first_line(exc)}") from exc  # fmt: skip
    captured = from_exported(ep, pytree.tree_leaves((inputs, kwargs)), name)
    if check:
        _check_outputs(captured, expected)
    return captured


def _symbolic(ep: ExportedProgram) -> bool:
    """Whether some input of the program has a symbolic (dynamic) dimension."""
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            if any(not isinstance(d, int) for d in val.shape):
                return True
    return False


def _program_signature(ep: ExportedProgram) -> str:
    user = set(ep.graph_signature.user_inputs)
    return describe(n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder" and n.name in user)


def _signature(inputs: tuple, kwargs: dict) -> str:
    return describe(pytree.tree_leaves((inputs, kwargs)))


def _unread(model: torch.nn.Module) -> frozenset[int]:
    """Positions of a GraphModule's inputs that no node reads (an ONNX input used only for its dtype or
    shape): they may be empty, which other inputs may not."""
    if not isinstance(model, torch.fx.GraphModule):
        return frozenset()
    placeholders = [n for n in model.graph.nodes if n.op == "placeholder"]
    return frozenset(i for i, n in enumerate(placeholders) if not n.users)


def _check_inputs(inputs: tuple, kwargs: dict, name: str, unread: frozenset[int] = frozenset()) -> None:
    leaves = pytree.tree_leaves((inputs, kwargs))
    if not leaves:
        raise InputError(f"{name}: capture needs example inputs (tensors the model is called with)")
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise InputError(f"{name}: example input {i} is a {type(leaf).__name__}; pass tensors")
        if leaf.device.type not in ("cpu", "cuda"):
            raise InputError(
                f"{name}: example input {i} is on device {leaf.device}; pathweave runs on cpu or cuda, "
                "with real data (move it with .to('cpu'))"
            )
        if leaf.numel() == 0 and i not in unread:
            raise InputError(
                f"{name}: example input {i} is empty (shape {tuple(leaf.shape)}); pathweave specialises "
                "the model to the example's shapes, so give at least one sample"
            )


def _distinct(inputs: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Example inputs that share memory (the same tensor passed twice) copied apart: torch.export would
    otherwise take them for one input, and a later call with two different tensors would compute with
    one of them twice."""
    seen: set[int] = set()

    def own(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen and t.numel():
            return t.clone()
        seen.add(ptr)
        return t

    return pytree.tree_map(own, (tuple(inputs), dict(kwargs)))


def _run_eager(model: torch.nn.Module, inputs: tuple, kwargs: dict, name: str) -> Any:
    try:
        with torch.no_grad():
            return model(*inputs, **kwargs)
    except Exception as exc:
        raise InputError(
            f"{name} fails on the example inputs ({_signature(inputs, kwargs)}){_user_frame(exc)}: "
            f"{first_line(exc)}"
        ) from exc


def _check_outputs(captured: Captured, expected: Any) -> None:
    with torch.no_grad():
        got = captured.gm(*captured.example_inputs)
    want = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    problem = mismatch(list(got), want, CHECK_RTOL, CHECK_ATOL)
    if problem:
        raise CaptureError(
            f"{captured.name}: the captured graph differs from eager: {problem}; the model may depend "
            "on state or Python values that capture cannot see"
        )


def _user_frame(exc: BaseException) -> str:
    """' at file:line (code)' for the innermost traceback frame outside torch, if any."""
    torch_dir = str(Path(torch.__file__).parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(torch_dir)]
    frames = [f for f in frames if "pathweave" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {Path(f.filename).name}:{f.lineno} ({(f.line or '').strip()})"
