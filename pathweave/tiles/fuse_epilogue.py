"""Fuse what a tile kernel computes in its epilogue into the layer before it (ASPEN's tiles, BN folded
first by ``fold_bn``):

- ``relu(conv2d(x))``, ``add(conv2d(x), r)`` and ``relu(add(conv2d(x), r))`` -> ``pathweave::conv2d_act``
  (a ResNet block's last convolution takes its shortcut ``r`` as a residual);
- ``relu|gelu|tanh(linear(x))`` -> ``pathweave::linear_act``; GELU in both forms, GPT-2's tanh form as
  act ``gelu_tanh`` (linear only: the matmul kernel of ``tile_kernels_seq.c`` computes it);
- the same with silu, hardswish, hardsigmoid and ReLU6 (``hardtanh(0, 6)``, act ``relu6``) for relu;
  ``sigmoid(conv2d(x))`` too (a squeeze-excitation gate: one task less per block);
- ``relu|gelu|tanh(batch_norm(x))`` in inference form (one not folded into a convolution: DenseNet's
  after each concatenation) -> ``pathweave::batch_norm_act``, one pass over the tensor instead of two;
  with ``x = cat(...)`` read by the batch norm alone -> ``pathweave::cat_batch_norm_act`` (the copy of
  each input applies the batch norm and the activation on its way).

The fused ops are torch custom ops with the same results as the ops they replace, so the rewritten
graph still runs in PyTorch (the tiles strategy checks it against the original); the tile graph maps
them like conv2d and linear (``tiles.maps``), the residual element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from pathweave.passes.util import (
    aten,
    bn_args,
    bn_output,
    conv_args,
    inference_bn,
    linear_args,
    replace_chain,
    residual_operand,
    sole_user,
)
from pathweave.tiles.maps import bound_args

ACTS = ("none", "relu", "gelu", "tanh", "gelu_tanh", "silu", "hardswish", "hardsigmoid", "relu6", "sigmoid")
_ACT_OPS = {
    aten.relu.default: "relu",
    aten.gelu.default: "gelu",
    aten.tanh.default: "tanh",
    aten.silu.default: "silu",
    aten.hardswish.default: "hardswish",
    aten.hardsigmoid.default: "hardsigmoid",
    aten.hardtanh.default: "relu6",  # hardtanh(0, 6) only (``_act``)
}
#: each activation as eager computes it (the fused ops' PyTorch form)
_EAGER = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "tanh": torch.tanh,
    "silu": F.silu,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "relu6": lambda y: F.hardtanh(y, 0.0, 6.0),
    "sigmoid": torch.sigmoid,
}


def activate(y: torch.Tensor, act: str) -> torch.Tensor:
    """``y`` under the named epilogue activation as eager computes it ("none": ``y`` itself)."""
    return _EAGER[act](y) if act in _EAGER else y


def _conv2d_act(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    act: str,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    if scale is not None:  # ``fuse_scale``: a squeeze-excitation gate multiplying the input's channels
        input = input * scale
    y = F.conv2d(input, weight, bias, stride, padding, dilation, groups)
    return activate(y if residual is None else y + residual, act)


def _linear_act(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act: str
) -> torch.Tensor:
    return activate(F.linear(input, weight, bias), act)


def _batch_norm_act(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    eps: float,
    act: str,
) -> torch.Tensor:
    return activate(F.batch_norm(input, running_mean, running_var, weight, bias, False, 0.0, eps), act)


def _cat_batch_norm_act(
    tensors: list[torch.Tensor],
    dim: int,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    eps: float,
    act: str,
) -> torch.Tensor:
    return _batch_norm_act(torch.cat(tensors, dim), weight, bias, running_mean, running_var, eps, act)


# registered when this module is first imported (by the tiles strategy); on fake tensors the same
# arithmetic gives the shapes
conv2d_act = torch.library.custom_op("pathweave::conv2d_act", _conv2d_act, mutates_args=())
conv2d_act.register_fake(_conv2d_act)
linear_act = torch.library.custom_op("pathweave::linear_act", _linear_act, mutates_args=())
linear_act.register_fake(_linear_act)
batch_norm_act = torch.library.custom_op("pathweave::batch_norm_act", _batch_norm_act, mutates_args=())
batch_norm_act.register_fake(_batch_norm_act)
cat_batch_norm_act = torch.library.custom_op(
    "pathweave::cat_batch_norm_act", _cat_batch_norm_act, mutates_args=()
)
cat_batch_norm_act.register_fake(_cat_batch_norm_act)


def conv_parts(node: torch.fx.Node) -> dict[str, Any] | None:
    """A conv2d's or conv2d_act's arguments by name (for conv2d: residual None, act "none"; numeric
    padding only), else None; None for a conv2d_act whose input a gate scales (``fuse_scale``), which the
    passes that rebuild convolutions from these parts leave alone."""
    if node.op != "call_function":
        return None
    if node.target == aten.conv2d.default:
        if isinstance(bound_args(node)["padding"], str):  # 'same' / 'valid': conv_args takes numbers
            return None
        x, w, b, stride, padding, dilation, groups = conv_args(node)
        return {"input": x, "weight": w, "bias": b, "residual": None, "stride": stride, "padding": padding,
                "dilation": dilation, "groups": groups, "act": "none"}  # fmt: skip
    if node.target == torch.ops.pathweave.conv2d_act.default:
        args = bound_args(node)
        return args if args.get("scale") is None else None
    return None


@dataclass(frozen=True)
class Fuse:
    layer: str  # the conv2d, linear or batch norm node
    residual: str | None  # the add node whose other input joins the epilogue (for a batch norm: its getitem)
    act: str | None  # the activation node
    act_name: str
    cat: str | None = None  # a batch norm's input, a concatenation that only the batch norm reads


def _act(node: torch.fx.Node | None, gelu_tanh: bool = False, sigmoid: bool = False) -> str | None:
    """The epilogue activation ``node`` computes, or None. ``sigmoid``: a convolution's (the gate of a
    squeeze-excitation block: its second 1x1 convolution); the linear kernels' epilogues lack it."""
    if sigmoid and node is not None and node.op == "call_function" and node.target == aten.sigmoid.default:
        return "sigmoid"
    if node is None or node.op != "call_function" or node.target not in _ACT_OPS:
        return None
    if node.target == aten.gelu.default and node.kwargs.get("approximate", "none") != "none":
        return "gelu_tanh" if gelu_tanh and node.kwargs["approximate"] == "tanh" else None
    bounds = (*node.args[1:], *node.kwargs.values())
    if node.target == aten.hardtanh.default and bounds != (0.0, 6.0):
        return None  # a hardtanh other than ReLU6 keeps the element-wise kernel (its bounds)
    return _ACT_OPS[node.target]


def _dense(residual: torch.fx.Node | None) -> bool:
    """A residual the epilogue can read: a contiguous tensor (a sliced view, as NASNet's, stays a separate
    element-wise add, which reads through strides)."""
    val = residual.meta.get("val") if residual is not None else None
    return isinstance(val, torch.Tensor) and val.is_contiguous()


def propose(gm: torch.fx.GraphModule) -> list[Fuse]:
    """Each add joins one epilogue: of a shortcut add of two convolutions, the first one takes it."""
    found = []
    claimed: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        user = sole_user(node)
        if user in claimed:
            continue
        if node.target == aten.conv2d.default:
            if _dense(residual_operand(node, user)):
                claimed.add(user)
                after = sole_user(user)
                act = _act(after)
                found.append(Fuse(node.name, user.name, after.name if act else None, act or "none"))
            elif act := _act(user, sigmoid=True):
                found.append(Fuse(node.name, None, user.name, act))
        elif node.target == aten.linear.default and _act(user, gelu_tanh=True):
            found.append(Fuse(node.name, None, user.name, _act(user, gelu_tanh=True)))
        elif inference_bn(node) and (out := bn_output(node)) is not None:
            item = out if out is not node else None  # the tuple's getitem 0
            after = sole_user(out)
            act = _act(after)
            cat = node.args[0] if _sole_cat(node.args[0]) else None
            if act or cat:
                found.append(
                    Fuse(node.name, item and item.name, act and after.name, act or "none", cat and cat.name)
                )
    return found


def _sole_cat(node: Any) -> bool:
    """A concatenation of at least 2-D tensors that one node reads."""
    return (
        isinstance(node, torch.fx.Node)
        and node.target == aten.cat.default
        and len(node.users) == 1
        and len(node.meta["val"].shape) >= 2
    )


def apply(gm: torch.fx.GraphModule, matches: list[Fuse]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        layer = nodes[m.layer]
        add = nodes[m.residual] if m.residual else None
        act = nodes[m.act] if m.act else None
        last = act or add
        if inference_bn(layer):  # (act or None, the bn's getitem or None, the bn, the cat before or None)
            cat = nodes[m.cat] if m.cat else None
            stats = bn_args(layer)
            with gm.graph.inserting_before(last or layer):
                if cat is None:
                    op, args = torch.ops.pathweave.batch_norm_act.default, (*stats, m.act_name)
                else:
                    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
                    op = torch.ops.pathweave.cat_batch_norm_act.default
                    args = (cat.args[0], dim, *stats[1:], m.act_name)
                fused = gm.graph.call_function(op, args)
            replace_chain(gm, fused, (act, add, layer, cat))
            continue
        with gm.graph.inserting_before(last):
            if layer.target == aten.conv2d.default:
                x, w, b, stride, padding, dilation, groups = conv_args(layer)
                residual = residual_operand(layer, add)  # read now: it may be a node fused before
                fused = gm.graph.call_function(
                    torch.ops.pathweave.conv2d_act.default,
                    (x, w, b, residual, stride, padding, dilation, int(groups), m.act_name),
                )
            else:
                x, w, b = linear_args(layer)
                fused = gm.graph.call_function(torch.ops.pathweave.linear_act.default, (x, w, b, m.act_name))
        replace_chain(gm, fused, (act, add, layer))
