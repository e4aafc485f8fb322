"""ONNX in: an ONNX model becomes a torch GraphModule of ATen ops, which is then captured like any
other model (so analysis, the fast path and lanes all apply).

Shapes are fixed by the example inputs (a dynamic batch dimension takes ``batch``). Every op type
the converter lacks is listed in one ``UnsupportedError``. Where onnxruntime is installed, the
converted graph is checked against it on the example inputs.
"""

from __future__ import annotations

import operator
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ..compare import mismatch
from ..errors import CaptureError, InputError, UnsupportedError, require
from .onnx_ops import CONVERTERS, split_sizes

#: converted outputs must match ONNX Runtime within these
ORT_RTOL, ORT_ATOL = 1e-3, 1e-4


class _Builder:
    def __init__(self, model: Any, numpy_helper: Any) -> None:
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[str, torch.fx.Node] = {}
        self.consts: dict[str, torch.Tensor] = {}
        self.np = numpy_helper
        for init in model.graph.initializer:
            self._constant(init.name, torch.from_numpy(numpy_helper.to_array(init).copy()))

    def _constant(self, name: str, value: torch.Tensor) -> None:
        attr = f"c{len(self.consts)}_" + "".join(ch if ch.isalnum() else "_" for ch in name)[:40]
        self.root.register_buffer(attr, value, persistent=False)
        self.values[name] = self.graph.get_attr(attr)
        self.values[name].meta["val"] = value
        self.consts[name] = value

    def convert(self, node: Any, attrs: dict[str, Any]) -> None:
        if node.op_type == "Constant":
            self._constant(node.output[0], torch.from_numpy(self.np.to_array(attrs["value"]).copy()))
            return
        ins = [self.values[i] if i else None for i in node.input]
        consts = [self.consts.get(i) for i in node.input]
        if node.op_type == "Split":
            self._split(node, ins, attrs, consts)
            return
        out = CONVERTERS[node.op_type](self.graph, ins, attrs, consts)
        self.values[node.output[0]] = out

    def _split(self, node: Any, ins: list, attrs: dict, consts: list) -> None:
        axis = attrs.get("axis", 0)
        dim = ins[0].meta["val"].shape[axis]
        sizes = split_sizes(ins, attrs, consts, len(node.output), dim)
        parts = self.graph.call_function(torch.ops.aten.split_with_sizes.default, (ins[0], sizes, axis))
        for i, name in enumerate(node.output):
            self.values[name] = self.graph.call_function(operator.getitem, (parts, i))


def _attributes(node: Any, helper: Any) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def example_inputs(model: Any, batch: int = 1) -> tuple[torch.Tensor, ...]:
    """Inputs for the graph's declared shapes: floats from a fixed seed, integers as ones (valid ids)."""
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    gen = torch.Generator().manual_seed(1234)
    out = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        dtype = getattr(torch, str(helper.tensor_dtype_to_np_dtype(t.elem_type)))
        out.append(torch.randn(shape, generator=gen).to(dtype) if dtype.is_floating_point else
                   torch.ones(shape, dtype=dtype))  # fmt: skip
    return tuple(out)


def onnx_module(path: Path, inputs: tuple[torch.Tensor, ...] | None = None, batch: int = 1):
    """The ONNX model at ``path`` as (GraphModule returning a tuple, example inputs)."""
    onnx = require("onnx", "onnx")
    from onnx import helper, numpy_helper

    if not path.exists():
        raise InputError(f"no such ONNX file: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise InputError(f"{path} is not an ONNX model: {exc}") from exc
    missing = sorted({n.op_type for n in model.graph.node if n.op_type not in CONVERTERS and
                      n.op_type not in ("Constant", "Split")})  # fmt: skip
    if missing:
        message = f"{path.name}: ONNX ops pathweave cannot convert yet: {', '.join(missing)}"
        raise UnsupportedError(message, missing)
    inputs = inputs or example_inputs(model, batch)
    b = _Builder(model, numpy_helper)
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    for inp, value in zip(graph_inputs, inputs, strict=True):
        b.values[inp.name] = b.graph.placeholder("".join(c if c.isalnum() else "_" for c in inp.name))
        b.values[inp.name].meta["val"] = value
    for node in model.graph.node:
        try:
            b.convert(node, _attributes(node, helper))
            _propagate(b)
        except NotImplementedError as exc:
            message = f"{path.name}: {node.op_type} node {node.name!r}: {exc}"
            raise UnsupportedError(message, [node.op_type]) from exc
    b.graph.output(tuple(b.values[o.name] for o in model.graph.output))
    for n in b.graph.nodes:  # example values were only for the converters; capture recomputes shapes
        n.meta.pop("val", None)
    gm = torch.fx.GraphModule(b.root, b.graph, class_name=path.stem.replace("-", "_") or "onnx_model")
    _check_against_ort(path, gm, inputs)
    return gm, inputs


def _propagate(b: _Builder) -> None:
    """Run the nodes a converter just appended on the example values, so later converters can read
    shapes. New nodes sit at the end of the graph, after the last node that has a value."""
    new = []
    for n in reversed(b.graph.nodes):
        if "val" in n.meta:
            break
        new.append(n)
    for n in reversed(new):
        args = torch.fx.node.map_arg(n.args, lambda a: a.meta["val"])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: a.meta["val"])
        with torch.no_grad():
            n.meta["val"] = n.target(*args, **kwargs)


def _check_against_ort(path: Path, gm: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        return
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # e.g. an IR version newer than this onnxruntime reads
        warnings.warn(
            f"{path.name}: not checked against ONNX Runtime, which cannot load it: {exc}", stacklevel=3
        )
        return
    feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs, strict=True)}
    want = sess.run(None, feed)
    with torch.no_grad():
        got = gm(*inputs)
    problem = mismatch(list(got), [torch.from_numpy(w) for w in want], ORT_RTOL, ORT_ATOL)
    if problem:
        raise CaptureError(f"{path.name}: the converted graph differs from ONNX Runtime: {problem}")
