"""ONNX in: an ONNX model becomes a torch GraphModule of ATen ops, which is then captured like any
other model (so analysis, the fast path and lanes all apply).

Shapes are fixed by the example inputs (a dynamic batch dimension takes ``batch``). Loading parses
protobuf and runs nothing; external data must lie inside the model's folder. Every op type the
converter lacks is listed in one ``UnsupportedError``; a node it cannot convert exactly raises
``UnsupportedError`` naming the node, never a raw exception or a wrong result. Each converted node's
dtype and shape are checked against ONNX's own shape inference. Where onnxruntime is installed, the
converted graph is also checked against it on the example inputs (``crosscheck``, or the environment
variable ``PATHWEAVE_ONNX_CROSSCHECK=0`` to skip it).
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.fx

from pathweave.compare import mismatch
from pathweave.errors import CaptureError, InputError, PathweaveError, UnsupportedError, require
from pathweave.frontend import (  # noqa: F401  (they register converters)
    onnx_attention,
    onnx_losses,
    onnx_ops_extra,
    onnx_ops_more,
    onnx_ops_shape,
    onnx_quant,
    onnx_resize,
    onnx_rnn,
)
from pathweave.frontend.graph import FixedInput
from pathweave.frontend.onnx_ops import (
    CONVERTERS,
    ONNX_TO_TORCH,
    OnnxNode,
    numpy_to_torch,
    onnx_type_name,
    tensor_from_proto,
)
from pathweave.frontend.trace import first_line

#: converted outputs must match ONNX Runtime within these
ORT_RTOL, ORT_ATOL = 1e-3, 1e-4
#: the most bytes one converted value may take (checked against ONNX's shape inference before converting)
MAX_VALUE_BYTES = 1 << 30
#: protobuf cannot parse a message this large; bigger models keep their weights as external data
PROTOBUF_LIMIT = 2**31 - 1
#: pools whose ceil_mode output size ONNX's shape inference overcounts (see ``_Builder.convert``)
_CEIL_POOLS = ("MaxPool", "AveragePool", "LpPool")
#: Constant's attributes that pathweave reads (strings and sparse tensors are refused)
_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")
#: graph inputs of at most this many elements may set shapes, axes or pads (the graph is specialised on
#: their values); larger ones are data
MAX_FIXED_ELEMENTS = 64


def crosscheck_enabled(crosscheck: bool | None) -> bool:
    """``crosscheck`` if given, else on unless ``PATHWEAVE_ONNX_CROSSCHECK`` is ``0`` (read per call)."""
    if crosscheck is not None:
        return crosscheck
    return os.environ.get("PATHWEAVE_ONNX_CROSSCHECK", "1").strip().lower() not in ("0", "false", "no", "off")


def load_model(path: Path) -> Any:
    """Parse and validate the model at ``path``: ``InputError`` naming the file and what is wrong."""
    onnx = require("onnx", "onnx")
    if not path.exists():
        raise InputError(f"no such ONNX file: {path}")
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path} is empty, not an ONNX model")
    if size > PROTOBUF_LIMIT:
        raise InputError(
            f"{path} is over 2 GB, more than protobuf can parse; save it with external data "
            "(onnx.save_model(model, path, save_as_external_data=True))"
        )
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise InputError(f"{path} is not an ONNX model: {first_line(exc)}") from exc
    external = [t for t in _all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    for tensor in external:
        _check_external(path, tensor)
    problem = _structure_problem(model)
    if problem:
        raise InputError(f"{path} is not a valid ONNX model: {problem}")
    if external:
        from onnx.external_data_helper import load_external_data_for_tensor

        for tensor in external:
            try:
                load_external_data_for_tensor(tensor, str(path.parent))
            except Exception as exc:
                raise InputError(f"{path}: cannot read the external data of {tensor.name!r}: {exc}") from exc
    return model


def _structure_problem(model: Any) -> str | None:
    """What makes ``model`` no ONNX model (random bytes often parse as some protobuf), or None. Not
    onnx.checker: it refuses models that exporters write and ONNX Runtime runs (outputs without shape)."""
    if model.ir_version < 1:
        return "it has no IR version"
    if not model.HasField("graph") or not model.graph.output:
        return "it has no graph outputs"
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        return "it imports no ONNX opset"
    bad = next((text for text in _names(model) if not isinstance(text, str)), None)
    if bad is not None:  # protobuf hands back bytes where a string field is not UTF-8
        return f"the name or op type {bad!r} is not UTF-8 text"
    known = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if not node.op_type:
            return "a node has no op type"
        missing = [i for i in node.input if i and i not in known]
        if missing:
            return f"{node.op_type} node {node.name!r} reads {missing[0]!r}, which no earlier node computes"
        known.update(node.output)
    undefined = [o.name for o in model.graph.output if o.name not in known]
    return f"graph output {undefined[0]!r} is computed by no node" if undefined else None


def _names(model: Any) -> list[Any]:
    """Every name, op type and domain of the main graph (what the converter reads as text)."""
    g = model.graph
    out = [v.name for v in (*g.input, *g.output, *g.initializer)]
    for node in g.node:
        out += [node.op_type, node.domain, node.name, *node.input, *node.output]
        out += [a.name for a in node.attribute]
    return out


def _all_tensors(graph: Any) -> list[Any]:
    """Initializers and attribute tensors of ``graph`` and its subgraphs."""
    out = list(graph.initializer)
    for sparse in graph.sparse_initializer:
        out += [sparse.values, sparse.indices]
    for node in graph.node:
        for attr in node.attribute:
            out += ([attr.t] if attr.HasField("t") else []) + list(attr.tensors)
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out += _all_tensors(sub)
    return out


def _check_external(path: Path, tensor: Any) -> None:
    """External data must be a relative path inside the model's folder: nothing else is read."""
    location = {e.key: e.value for e in tensor.external_data}.get("location", "")
    where = Path(location)
    inside = (path.parent / where).resolve().is_relative_to(path.parent.resolve())
    if not location or where.is_absolute() or ".." in where.parts or not inside:
        raise InputError(
            f"{path}: tensor {tensor.name!r} keeps its data at {location!r}, outside the model's folder; "
            "external data must be a relative path next to the model"
        )
    if not (path.parent / where).is_file():
        raise InputError(f"{path}: the external data file {location!r} of tensor {tensor.name!r} is missing")


class _Builder:
    def __init__(self, model: Any, numpy_helper: Any, name: str, opset: int) -> None:
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[str, torch.fx.Node] = {}
        self.consts: dict[str, torch.Tensor] = {}
        self.inputs: dict[torch.fx.Node, tuple[int, str]] = {}  # placeholder -> (index, ONNX name)
        self.fixed: dict[torch.fx.Node, FixedInput] = {}  # inputs the graph is specialised on
        self.may_fix = False  # only on values the caller gave, never on generated examples
        self.np, self.name, self.opset = numpy_helper, name, opset
        self.expected = _inferred_types(model)
        for init in model.graph.initializer:
            try:
                value = tensor_from_proto(init, numpy_helper, f"initializer {init.name!r}")
            except UnsupportedError:
                raise
            except Exception as exc:  # e.g. fewer bytes than its shape needs
                raise InputError(
                    f"{name}: initializer {init.name!r} cannot be read: {first_line(exc)}"
                ) from exc
            self._constant(init.name, value)

    def _constant(self, name: str, value: torch.Tensor) -> None:
        self.values[name] = self.add_constant(value, name)
        self.consts[name] = value

    def add_constant(self, value: torch.Tensor, name: str = "k") -> torch.fx.Node:
        attr = f"c{len(self.root._buffers)}_" + "".join(ch if ch.isalnum() else "_" for ch in name)[:40]
        self.root.register_buffer(attr, value, persistent=False)
        node = self.graph.get_attr(attr)
        node.meta["val"] = value
        return node

    def add_input(self, name: str, value: torch.Tensor) -> None:
        node = self.graph.placeholder("in_" + "".join(c if c.isalnum() else "_" for c in name))
        node.meta["val"] = value
        self.inputs[node] = (len(self.inputs), name)
        self.values[name] = node

    def specialise(self, node: torch.fx.Node, use: str) -> torch.Tensor | None:
        """``node``'s example value as a constant where it is computed from small graph inputs only (a
        shape or axes passed as an input): those inputs become ``FixedInput``s, checked on every call.
        None where it depends on larger inputs (data) or the inputs were not given by the caller."""
        sources, seen, todo = [], {node}, [node]
        while todo:
            n = todo.pop()
            if n.op == "placeholder":
                sources.append(n)
            for m in n.all_input_nodes:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        if not self.may_fix or any(p.meta["val"].numel() > MAX_FIXED_ELEMENTS for p in sources):
            return None
        for p in sources:
            index, name = self.inputs[p]
            self.fixed.setdefault(p, FixedInput(index, name, p.meta["val"].clone(), use))
        return node.meta["val"]

    def convert(self, node: Any, attrs: dict[str, Any]) -> None:
        if node.op_type in ("Constant", "If"):  # no converter: they add values, not nodes
            self._constant_or_if(node, attrs)
            return
        fn, known = CONVERTERS[node.op_type]
        unknown = sorted(set(attrs) - known)
        if unknown:
            raise UnsupportedError(f"attribute {', '.join(unknown)} is not supported")
        for name in node.output:  # before the converter allocates it on the example values
            self._check_size(name)
        ins = [self.values[i] if i else None for i in node.input]
        consts = [self.consts.get(i) for i in node.input]
        used = [bool(o) for o in node.output]
        start = len(self.graph.nodes)
        view = OnnxNode(
            self.graph, node.op_type, ins, attrs, consts, self.opset, used, self.add_constant, self.specialise
        )
        out = fn(view)
        outs = out if isinstance(out, tuple) else (out,)
        new = _propagate(self.graph, start)
        if any(used[len(outs) :]):
            raise UnsupportedError(f"output {len(outs)} ({node.output[len(outs)]!r}) is not supported")
        folded = node.input and all(i == "" or i in self.consts for i in node.input)
        for name, fx_node in zip(node.output, outs, strict=False):
            if name:
                self._check_size(name, fx_node.meta["val"])
                # ONNX's shape inference counts a last ceil_mode window that starts in the right padding,
                # which the spec (since opset 19), ONNX Runtime and torch drop: dtypes only there
                ceil = node.op_type in _CEIL_POOLS and bool(attrs.get("ceil_mode"))
                self._check_type(name, fx_node.meta["val"], shape=not ceil)
                if folded:  # every input is constant: so is the output, for shape-like operands
                    self._constant(name, fx_node.meta["val"])
                else:
                    self.values[name] = fx_node
                    if fx_node.op == "get_attr":  # a constant by construction (Shape, Size)
                        self.consts[name] = fx_node.meta["val"]
        if folded:
            for n in reversed(new):
                if not n.users:
                    self.graph.erase_node(n)

    def _constant_or_if(self, node: Any, attrs: dict[str, Any]) -> None:
        if node.op_type == "Constant":
            self._constant(node.output[0], self._constant_value(attrs))
        else:
            self._inline_if(node, attrs)

    def _inline_if(self, node: Any, attrs: dict[str, Any]) -> None:
        """An If whose condition is known at capture (folded from shapes, or a small input the graph is
        specialised on) becomes the nodes of the branch it takes; a data-dependent one is refused."""
        from onnx import helper

        cond = self.consts.get(node.input[0])
        if cond is None:
            cond = self.specialise(self.values[node.input[0]], "If's condition")
        if cond is None or cond.numel() != 1:
            raise UnsupportedError("If needs a condition known at capture (it is computed from the data)")
        branch = attrs["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
        for init in branch.initializer:
            self._constant(init.name, tensor_from_proto(init, self.np, f"initializer {init.name!r}"))
        for sub in branch.node:
            self.convert(sub, _attributes(sub, helper))
        if len(branch.output) != len(node.output):
            raise UnsupportedError(f"If branch gives {len(branch.output)} outputs for {len(node.output)}")
        for name, out in zip(node.output, branch.output, strict=True):
            if name:
                self.values[name] = self.values[out.name]
                if out.name in self.consts:
                    self.consts[name] = self.consts[out.name]

    def _constant_value(self, attrs: dict[str, Any]) -> torch.Tensor:
        if len(attrs) != 1 or next(iter(attrs)) not in _CONSTANT_ATTRS:
            raise UnsupportedError(f"Constant with {', '.join(attrs) or 'no value'} is not supported "
                                   f"(only {', '.join(_CONSTANT_ATTRS)})")  # fmt: skip
        key, value = next(iter(attrs.items()))
        if key == "value":
            return tensor_from_proto(value, self.np)
        dtype = torch.float32 if key.startswith("value_float") else torch.int64
        return torch.tensor(value, dtype=dtype)

    def _check_size(self, name: str, value: Any = None) -> None:
        """A value past ``MAX_VALUE_BYTES`` is refused (a few bytes of ConstantOfShape, Expand or Tile
        can ask for terabytes): sized by ONNX's shape inference before the converter runs, or, where
        that does not know it, by the ``value`` converted on the example inputs."""
        elem_type, dims = self.expected.get(name, (None, None))
        if isinstance(value, torch.Tensor):
            size, dims = value.numel() * value.element_size(), list(value.shape)
        elif dims is None or any(d is None for d in dims):
            return
        else:
            itemsize = ONNX_TO_TORCH[elem_type].itemsize if elem_type in ONNX_TO_TORCH else 8
            size = itemsize * math.prod(dims)
        if size > MAX_VALUE_BYTES:
            raise UnsupportedError(
                f"output {name!r} would take {size / 2**30:.1f} GiB (shape {dims}), more than the "
                f"{MAX_VALUE_BYTES >> 30} GiB pathweave allows one value (capture.onnx.MAX_VALUE_BYTES)"
            )

    def _check_type(self, name: str, value: Any, shape: bool = True) -> None:
        """A converter must produce ONNX's dtype and (with ``shape``) shape; a mismatch is a converter
        bug, refused."""
        if not isinstance(value, torch.Tensor):
            raise UnsupportedError(f"output {name!r} is a {type(value).__name__}, not a tensor")
        want = self.expected.get(name)
        if want is None:
            return
        elem_type, dims = want
        if elem_type in ONNX_TO_TORCH and ONNX_TO_TORCH[elem_type] != value.dtype:
            raise UnsupportedError(
                f"output {name!r} came out {value.dtype} where ONNX gives {onnx_type_name(elem_type)}; "
                "pathweave's converter is wrong here, please report it"
            )
        if shape and dims is not None and (len(dims) != value.dim() or any(
                d is not None and d != s for d, s in zip(dims, value.shape, strict=True))):  # fmt: skip
            raise UnsupportedError(
                f"output {name!r} came out of shape {list(value.shape)} where ONNX infers {dims}; "
                "pathweave's converter is wrong here, please report it"
            )


def _inferred_types(model: Any) -> dict[str, tuple[int, list[int | None] | None]]:
    """ONNX shape inference's dtype and (static) dims of every value it can type."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # the declared outputs below still give types
        inferred = model
    out = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None or not t.elem_type:
            continue
        dims = (
            [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            if t.HasField("shape")
            else None
        )
        out[vi.name] = (t.elem_type, dims)
    return out


def _attributes(node: Any, helper: Any) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _tensor_type(inp: Any, path: Path) -> Any:
    kind = inp.type.WhichOneof("value")
    if kind != "tensor_type":
        raise InputError(f"{path.name}: input {inp.name!r} is a {kind or 'value of no type'}; "
                         "pathweave takes tensor inputs only")  # fmt: skip
    t = inp.type.tensor_type
    if t.elem_type not in ONNX_TO_TORCH:
        raise InputError(f"{path.name}: input {inp.name!r} is a tensor of {onnx_type_name(t.elem_type)}, "
                         "which pathweave does not take")  # fmt: skip
    return t


def _declared(inp: Any, path: Path) -> tuple[torch.dtype, list[int | str] | None]:
    t = _tensor_type(inp, path)
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
    return ONNX_TO_TORCH[t.elem_type], dims if t.HasField("shape") else None


def graph_inputs(model: Any) -> list[Any]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def example_inputs(model: Any, batch: int = 1, path: Path = Path("model.onnx")) -> tuple[torch.Tensor, ...]:
    """Inputs for the graph's declared shapes: floats from a fixed seed, integers as ones (valid ids)."""
    gen = torch.Generator().manual_seed(1234)
    out = []
    for inp in graph_inputs(model):
        dtype, dims = _declared(inp, path)
        if dims is None:
            raise InputError(f"{path.name}: input {inp.name!r} has no declared shape; pass example inputs")
        shape = [d if isinstance(d, int) else batch for d in dims]
        out.append(torch.randn(shape, generator=gen).to(dtype) if dtype.is_floating_point else
                   torch.ones(shape, dtype=dtype))  # fmt: skip
    return tuple(out)


def check_inputs(model: Any, inputs: tuple, path: Path) -> None:
    """``inputs`` must match the graph's inputs in number, dtype and every static dimension."""
    declared = [(inp.name, *_declared(inp, path)) for inp in graph_inputs(model)]
    sig = ", ".join(f"{name!r}: {str(dtype).removeprefix('torch.')} {dims}" for name, dtype, dims in declared)
    if len(inputs) != len(declared):
        raise InputError(f"{path.name} takes {len(declared)} inputs ({sig}); {len(inputs)} were given")
    for i, (value, (name, dtype, dims)) in enumerate(zip(inputs, declared, strict=True)):
        given = (f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
                 if isinstance(value, torch.Tensor) else f"a {type(value).__name__}")  # fmt: skip
        want = f"{str(dtype).removeprefix('torch.')} {dims if dims is not None else '(any shape)'}"
        ok = isinstance(value, torch.Tensor) and value.dtype == dtype
        if ok and dims is not None:
            ok = len(dims) == value.dim() and all(
                not isinstance(d, int) or d == s for d, s in zip(dims, value.shape, strict=True))  # fmt: skip
        if not ok:
            raise InputError(f"{path.name}: input {i} ({name!r}) must be a tensor of {want}; got {given}")


def _opset(model: Any, path: Path) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise UnsupportedError(f"{path.name}: the model imports no default ONNX opset")
    return versions[0]


def _nodes(graph: Any) -> list[Any]:
    """The nodes of ``graph`` and of its If branches (which are inlined)."""
    out = []
    for node in graph.node:
        out.append(node)
        if node.op_type == "If":
            for attr in node.attribute:
                if attr.HasField("g"):
                    out += _nodes(attr.g)
    return out


def _missing_ops(model: Any, path: Path) -> None:
    known = {*CONVERTERS, "Constant", "If"}
    missing = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                      for n in _nodes(model.graph)
                      if n.domain not in ("", "ai.onnx") or n.op_type not in known})  # fmt: skip
    if missing:
        message = f"{path.name}: ONNX ops pathweave cannot convert yet: {', '.join(missing)}"
        raise UnsupportedError(message, missing)


def onnx_module(
    path: Path, inputs: tuple[torch.Tensor, ...] | None = None, batch: int = 1, crosscheck: bool | None = None
) -> tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...]]:
    """The ONNX model at ``path`` as (GraphModule returning a tuple, example inputs); see ``convert``."""
    gm, inputs, _ = convert(path, inputs, batch, crosscheck)
    return gm, inputs


def convert(
    path: Path, inputs: tuple[torch.Tensor, ...] | None = None, batch: int = 1, crosscheck: bool | None = None
) -> tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...], tuple[FixedInput, ...]]:
    """The ONNX model at ``path`` as (GraphModule returning a tuple, example inputs, the inputs whose
    values the graph is specialised on: calls must pass them again, ``Captured.fixed`` checks it).

    A small graph input (at most ``MAX_FIXED_ELEMENTS``) that sets a shape, axes, pads or the like is
    baked into the graph at the value the caller gave; calls must pass the same value
    (``Captured.fixed``). Without ``inputs`` nothing is specialised: such inputs are refused.
    ``crosscheck`` compares the converted graph with onnxruntime where it is installed (default: on,
    unless ``PATHWEAVE_ONNX_CROSSCHECK=0``)."""
    from onnx import helper, numpy_helper

    model = load_model(path)
    _missing_ops(model, path)
    given = bool(inputs)
    inputs = tuple(inputs) if inputs else example_inputs(model, batch, path)
    check_inputs(model, inputs, path)
    b = _Builder(model, numpy_helper, path.name, _opset(model, path))
    b.may_fix = given
    for inp, value in zip(graph_inputs(model), inputs, strict=True):
        b.add_input(inp.name, value)
    for node in model.graph.node:
        _convert_node(b, node, helper, path)
    gm = _module(b, model, path)
    if crosscheck_enabled(crosscheck):
        _check_against_ort(path, gm, inputs)
    return gm, inputs, tuple(sorted(b.fixed.values(), key=lambda f: f.index))


def _convert_node(b: _Builder, node: Any, helper: Any, path: Path) -> None:
    """Convert one node; whatever goes wrong becomes an ``UnsupportedError`` naming it."""
    where = f"{path.name}: {node.op_type} node {node.name!r}"
    try:
        b.convert(node, _attributes(node, helper))
    except PathweaveError as exc:
        raise UnsupportedError(f"{where}: {exc}", [node.op_type]) from exc
    except Exception as exc:  # a safety net: no raw exception leaves the loader
        raise UnsupportedError(
            f"{where}: cannot convert it ({type(exc).__name__}: {first_line(exc)}); pathweave does not "
            f"support this use of {node.op_type}",
            [node.op_type],
        ) from exc


def _module(b: _Builder, model: Any, path: Path) -> torch.fx.GraphModule:
    outs = []
    for o in model.graph.output:
        value = b.values[o.name]
        outs.append(value if value.op == "call_function" else b.graph.call_function(torch.clone, (value,)))
    b.graph.output(tuple(outs))
    b.graph.eliminate_dead_code()  # what computed the shapes the graph was specialised on
    for n in b.graph.nodes:  # example values were only for the converters; capture recomputes shapes
        n.meta.pop("val", None)
    return torch.fx.GraphModule(b.root, b.graph, class_name=path.stem.replace("-", "_") or "onnx_model")


def _propagate(graph: torch.fx.Graph, start: int) -> list[torch.fx.Node]:
    """Run the nodes a converter appended (those after the first ``start``) on the example values,
    so later converters can read shapes."""
    new = list(graph.nodes)[start:]
    for n in new:
        if "val" in n.meta:
            continue
        args = torch.fx.node.map_arg(n.args, lambda a: a.meta["val"])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: a.meta["val"])
        with torch.no_grad():
            n.meta["val"] = n.target(*args, **kwargs)
    return new


def _check_against_ort(path: Path, gm: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        return
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs, strict=True)}
        want = sess.run(None, feed)
    except Exception as exc:  # e.g. an IR version newer than this onnxruntime reads, or a dtype it lacks
        warnings.warn(
            f"{path.name}: not checked against ONNX Runtime, which cannot run it: {exc}", stacklevel=3
        )
        return
    try:
        with torch.no_grad():
            got = gm(*inputs)
        reference = [numpy_to_torch(np.asarray(w), "an ONNX Runtime output") for w in want]
        problem = mismatch(list(got), reference, ORT_RTOL, ORT_ATOL)
    except UnsupportedError as exc:
        warnings.warn(f"{path.name}: not checked against ONNX Runtime: {exc}", stacklevel=3)
        return
    except Exception as exc:  # the converted graph itself failed (out of memory, a kernel's error)
        raise CaptureError(f"{path.name}: the converted graph failed on the example inputs: "
                           f"{first_line(exc)}") from exc  # fmt: skip
    if problem:
        raise CaptureError(f"{path.name}: the converted graph differs from ONNX Runtime: {problem}")
