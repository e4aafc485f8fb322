"""A captured graph as data: JSON nodes plus raw little-endian tensors, read back without torch.export.

``pathweave.load`` reads a saved plan's graph this way instead of through a ``.pt2`` archive: torch's
loader imports dynamo and deserialises through dataclasses (2-4 s for ResNet-50), and the capture
checks run the program eagerly and on fake tensors once more. Here a graph is a list of nodes (name, op,
target, arguments, the shape, stride and dtype of the value) and one raw buffer per constant.

Reading it runs no code: node targets are resolved only as operators passing the same rules as a
``.pt2`` program's (``pt2_program.check_op``: ATen's public ops and a listed few private ones, no file
ops, no raw-memory ops) or as a few ``operator`` functions; names must be identifiers; constants are
plain JSON values or a tagged dtype, device, layout or memory format. The rebuilt graph is then run on
fake tensors and refused if a value passes ``pt2.MAX_ELEMENTS`` (``pt2.bound_graph``), as a program
from a ``.pt2`` file is.
"""

from __future__ import annotations

import keyword
import math
import operator
import re
from typing import Any

import torch
import torch.fx

from pathweave.errors import InputError, UnsupportedError
from pathweave.frontend.pt2_program import MAX_VALUE_BYTES, check_op

#: what a node, attribute or keyword name may be (fx writes names into generated source)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
#: the ``operator`` functions a graph may call (torch.export leaves ``getitem`` on tuple outputs)
OPERATORS = frozenset({"getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "neg", "pow"})
_TAGGED = {"dtype": torch.dtype, "device": torch.device, "layout": torch.layout,
           "memory_format": torch.memory_format}  # fmt: skip


def encode_graph(gm: torch.fx.GraphModule, where: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``gm``'s nodes as JSON and its constants by attribute name; ``UnsupportedError`` for a graph
    holding anything else than operator calls on plain values (submodules, methods, opaque objects)."""
    nodes, constants = [], {}
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_method"):
            raise UnsupportedError(f"{where}: node {node.format_node()} is a {node.op}; not saved as data")
        entry = {"name": node.name, "op": node.op, "target": _target_name(node, where),
                 "args": _encode(node.args, node, where), "kwargs": _encode(node.kwargs, node, where),
                 "val": _encode_val(node.meta.get("val"), node, where)}  # fmt: skip
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_quantized:
                raise UnsupportedError(
                    f"{where}: constant {node.target} is a {type(value).__name__}; not saved"
                )
            constants[node.target] = value.detach()
        nodes.append(entry)
    return {"nodes": nodes}, constants


def _target_name(node: torch.fx.Node, where: str) -> str:
    if node.op != "call_function":
        return str(node.target)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}.{target._overloadname}"
    if getattr(target, "__module__", None) in ("_operator", "operator") and target.__name__ in OPERATORS:
        return f"_operator.{target.__name__}"
    raise UnsupportedError(f"{where}: node {node.format_node()} calls {target!r}; not saved as data")


def _encode(value: Any, node: torch.fx.Node, where: str) -> Any:
    if isinstance(value, torch.fx.Node):
        return {"node": value.name}
    if isinstance(value, (list, tuple)):  # fx's immutable_list and immutable_dict read back as plain ones
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, node, where) for v in value]}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v, node, where) for k, v in value.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    for tag, kind in _TAGGED.items():
        if isinstance(value, kind):
            return {tag: str(value).removeprefix("torch.")}
    raise UnsupportedError(f"{where}: node {node.format_node()} has an argument {value!r}; not saved as data")


def _encode_val(val: Any, node: torch.fx.Node, where: str) -> Any:
    if isinstance(val, torch.Tensor):
        try:
            shape, stride = [int(d) for d in val.shape], [int(s) for s in val.stride()]
        except (TypeError, RuntimeError) as exc:  # symbolic sizes: a graph specialised to no shape
            raise UnsupportedError(f"{where}: node {node.format_node()} has symbolic sizes") from exc
        return {"tensor": [shape, stride, str(val.dtype).removeprefix("torch.")]}
    if isinstance(val, (list, tuple)):
        return {"list": [_encode_val(v, node, where) for v in val]}
    if val is None or isinstance(val, (bool, int, float)) and math.isfinite(val):
        return val
    return None  # a value the passes do not read (symbolic scalars, opaque objects)


def decode_graph(
    data: Any, constants: dict[str, torch.Tensor], class_name: str, where: str
) -> torch.fx.GraphModule:
    """The graph ``encode_graph`` wrote; ``InputError`` naming the node for anything not allowed."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InputError(f"{where}: no node list")
    root = torch.nn.Module()
    for name, t in constants.items():
        _ident(name, where, "a constant's name")
        if keyword.iskeyword(name) or name.startswith("__") or hasattr(root, name):
            raise InputError(f"{where}: constant name {name!r} is a Python keyword or a module attribute")
        root.register_buffer(name, t, persistent=False)
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for i, entry in enumerate(data["nodes"]):
        try:
            node = _node(graph, entry, env, constants)
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
            raise InputError(f"{where}: node {i} cannot be read ({type(exc).__name__}: {exc})") from exc
        except InputError as exc:
            raise InputError(f"{where}: node {i}: {exc}") from exc
        env[entry["name"]] = node
    outputs = [n for n in graph.nodes if n.op == "output"]
    if len(outputs) != 1 or outputs[0] is not graph.output_node():
        raise InputError(f"{where}: the graph needs exactly one output node, last")
    try:
        graph.lint()
        return torch.fx.GraphModule(root, graph, class_name=_ident(class_name, where, "a class name"))
    except (RuntimeError, SyntaxError, KeyError, TypeError) as exc:
        raise InputError(f"{where}: the graph is not well formed ({type(exc).__name__}: {exc})") from exc


def _node(
    graph: torch.fx.Graph, entry: dict, env: dict[str, torch.fx.Node], constants: dict
) -> torch.fx.Node:
    name, op = _ident(entry["name"], "", "a node name"), entry["op"]
    if name in env:
        raise InputError(f"{name} is defined twice")
    args = _decode(entry["args"], env)
    kwargs = _decode(entry["kwargs"], env)
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        raise InputError(f"{name}: arguments are not a tuple and a dict")
    if op in ("placeholder", "get_attr"):
        target = _ident(entry["target"], "", "a target name")
        if op == "get_attr" and target not in constants:
            raise InputError(f"{name} reads a constant the file does not hold ({target!r})")
    elif op == "call_function":
        target = _resolve(entry["target"])
    elif op == "output":
        target = "output"
    else:
        raise InputError(f"{name}: op {op!r} is not one pathweave reads from a file")
    node = graph.create_node(op, target, args, kwargs, name=name)
    node.meta["val"] = _decode_val(entry["val"])
    return node


def _ident(text: Any, where: str, what: str) -> str:
    if not isinstance(text, str) or not IDENT.fullmatch(text):
        raise InputError(f"{where}{': ' if where else ''}{str(text)[:80]!r} is not {what}")
    return text


def _resolve(target: Any) -> Any:
    if not isinstance(target, str):
        raise InputError(f"target {target!r} is not a name")
    if target.startswith("_operator."):
        name = target.removeprefix("_operator.")
        if name not in OPERATORS:
            raise InputError(f"target {target!r} is not an operator pathweave reads from a file")
        return getattr(operator, name)
    check_op(target, "target")
    _torch, _ops, namespace, op, overload = target.split(".")
    packet = getattr(getattr(torch.ops, namespace), op)
    return getattr(packet, overload)


def _decode(value: Any, env: dict[str, torch.fx.Node]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise InputError(f"argument {str(value)[:80]!r} is not a value pathweave writes")
    ((tag, inner),) = value.items()
    if tag == "node":
        if inner not in env:
            raise InputError(f"argument names node {inner!r}, not defined before")
        return env[inner]
    if tag in ("list", "tuple") and isinstance(inner, list):
        items = [_decode(v, env) for v in inner]
        return items if tag == "list" else tuple(items)
    if tag == "dict" and isinstance(inner, dict):
        return {_ident(k, "", "a keyword"): _decode(v, env) for k, v in inner.items()}
    if tag == "float" and inner in ("inf", "-inf", "nan"):
        return float(inner)
    if tag in _TAGGED and isinstance(inner, str) and IDENT.fullmatch(inner.replace(":", "_")):
        return torch.device(inner) if tag == "device" else _torch_attr(inner, _TAGGED[tag])
    raise InputError(f"argument {str(value)[:80]!r} is not a value pathweave writes")


def _torch_attr(name: str, kind: type) -> Any:
    value = getattr(torch, name, None)
    if not isinstance(value, kind):
        raise InputError(f"{name!r} is not a torch {kind.__name__}")
    return value


def _decode_val(val: Any) -> Any:
    """The node's value as a meta tensor (shape, stride, dtype: what the passes read), bounded in size."""
    if val is None or isinstance(val, (bool, int, float)):
        return val
    if isinstance(val, dict) and "list" in val:
        return [_decode_val(v) for v in val["list"]]
    if isinstance(val, dict) and "tensor" in val:
        shape, stride, dtype = val["tensor"]
        dt = _torch_attr(dtype, torch.dtype)
        shape = [int(d) for d in shape]
        if min(shape, default=0) < 0 or math.prod(shape) * dt.itemsize > MAX_VALUE_BYTES:
            raise InputError(
                f"a value of shape {shape} {dtype}: over the {MAX_VALUE_BYTES >> 30} GiB allowed"
            )
        return torch.empty_strided(shape, [int(s) for s in stride], dtype=dt, device="meta")
    raise InputError(f"value {str(val)[:80]!r} is not one pathweave writes")
