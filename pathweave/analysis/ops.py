"""Naming and classifying fx nodes the same way whether captured by torch.export (ATen) or fx tracing."""

from __future__ import annotations

import operator

import torch
import torch.fx

from pathweave.errors import UnsupportedError

#: fx-traced modules -> the ATen op name the export path would show
_MODULE_OPS = {
    "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d", "Linear": "linear",
    "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "LayerNorm": "layer_norm",
    "ReLU": "relu", "ReLU6": "hardtanh", "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "MaxPool2d": "max_pool2d", "AvgPool2d": "avg_pool2d", "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
    "Dropout": "dropout", "Flatten": "flatten", "Embedding": "embedding", "Softmax": "softmax",
    "Identity": "alias",
}  # fmt: skip

#: transposed convolutions: each input element meets the whole kernel (``cost.node_cost``)
TRANSPOSED = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
CONV = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "_convolution_pointwise", *TRANSPOSED}
#: scaled-dot-product attention: two matrix products and a softmax (``cost.attention_flops``)
ATTENTION = {
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
}  # fmt: skip
MATMUL = {"linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "_linear_pointwise", "einsum", *ATTENTION}
POOL = {
    "max_pool2d",
    "avg_pool2d",
    "max_pool2d_with_indices",
    "adaptive_avg_pool2d",
    "max_pool1d",
    "avg_pool1d",
}
REDUCTION = {
    "batch_norm", "_native_batch_norm_legit_no_training", "layer_norm", "native_layer_norm", "group_norm",
    "softmax", "_softmax", "log_softmax", "_log_softmax", "mean", "sum", "amax", "var_mean", "norm",
    "native_group_norm", "amin", "var", "std",
}  # fmt: skip
VIEW = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "flatten", "expand", "unsqueeze",
    "squeeze", "slice", "select", "alias", "detach", "contiguous", "split", "unbind", "chunk",
    "split_with_sizes", "size", "dropout", "clone", "to", "_to_copy", "getattr",
}  # fmt: skip
#: nodes that do no work and are merged into their producer when building the DAG
TRANSPARENT = {"getitem"}


def op_name(node: torch.fx.Node, gm: torch.fx.GraphModule | None = None) -> str:
    """Short op name: 'conv2d', 'relu', 'getitem', ... for any call node; the node op otherwise."""
    if node.op == "call_function":
        target = node.target
        if target is operator.getitem:
            return "getitem"
        packet = getattr(target, "_overloadpacket", None)
        if packet is not None:
            return packet.__name__
        return getattr(target, "__name__", str(target))
    if node.op == "call_module" and gm is not None:
        mod = gm.get_submodule(str(node.target))
        return _MODULE_OPS.get(type(mod).__name__, type(mod).__name__)
    if node.op == "call_method":
        return str(node.target)
    return node.op


def op_kind(name: str) -> str:
    if name in CONV:
        return "conv"
    if name in MATMUL:
        return "matmul"
    if name in POOL:
        return "pool"
    if name in REDUCTION:
        return "reduction"
    if name in VIEW or name in TRANSPARENT:
        return "view"
    return "elementwise"


def is_compute(node: torch.fx.Node) -> bool:
    """Nodes that run an op (not inputs, weights or the output)."""
    return node.op in ("call_function", "call_module", "call_method")


def module_of(node: torch.fx.Node, gm: torch.fx.GraphModule | None) -> torch.nn.Module | None:
    if node.op == "call_module" and gm is not None:
        return gm.get_submodule(str(node.target))
    return None


def weight_tensor(node: torch.fx.Node, gm: torch.fx.GraphModule | None) -> torch.Size | None:
    """Shape of a conv/linear weight, whether it is an argument (ATen) or a module attribute (fx)."""
    mod = module_of(node, gm)
    if mod is not None:
        w = getattr(mod, "weight", None)
        return w.shape if isinstance(w, torch.Tensor) else None
    if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node):
        val = node.args[1].meta.get("val", node.args[1].meta.get("tensor_meta"))
        return getattr(val, "shape", None)
    return None


def mutates(node: torch.fx.Node, gm: torch.fx.GraphModule | None = None) -> bool:
    """Whether a node writes into one of its inputs (``relu_``, ``inplace=True``, ``x.add_()``).
    Graphs from torch.export are functional; fx-traced ones may not be."""
    if node.op == "call_function":
        schema = getattr(node.target, "_schema", None)
        if schema is not None:
            return bool(schema.is_mutable)
        name = getattr(node.target, "__name__", "")
        return (
            node.kwargs.get("inplace") is True
            or (name.endswith("_") and not name.startswith("_"))
            or (name.startswith("i") and node.target.__module__ in ("_operator", "operator"))
        )
    if node.op == "call_method":
        return str(node.target).endswith("_")
    if node.op == "call_module":
        return getattr(module_of(node, gm), "inplace", False) is True
    return False


def shared_mutation(node: torch.fx.Node, gm: torch.fx.GraphModule | None = None) -> bool:
    """Whether a node writes into a value something else can see: ``mutates``, unless every value it
    writes is an intermediate that only this node reads (``passes.relu_inplace``'s ``relu_``)."""
    if not mutates(node, gm):
        return False
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None:
        return True
    for arg, value in zip(schema.arguments, node.args, strict=False):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        private = (isinstance(value, torch.fx.Node) and value.op == "call_function"
                   and list(value.users) == [node])  # fmt: skip
        if not private:
            return True
    return False


def refuse_shared_mutation(gm: torch.fx.GraphModule, name: str, strategy: str) -> None:
    """``UnsupportedError`` naming the first node that writes into a value others can see
    (``shared_mutation``): strategies that order data edges only (lanes, tiles) could let a reader see
    that value before or after the write."""
    inplace = [n for n in gm.graph.nodes if shared_mutation(n, gm)]
    if inplace:
        first = inplace[0]
        raise UnsupportedError(
            f"{name}: {strategy} need a functional graph, but node {first.name} writes into its input "
            f"({len(inplace)} in-place ops; {first.format_node()}); capture with torch.export or use "
            "strategy='sequential'",
            ops=sorted({str(n.target) for n in inplace}),
            nodes=[n.name for n in inplace],
        )
