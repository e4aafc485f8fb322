"""fx nodes to tile range maps: which ATen ops become tiled layers, which are views folded into their
consumers, and for each the region of every tensor input that an output region reads.

``plan_nodes(gm)`` classifies a whole graph and lists every node it cannot map at once, in one
``UnsupportedError``. Nodes that produce no tensor (``_assert_tensor_metadata``) are left out.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.errors import UnsupportedError
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles import ranges as tr
from pathweave.tiles.ranges import Region

#: tiled tensors have at most this many dims (tile regions are stored padded to it)
MAX_DIMS = 4

RegionMap = Callable[[Region], Region | None]
#: an input node and the map from a region of this node's output to the region of that input it reads
Source = tuple[torch.fx.Node, RegionMap]


@dataclass(frozen=True)
class NodeMaps:
    """How one node takes part in the tile graph: a ``layer`` is tiled and reads its ``sources``; a
    ``view`` has one source and no tiles: its consumers read through its map."""

    role: Literal["layer", "view"]
    sources: tuple[Source, ...]


class _Unsupported(Exception):
    """Why one node cannot be mapped (collected into one UnsupportedError)."""


ELEMENTWISE = {
    "relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu",
    "neg", "exp", "log", "sqrt", "rsqrt", "abs", "erf", "sign", "reciprocal", "square", "sin", "cos", "pow",
    "clamp", "clamp_min", "clamp_max", "add", "sub", "rsub", "mul", "div", "where", "maximum", "minimum",
    "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
    "bitwise_not", "addcmul", "addcdiv", "lerp",
}  # fmt: skip
#: element-wise in ``self`` only: a second tensor (``to.other``, ``type_as``) gives just a dtype
CONVERSIONS = {"to", "_to_copy", "type_as"}
#: ops that make a tensor from nothing but sizes (``zeros_like`` reads only its input's shape)
CREATION = {
    "arange", "zeros", "ones", "full", "empty", "scalar_tensor", "zeros_like", "ones_like", "full_like",
    "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
}  # fmt: skip
IDENTITY_VIEWS = {"alias", "detach", "clone", "contiguous", "dropout", "lift_fresh_copy"}
RESHAPES = {"view", "_unsafe_view", "reshape", "flatten", "unflatten"}
#: views returning several tensors: ``getitem`` picks one piece, they have no map of their own
MULTI_VIEWS = {"split", "split_with_sizes", "unbind", "chunk"}


def bound_args(node: torch.fx.Node) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        else:
            out[arg.name] = arg.default_value if arg.has_default_value() else None
    return out


def shape(node: torch.fx.Node) -> tuple[int, ...]:
    """The node's (first) tensor output shape."""
    specs = tensor_specs(node)
    if not specs:
        raise _Unsupported(f"{node.name} has no tensor shape (node.meta['val'])")
    return specs[0].shape


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.fx.Node) and bool(tensor_specs(value))


def _dim(d: int, nd: int) -> int:
    return d % nd if nd else 0


def as_ints(value: Any, n: int) -> list[int]:
    """An int or a list of 1 or n ints as n ints."""
    if isinstance(value, int):
        return [value] * n
    vals = [int(v) for v in value]
    return vals * n if len(vals) == 1 else vals


# ---- layers ----------------------------------------------------------------------------------------------


def _elementwise(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return [(v, partial(tr.broadcast_input, in_shape=shape(v))) for v in args.values() if _is_tensor(v)]


def _conversion(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return [(args["self"], lambda r: r)]


def _channel_params(args: dict[str, Any], names: tuple[str, ...]) -> list[Source]:
    """Per-channel parameters (dim 1 of the output) read at the output's channels."""
    return [(args[n], lambda r: (r[1],)) for n in names if _is_tensor(args.get(n))]


def _batch_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["input"]
    nd = len(shape(x))
    if args.get("training"):  # batch statistics: a channel reads all of its positions
        others = [d for d in range(nd) if d != 1]
        source: Source = (x, partial(tr.reduce_input, in_shape=shape(x), dims=others, keepdim=True))
    else:
        source = (x, lambda r: r)
    return [source, *_channel_params(args, ("weight", "bias", "running_mean", "running_var"))]


def _layer_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x, k = args["input"], len(args["normalized_shape"])
    nd = len(shape(x))
    dims = list(range(nd - k, nd))
    out = [(x, partial(tr.reduce_input, in_shape=shape(x), dims=dims, keepdim=True))]
    return out + [(args[n], lambda r: r[len(r) - k :]) for n in ("weight", "bias") if _is_tensor(args[n])]


def _softmax(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    return [(x, partial(tr.reduce_input, in_shape=shape(x), dims=[args["dim"]], keepdim=True))]


def _reduction(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    nd = len(shape(x))
    dims = args.get("dim")
    dims = list(range(nd)) if dims is None or dims == [] else as_ints(dims, 1)
    keepdim = bool(args.get("keepdim", False))
    return [(x, partial(tr.reduce_input, in_shape=shape(x), dims=dims, keepdim=keepdim))]


def _conv(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    if args.get("transposed"):
        raise _Unsupported("transposed convolution")
    x, w = args["input"], args["weight"]
    x_shape, w_shape = shape(x), shape(w)
    spatial = len(w_shape) - 2
    stride, dilation = as_ints(args["stride"], spatial), as_ints(args["dilation"], spatial)
    padding = args["padding"]
    if isinstance(padding, str):  # 'valid' or 'same' (the odd padding goes after, as torch does)
        taps = zip(dilation, w_shape[2:], strict=True)
        padding = [0 if padding == "valid" else d * (k - 1) // 2 for d, k in taps]
    conv = partial(
        tr.conv_input, in_shape=x_shape, weight_shape=w_shape, stride=stride,
        padding=as_ints(padding, spatial), dilation=dilation, groups=int(args["groups"]),
    )  # fmt: skip
    c_dim = len(x_shape) - spatial - 1
    out: list[Source] = [(x, conv)]
    if _is_tensor(w):
        out.append((w, lambda r: (r[c_dim], *tr.whole(w_shape[1:]))))
    if _is_tensor(args.get("bias")):
        out.append((args["bias"], lambda r: (r[c_dim],)))
    return out


def _conv_act(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """``tile_fuse``'s conv2d + residual + activation: the residual is read at the output's positions."""
    residual = args.get("residual")
    return _conv(node, args) + ([(residual, lambda r: r)] if _is_tensor(residual) else [])


def _pool(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    kernel = as_ints(args["kernel_size"], 2)
    stride = as_ints(args["stride"], 2) if args["stride"] else kernel
    dilation = as_ints(args.get("dilation", 1), 2)
    pool = partial(
        tr.pool_input, in_shape=shape(x), kernel=kernel, stride=stride,
        padding=as_ints(args["padding"], 2), dilation=dilation,
    )  # fmt: skip
    return [(x, pool)]


def _adaptive_pool(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    return [(x, partial(tr.adaptive_pool_input, in_shape=shape(x), out_shape=shape(node)))]


def _upsample_nearest(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args.get("input", args.get("self"))
    if "scale_factors" in args:  # the .vec overload: a size or a factor per dim
        scales = list(args["scale_factors"] or [None, None])
    else:
        scales = [args.get("scales_h"), args.get("scales_w")]
    scales = scales * (2 if len(scales) == 1 else 1)
    up = partial(tr.upsample_nearest_input, in_shape=shape(x), out_shape=shape(node), scales=scales)
    return [(x, up)]


def _linear(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x, w, b = args["input"], args["weight"], args.get("bias")
    k = shape(x)[-1]
    out: list[Source] = [(x, partial(tr.linear_input, in_shape=shape(x)))]
    if _is_tensor(w):
        out.append((w, lambda r: (r[-1], (0, k))))
    if _is_tensor(b):
        out.append((b, lambda r: (r[-1],)))
    return out


def _matmul(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    names = ("batch1", "batch2") if "batch1" in args else ("mat1", "mat2") if "mat1" in args else None
    a, b = (args[names[0]], args[names[1]]) if names else (args["self"], args.get("other", args.get("mat2")))
    a_shape, b_shape = shape(a), shape(b)
    out: list[Source] = [
        (a, lambda r: tr.matmul_inputs(r, a_shape, b_shape)[0]),
        (b, lambda r: tr.matmul_inputs(r, a_shape, b_shape)[1]),
    ]
    if names and _is_tensor(args["self"]):  # addmm / baddbmm: the added term broadcasts
        out.append((args["self"], partial(tr.broadcast_input, in_shape=shape(args["self"]))))
    for term in ("bias", "residual"):  # tile_fuse_matmul's matmul_add: terms that broadcast
        if _is_tensor(args.get(term)):
            out.append((args[term], partial(tr.broadcast_input, in_shape=shape(args[term]))))
    return out


def _embedding(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    table = args["weight"]
    rows = shape(table)[0]
    # which rows are read depends on the index values: all of them (columns as the output's)
    return [(args["indices"], tr.embedding_input), (table, lambda r: ((0, rows), r[-1]))]


def _cat(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    nd = len(shape(node))
    dim = _dim(args["dim"], nd)
    out: list[Source] = []
    offset = 0
    for t in args["tensors"]:
        t_shape = shape(t)
        size = t_shape[dim] if math.prod(t_shape) else 0  # torch skips empty 1-D inputs
        out.append((t, partial(tr.cat_piece, dim=dim, offset=offset, size=size)))
        offset += size
    return out


def _stack(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    dim = _dim(args["dim"], len(shape(node)))
    return [(t, partial(tr.stack_piece, dim=dim, index=i)) for i, t in enumerate(args["tensors"])]


def _pad(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    if args.get("mode", "constant") != "constant":
        raise _Unsupported(f"pad mode {args['mode']!r} (only 'constant' is mapped)")
    x = args["self"]
    return [(x, partial(tr.pad_input, in_shape=shape(x), pad=[int(p) for p in args["pad"]]))]


def _creation(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return []


LayerRule = Callable[[torch.fx.Node, dict[str, Any]], list[Source]]
LAYERS: dict[str, LayerRule] = {
    **dict.fromkeys(ELEMENTWISE, _elementwise),
    **dict.fromkeys(CONVERSIONS, _conversion),
    **dict.fromkeys(CREATION, _creation),
    **dict.fromkeys(("batch_norm", "_native_batch_norm_legit_no_training", "batch_norm_act"), _batch_norm),
    **dict.fromkeys(("layer_norm", "native_layer_norm"), _layer_norm),
    **dict.fromkeys(("softmax", "_softmax", "log_softmax", "_log_softmax"), _softmax),
    **dict.fromkeys(("sum", "mean", "amax", "amin"), _reduction),
    **dict.fromkeys(("conv1d", "conv2d", "convolution"), _conv),
    "conv2d_act": _conv_act,
    **dict.fromkeys(("max_pool2d", "max_pool2d_with_indices", "avg_pool2d"), _pool),
    **dict.fromkeys(("adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_max_pool2d"), _adaptive_pool),
    "upsample_nearest2d": _upsample_nearest,
    **dict.fromkeys(("linear", "linear_act"), _linear),
    **dict.fromkeys(("matmul", "mm", "bmm", "addmm", "baddbmm", "matmul_add"), _matmul),
    "embedding": _embedding,
    "cat": _cat,
    "cat_batch_norm_act": lambda node, args: [
        *_cat(node, args),
        *_channel_params(args, ("weight", "bias", "running_mean", "running_var")),
    ],
    "stack": _stack,
    **dict.fromkeys(("pad", "constant_pad_nd"), _pad),
}


# ---- views -----------------------------------------------------------------------------------------------


def _reshape(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    in_shape, out_shape = shape(x), shape(node)
    groups = tr.reshape_groups(in_shape, out_shape)
    return x, partial(tr.reshape_input, in_shape=in_shape, out_shape=out_shape, groups=groups)


def _permute(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    nd = len(shape(x))
    name = op_name(node)
    if name == "permute":
        perm = [_dim(d, nd) for d in args["dims"]]
    else:
        a, b = (0, 1) if name == "t" else (_dim(args["dim0"], nd), _dim(args["dim1"], nd))
        perm = list(range(nd))
        if nd >= 2:
            perm[a], perm[b] = perm[b], perm[a]
    return x, partial(tr.permute_input, perm=perm)


def _slice(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dim = _dim(args["dim"], len(x_shape))
    n = x_shape[dim]
    start = args["start"] if args.get("start") is not None else 0
    start = min(max(start + n if start < 0 else start, 0), n)
    step = int(args.get("step") or 1)
    return x, partial(tr.slice_input, dim=dim, start=start, step=step)


def _select(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dim = _dim(args["dim"], len(x_shape))
    index = args["index"] + x_shape[dim] if args["index"] < 0 else args["index"]
    return x, partial(tr.select_input, dim=dim, index=index)


def _unsqueeze(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    return args["self"], partial(tr.unsqueeze_input, dim=_dim(args["dim"], len(shape(node))))


def _squeeze(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dims = args.get("dim")
    dims = list(range(len(x_shape))) if dims is None else as_ints(dims, 1)
    return x, partial(tr.squeeze_input, in_shape=x_shape, dims=dims)


def _expand(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    return x, partial(tr.broadcast_input, in_shape=shape(x))


def _identity(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    return args.get("self", args.get("input")), lambda r: r


ViewRule = Callable[[torch.fx.Node, dict[str, Any]], Source]
VIEWS: dict[str, ViewRule] = {
    **dict.fromkeys(IDENTITY_VIEWS, _identity),
    **dict.fromkeys(RESHAPES, _reshape),
    **dict.fromkeys(("permute", "transpose", "t"), _permute),
    **dict.fromkeys(("slice", "narrow"), _slice),
    "select": _select,
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "expand": _expand,
}


def _getitem(node: torch.fx.Node, layers: set[torch.fx.Node]) -> Source:
    """``x[i]`` of a split-like view (a slice of its input) or of a layer with several outputs."""
    src, i = node.args[0], node.args[1]
    if not isinstance(src, torch.fx.Node) or not isinstance(i, int):
        raise _Unsupported("getitem of something that is neither a split nor a layer")
    if src in layers:  # e.g. batch norm's (out, mean, invstd): the tiles are out's
        same = shape(node) == shape(src)
        whole = tr.whole(shape(src))
        return src, (lambda r: r) if same else (lambda r: whole)
    name = op_name(src)
    if name not in MULTI_VIEWS:
        raise _Unsupported(f"getitem of {name}")
    args = bound_args(src)
    x = args["self"]
    x_shape = shape(x)
    dim = _dim(args["dim"], len(x_shape))
    if name == "unbind":
        return x, partial(tr.select_input, dim=dim, index=i)
    if name == "split_with_sizes":
        start = sum(args["split_sizes"][:i])
    else:
        size = args["split_size"] if name == "split" else -(-x_shape[dim] // args["chunks"])
        start = i * size
    return x, partial(tr.slice_input, dim=dim, start=start, step=1)


def _copies(node: torch.fx.Node, layers: set[torch.fx.Node]) -> bool:
    """Whether a reshape cannot view its input (flatten of a transposed tensor): its chain of views,
    replayed on a contiguous meta tensor of the shape under it (every layer, input and constant is
    contiguous in a tile program), gives no view at the end."""
    chain = []
    src = node
    while src.op == "call_function" and src not in layers:
        name = op_name(src)
        if name == "getitem" and src.args[0] in layers:
            break  # a layer's first output: its own buffer
        if name not in VIEWS and name not in MULTI_VIEWS and name != "getitem":
            break
        chain.append(src)
        src = src.all_input_nodes[0]
    base = t = torch.empty(shape(src), device="meta")
    for view in reversed(chain):
        if op_name(view) not in IDENTITY_VIEWS:
            args = torch.fx.node.map_arg(view.args, partial(_stand_in, node=src, value=t))
            try:
                t = view.target(*args, **view.kwargs)
            except RuntimeError:  # ``view`` of a layout it cannot view (after ``contiguous``): a copy
                return True
        src = view
    return isinstance(t, torch.Tensor) and t is not base and not t._is_view()


def _stand_in(arg: Any, node: torch.fx.Node, value: Any) -> Any:
    return value if arg is node else arg


def plan_nodes(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, NodeMaps]:
    """Every layer and view of the graph with its sources, in graph order. Raises one UnsupportedError
    naming every node that cannot be mapped."""
    plans: dict[torch.fx.Node, NodeMaps] = {}
    layers: set[torch.fx.Node] = set()
    failed: dict[torch.fx.Node, str] = {}
    for node in gm.graph.nodes:
        if node.target is operator.getitem and node.args[0] in failed:
            continue  # a piece of an op already named
        try:
            plan = _plan(node, layers)
        except _Unsupported as exc:
            failed[node] = str(exc)
            continue
        if plan is not None:
            plans[node] = plan
            if plan.role == "layer":
                layers.add(node)
    if failed:
        lines = "\n".join(f"  {n.format_node()}\n    -> {why}" for n, why in failed.items())
        raise UnsupportedError(
            f"{len(failed)} node(s) have no tile range map; the tile graph covers the ATen ops that "
            f"pathweave.tiles.ops lists:\n{lines}",
            ops=sorted({op_name(n) for n in failed}),
        )
    return plans


def _plan(node: torch.fx.Node, layers: set[torch.fx.Node]) -> NodeMaps | None:
    if node.op in ("placeholder", "get_attr", "output"):
        return None
    if node.op != "call_function":
        raise _Unsupported(f"{node.op} node: tile graphs need an ATen graph (capture with torch.export)")
    name = op_name(node)
    if name == "getitem":
        return NodeMaps("view", (_getitem(node, layers),))
    if not hasattr(node.target, "_schema"):
        raise _Unsupported(f"{name} is not an ATen op: tile graphs need an ATen graph (torch.export)")
    if not tensor_specs(node) or name in MULTI_VIEWS:
        return None  # no tensor (assertions), or pieces only getitem reads
    if name in VIEWS:
        source = VIEWS[name](node, bound_args(node))
        if name in RESHAPES and _copies(node, layers):  # a layer that copies, with the view's map
            return NodeMaps("layer", (source,))
        return NodeMaps("view", (source,))
    if name not in LAYERS:
        raise _Unsupported(f"no range map for {name}")
    if len(shape(node)) > MAX_DIMS:
        raise _Unsupported(f"a {len(shape(node))}-D output; tiled tensors have at most {MAX_DIMS} dims")
    return NodeMaps("layer", tuple(LAYERS[name](node, bound_args(node))))
