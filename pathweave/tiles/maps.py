"""Range maps: for each ATen op, the region of every tensor input that a region of its output reads.

A layer's map gives all its sources (``LayerMap``), a view's its one source (``ViewMap``); the op table
(``tiles.ops``) names which map each op takes. Also the argument helpers the maps share and the op
families they are grouped by.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch.fx

from pathweave.analysis.ops import op_name
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles import ranges as tr
from pathweave.tiles.ranges import Region
from pathweave.tiles.resize import resize_of, source_index

RegionMap = Callable[[Region], Region | None]
#: an input node and the map from a region of this node's output to the region of that input it reads
Source = tuple[torch.fx.Node, RegionMap]
LayerMap = Callable[[torch.fx.Node, dict[str, Any]], list[Source]]
ViewMap = Callable[[torch.fx.Node, dict[str, Any]], Source]


@dataclass(frozen=True)
class NodeMaps:
    """How one node takes part in the tile graph: a ``layer`` is tiled and reads its ``sources``; a
    ``view`` has one source and no tiles: its consumers read through its map."""

    role: Literal["layer", "view"]
    sources: tuple[Source, ...]


class Unmapped(Exception):
    """Why one node cannot be mapped (``plan_nodes`` collects them into one UnsupportedError)."""


ELEMENTWISE = {
    "relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu",
    "neg", "exp", "log", "sqrt", "rsqrt", "abs", "erf", "sign", "reciprocal", "square", "sin", "cos", "pow",
    "clamp", "clamp_min", "clamp_max", "add", "sub", "rsub", "mul", "div", "where", "maximum", "minimum",
    "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
    "bitwise_not", "addcmul", "addcdiv", "lerp", "bitwise_and", "bitwise_or", "bitwise_xor", "__and__",
    "__or__", "__xor__", "isnan",
}  # fmt: skip
#: element-wise in ``self`` only: a second tensor (``to.other``, ``type_as``) gives just a dtype
CONVERSIONS = {"to", "_to_copy", "type_as"}
#: ops that make a tensor from nothing but sizes (``zeros_like`` reads only its input's shape)
CREATION = {
    "arange", "zeros", "ones", "full", "empty", "scalar_tensor", "zeros_like", "ones_like", "full_like",
    "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
}  # fmt: skip
#: every convolution the table maps (``fuse_epilogue``'s conv2d_act and ``fuse_depthwise``'s dw_pw_conv
#: among them)
CONVOLUTIONS = {"conv1d", "conv2d", "convolution", "conv2d_act", "dw_pw_conv"}
BATCH_NORMS = {"batch_norm", "_native_batch_norm_legit_no_training", "batch_norm_act"}
LAYER_NORMS = {"layer_norm", "native_layer_norm"}
GROUP_NORMS = {"group_norm", "native_group_norm"}
#: reductions over dims (``reduction``'s map; ``bind_reduce.reduce``)
REDUCTIONS = {"sum", "mean", "amax", "amin", "var", "std"}
SOFTMAXES = {"softmax", "_softmax", "log_softmax", "_log_softmax"}
IDENTITY_VIEWS = {"alias", "detach", "clone", "contiguous", "dropout", "lift_fresh_copy"}
RESHAPES = {"view", "_unsafe_view", "reshape", "flatten", "unflatten"}
TRANSPOSES = {"permute", "transpose", "t"}
SLICES = {"slice", "narrow"}
#: every op that is a view with a map of its own (``ViewMap``)
VIEW_OPS = IDENTITY_VIEWS | RESHAPES | TRANSPOSES | SLICES | {"select", "unsqueeze", "squeeze", "expand"}
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
        raise Unmapped(f"{node.name} has no tensor shape (node.meta['val'])")
    return specs[0].shape


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.fx.Node) and bool(tensor_specs(value))


def norm_dim(d: int, nd: int) -> int:
    """A dim index in 0..nd-1 (0 for a scalar)."""
    return d % nd if nd else 0


def as_ints(value: Any, n: int) -> list[int]:
    """An int or a list of 1 or n ints as n ints."""
    if isinstance(value, int):
        return [value] * n
    vals = [int(v) for v in value]
    return vals * n if len(vals) == 1 else vals


# ---- layers ----------------------------------------------------------------------------------------------


def elementwise(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return [(v, partial(tr.broadcast_input, in_shape=shape(v))) for v in args.values() if is_tensor(v)]


def conversion(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return [(args["self"], lambda r: r)]


def _channel_params(args: dict[str, Any], names: tuple[str, ...]) -> list[Source]:
    """Per-channel parameters (dim 1 of the output) read at the output's channels."""
    return [(args[n], lambda r: (r[1],)) for n in names if is_tensor(args.get(n))]


def batch_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["input"]
    nd = len(shape(x))
    if args.get("training"):  # batch statistics: a channel reads all of its positions
        others = [d for d in range(nd) if d != 1]
        source: Source = (x, partial(tr.reduce_input, in_shape=shape(x), dims=others, keepdim=True))
    else:
        source = (x, lambda r: r)
    return [source, *_channel_params(args, ("weight", "bias", "running_mean", "running_var"))]


def layer_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x, k = args["input"], len(args["normalized_shape"])
    nd = len(shape(x))
    dims = list(range(nd - k, nd))
    out = [(x, partial(tr.reduce_input, in_shape=shape(x), dims=dims, keepdim=True))]
    return out + [(args[n], lambda r: r[len(r) - k :]) for n in ("weight", "bias") if is_tensor(args[n])]


def softmax(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    return [(x, partial(tr.reduce_input, in_shape=shape(x), dims=[args["dim"]], keepdim=True))]


def reduction(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    nd = len(shape(x))
    dims = args.get("dim")
    dims = list(range(nd)) if dims is None or dims == [] else as_ints(dims, 1)
    keepdim = bool(args.get("keepdim", False))
    return [(x, partial(tr.reduce_input, in_shape=shape(x), dims=dims, keepdim=keepdim))]


def group_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """A tile's channels read their groups whole, every position of them; weight and bias per channel."""
    x = args["input"]
    x_shape = shape(x)
    per = x_shape[1] // group_count(args) if len(x_shape) >= 2 else 1

    def groups(r: Region) -> Region:
        lo, hi = tr.bounds(r[1])
        return (r[0], (lo // per * per, -(-hi // per) * per), *tr.whole(x_shape[2:]))

    return [(x, groups), *_channel_params(args, ("weight", "bias"))]


def group_count(args: dict[str, Any]) -> int:
    """The number of groups of group_norm (``num_groups``) or native_group_norm (``group``)."""
    return int(args["num_groups"] if "num_groups" in args else args["group"])


def roll(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """torch.roll along its dims: an output range reads the input range shifted back, or the whole dim
    where that range wraps around; a roll of the flattened tensor (no dims) reads it all."""
    x = args["self"]
    x_shape = shape(x)
    shifts = roll_shifts(args, x_shape)
    if shifts is None:
        return [(x, lambda r: tr.whole(x_shape))]

    def back(r: Region) -> Region:
        out = []
        for d, entry in enumerate(r):
            lo, hi = tr.bounds(entry)
            start = (lo - shifts[d]) % x_shape[d] if x_shape[d] else 0
            out.append((start, start + hi - lo) if start + hi - lo <= x_shape[d] else (0, x_shape[d]))
        return tuple(out)

    return [(x, back)]


def roll_shifts(args: dict[str, Any], x_shape: tuple[int, ...]) -> list[int] | None:
    """torch.roll's shift per dim, each in [0, n); None for a roll of the flattened tensor (no dims)."""
    dims = args.get("dims")
    if dims is None or dims == []:
        return None
    shifts, dims = as_ints(args["shifts"], 1), as_ints(dims, 1)
    if len(shifts) != len(dims):
        raise Unmapped(f"roll with {len(shifts)} shifts for {len(dims)} dims")
    total = [0] * len(x_shape)
    for s, d in zip(shifts, dims, strict=True):
        d = norm_dim(d, len(x_shape))
        total[d] = (total[d] + s) % x_shape[d] if x_shape[d] else 0
    return total


def conv(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    if args.get("transposed"):
        raise Unmapped("transposed convolution")
    x, w = args["input"], args["weight"]
    x_shape, w_shape = shape(x), shape(w)
    spatial = len(w_shape) - 2
    stride, dilation = as_ints(args["stride"], spatial), as_ints(args["dilation"], spatial)
    padding = args["padding"]
    if isinstance(padding, str):  # 'valid' or 'same' (the odd padding goes after, as torch does)
        taps = zip(dilation, w_shape[2:], strict=True)
        padding = [0 if padding == "valid" else d * (k - 1) // 2 for d, k in taps]
    window = partial(
        tr.conv_input, in_shape=x_shape, weight_shape=w_shape, stride=stride,
        padding=as_ints(padding, spatial), dilation=dilation, groups=int(args["groups"]),
    )  # fmt: skip
    c_dim = len(x_shape) - spatial - 1
    out: list[Source] = [(x, window)]
    if is_tensor(w):
        out.append((w, lambda r: (r[c_dim], *tr.whole(w_shape[1:]))))
    if is_tensor(args.get("bias")):
        out.append((args["bias"], lambda r: (r[c_dim],)))
    return out


def conv_act(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """``fuse_epilogue``'s conv2d + residual + activation: the residual is read at the output's positions;
    ``fuse_scale``'s gate ([N, C, 1, 1]) at the output's images, every channel."""
    residual, scale = args.get("residual"), args.get("scale")
    out = conv(node, args) + ([(residual, lambda r: r)] if is_tensor(residual) else [])
    if is_tensor(scale):
        channels = shape(scale)[1]
        out.append((scale, lambda r: (r[0], (0, channels), (0, 1), (0, 1))))
    return out


def dw_pw_conv(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """``fuse_depthwise``'s depthwise + 1x1 convolution: a region of the output reads the depthwise
    window of its positions in every input channel (the 1x1 product sums over all of them), and the
    residual at its own positions; weights and biases whole."""
    x, dw_w = args["input"], args["dw_weight"]
    x_shape, w_shape = shape(x), shape(dw_w)
    window = partial(
        tr.conv_input, in_shape=x_shape, weight_shape=w_shape, stride=as_ints(args["stride"], 2),
        padding=as_ints(args["padding"], 2), dilation=as_ints(args["dilation"], 2), groups=x_shape[1],
    )  # fmt: skip
    out: list[Source] = [(x, lambda r: window((r[0], (0, w_shape[0]), *r[2:])))]
    for key in ("dw_weight", "dw_bias", "weight", "bias"):
        if is_tensor(args.get(key)):
            out.append((args[key], partial(lambda r, whole: whole, whole=tr.whole(shape(args[key])))))
    if is_tensor(args.get("residual")):
        out.append((args["residual"], lambda r: r))
    return out


def pool(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """max_pool2d, avg_pool2d and ``commute_pool``'s avg_pool2d_act (its bias per channel)."""
    x = args.get("self", args.get("input"))
    kernel = as_ints(args["kernel_size"], 2)
    stride = as_ints(args["stride"], 2) if args["stride"] else kernel
    dilation = as_ints(args.get("dilation", 1), 2)
    window = partial(
        tr.pool_input, in_shape=shape(x), kernel=kernel, stride=stride,
        padding=as_ints(args["padding"], 2), dilation=dilation,
    )  # fmt: skip
    bias = args.get("bias")
    return [(x, window)] + ([(bias, lambda r: (r[1],))] if is_tensor(bias) else [])


def adaptive_pool(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x = args["self"]
    return [(x, partial(tr.adaptive_pool_input, in_shape=shape(x), out_shape=shape(node)))]


def upsample(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """Nearest and bilinear 2-D upsampling: the rows and columns eager reads (``tiles.resize``). Exact
    when upsampling; a bounding box when a dim shrinks (it skips positions)."""
    r = resize_of(node, args)
    rows, cols = source_index(r, 0), source_index(r, 1)

    def window(region: Region) -> Region:
        (h0, h1), (w0, w1) = region[2], region[3]
        return (*region[:2], (int(rows[h0, 0]), int(rows[h1 - 1, 1]) + 1),
                (int(cols[w0, 0]), int(cols[w1 - 1, 1]) + 1))  # fmt: skip

    return [(args.get("input", args.get("self")), window)]


def pixel_shuffle(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """``pixel_shuffle`` by r: output channel c at (h, w) reads input channel (c r + h % r) r + w % r at
    (h / r, w / r); a box of the output reads the channels [c0 r^2, c1 r^2) (every offset)."""
    r = int(args["upscale_factor"])

    def window(region: Region) -> Region:
        (c0, c1), (h0, h1), (w0, w1) = region[-3], region[-2], region[-1]
        return (*region[:-3], (c0 * r * r, c1 * r * r), (h0 // r, (h1 - 1) // r + 1),
                (w0 // r, (w1 - 1) // r + 1))  # fmt: skip

    return [(args["self"], window)]


def linear(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    x, w, b = args["input"], args["weight"], args.get("bias")
    k = shape(x)[-1]
    out: list[Source] = [(x, partial(tr.linear_input, in_shape=shape(x)))]
    if is_tensor(w):
        out.append((w, lambda r: (r[-1], (0, k))))
    if is_tensor(b):
        out.append((b, lambda r: (r[-1],)))
    return out


def matmul(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    names = ("batch1", "batch2") if "batch1" in args else ("mat1", "mat2") if "mat1" in args else None
    a, b = (args[names[0]], args[names[1]]) if names else (args["self"], args.get("other", args.get("mat2")))
    a_shape, b_shape = shape(a), shape(b)
    out: list[Source] = [
        (a, lambda r: tr.matmul_inputs(r, a_shape, b_shape)[0]),
        (b, lambda r: tr.matmul_inputs(r, a_shape, b_shape)[1]),
    ]
    if names and is_tensor(args["self"]):  # addmm / baddbmm: the added term broadcasts
        out.append((args["self"], partial(tr.broadcast_input, in_shape=shape(args["self"]))))
    for term in ("bias", "residual"):  # fuse_matmul's matmul_add: terms that broadcast
        if is_tensor(args.get(term)):
            out.append((args[term], partial(tr.broadcast_input, in_shape=shape(args[term]))))
    return out


def embedding(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    table = args["weight"]
    rows = shape(table)[0]
    # which rows are read depends on the index values: all of them (columns as the output's)
    return [(args["indices"], tr.embedding_input), (table, lambda r: ((0, rows), r[-1]))]


def cat(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    nd = len(shape(node))
    dim = norm_dim(args["dim"], nd)
    out: list[Source] = []
    offset = 0
    for t in args["tensors"]:
        t_shape = shape(t)
        size = t_shape[dim] if math.prod(t_shape) else 0  # torch skips empty 1-D inputs
        out.append((t, partial(tr.cat_piece, dim=dim, offset=offset, size=size)))
        offset += size
    return out


def cat_batch_norm(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    """``fuse_epilogue``'s cat + batch norm + activation: the pieces, then the per-channel statistics."""
    return [*cat(node, args), *_channel_params(args, ("weight", "bias", "running_mean", "running_var"))]


def stack(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    dim = norm_dim(args["dim"], len(shape(node)))
    return [(t, partial(tr.stack_piece, dim=dim, index=i)) for i, t in enumerate(args["tensors"])]


def pad(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    if args.get("mode", "constant") != "constant":
        raise Unmapped(f"pad mode {args['mode']!r} (only 'constant' is mapped)")
    x = args["self"]
    return [(x, partial(tr.pad_input, in_shape=shape(x), pad=[int(p) for p in args["pad"]]))]


def creation(node: torch.fx.Node, args: dict[str, Any]) -> list[Source]:
    return []


# ---- the dims a tile must span whole ---------------------------------------------------------------------


def layer_norm_dims(node: torch.fx.Node) -> set[int]:
    """The dims a layer norm normalises over (its map reads them whole)."""
    nd = len(shape(node))
    return set(range(nd - len(bound_args(node)["normalized_shape"]), nd))


def group_norm_dims(node: torch.fx.Node) -> set[int]:
    """The positions of a group norm (dims 2 on): each group's statistics are over all of them."""
    return set(range(2, len(shape(node))))


def softmax_dims(node: torch.fx.Node) -> set[int]:
    """The dim a softmax reduces (its map reads it whole)."""
    nd = len(shape(node))
    return {int(bound_args(node)["dim"]) % nd} if nd else set()


# ---- views -----------------------------------------------------------------------------------------------


def reshape(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    in_shape, out_shape = shape(x), shape(node)
    groups = tr.reshape_groups(in_shape, out_shape)
    return x, partial(tr.reshape_input, in_shape=in_shape, out_shape=out_shape, groups=groups)


def permute(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    nd = len(shape(x))
    name = op_name(node)
    if name == "permute":
        perm = [norm_dim(d, nd) for d in args["dims"]]
    else:
        a, b = (0, 1) if name == "t" else (norm_dim(args["dim0"], nd), norm_dim(args["dim1"], nd))
        perm = list(range(nd))
        if nd >= 2:
            perm[a], perm[b] = perm[b], perm[a]
    return x, partial(tr.permute_input, perm=perm)


def slice_(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dim = norm_dim(args["dim"], len(x_shape))
    n = x_shape[dim]
    start = args["start"] if args.get("start") is not None else 0
    start = min(max(start + n if start < 0 else start, 0), n)
    step = int(args.get("step") or 1)
    return x, partial(tr.slice_input, dim=dim, start=start, step=step)


def select(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dim = norm_dim(args["dim"], len(x_shape))
    index = args["index"] + x_shape[dim] if args["index"] < 0 else args["index"]
    return x, partial(tr.select_input, dim=dim, index=index)


def unsqueeze(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    return args["self"], partial(tr.unsqueeze_input, dim=norm_dim(args["dim"], len(shape(node))))


def squeeze(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    x_shape = shape(x)
    dims = args.get("dim")
    dims = list(range(len(x_shape))) if dims is None else as_ints(dims, 1)
    return x, partial(tr.squeeze_input, in_shape=x_shape, dims=dims)


def expand(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    x = args["self"]
    return x, partial(tr.broadcast_input, in_shape=shape(x))


def identity(node: torch.fx.Node, args: dict[str, Any]) -> Source:
    return args.get("self", args.get("input")), lambda r: r


def getitem(node: torch.fx.Node, layers: set[torch.fx.Node]) -> Source:
    """``x[i]`` of a split-like view (a slice of its input) or of a layer with several outputs."""
    src, i = node.args[0], node.args[1]
    if not isinstance(src, torch.fx.Node) or not isinstance(i, int):
        raise Unmapped("getitem of something that is neither a split nor a layer")
    if src in layers:  # e.g. batch norm's (out, mean, invstd): the tiles are out's
        same = shape(node) == shape(src)
        whole = tr.whole(shape(src))
        return src, (lambda r: r) if same else (lambda r: whole)
    name = op_name(src)
    if name not in MULTI_VIEWS:
        raise Unmapped(f"getitem of {name}")
    args = bound_args(src)
    x = args["self"]
    x_shape = shape(x)
    dim = norm_dim(args["dim"], len(x_shape))
    if name == "unbind":
        return x, partial(tr.select_input, dim=dim, index=i)
    if name == "split_with_sizes":
        start = sum(args["split_sizes"][:i])
    else:
        size = args["split_size"] if name == "split" else -(-x_shape[dim] // args["chunks"])
        start = i * size
    return x, partial(tr.slice_input, dim=dim, start=start, step=1)
