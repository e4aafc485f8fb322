"""Constant propagation and dead-code elimination (Ramiel's pruning, done on the fx graph).

- A node whose tensor inputs are all constants (weights, folded values) is computed once here and
  becomes a constant: weight transposes, scale factors, masks built from buffers.
- Ops that return their input unchanged at inference go: ``dropout`` with train=False, ``alias``,
  ``detach``, a ``clone`` that keeps the layout.
- Then every node whose result nothing reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import add_constant, aten, constant

_IDENTITY = {aten.alias.default, aten.detach.default}
#: ops never folded: their value depends on more than their inputs
_IMPURE = {aten.rand.default, aten.randn.default, aten.bernoulli.default, aten.dropout.default}


@dataclass(frozen=True)
class Prune:
    node: str
    action: str  # "fold" (computed now, kept as a constant) or "identity" (replaced by its input)


def _is_identity(node: torch.fx.Node) -> bool:
    if node.target in _IDENTITY:
        return True
    if node.target == aten.dropout.default:
        return not (len(node.args) > 2 and node.args[2])  # train=False
    if node.target == aten.clone.default:
        return "memory_format" not in node.kwargs
    return False


def _foldable(gm: torch.fx.GraphModule, node: torch.fx.Node, folded: set[str]) -> bool:
    if node.op != "call_function" or node.target in _IMPURE or not node.all_input_nodes:
        return False
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return False  # rand_like, normal, native_dropout, ...
    if getattr(getattr(node.target, "_schema", None), "is_mutable", False):
        return False
    return all(constant(gm, a) is not None or a.name in folded for a in node.all_input_nodes)


def propose(gm: torch.fx.GraphModule) -> list[Prune]:
    found: list[Prune] = []
    folded: set[str] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if _is_identity(node):
            found.append(Prune(node.name, "identity"))
        elif _foldable(gm, node, folded):
            folded.add(node.name)
            found.append(Prune(node.name, "fold"))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[Prune]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    values: dict[str, object] = {}
    for m in matches:
        node = nodes[m.node]
        if m.action == "identity":
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            continue

        def value(a: torch.fx.Node) -> object:
            return values[a.name] if a.name in values else constant(gm, a)

        args = torch.fx.node.map_arg(node.args, value)
        kwargs = torch.fx.node.map_arg(node.kwargs, value)
        with torch.no_grad():
            values[node.name] = node.target(*args, **kwargs)
    for name, val in values.items():  # only tensors reachable from the rest of the graph stay
        node = nodes[name]
        if isinstance(val, torch.Tensor) and any(u.name not in values for u in node.users):
            node.replace_all_uses_with(add_constant(gm, node, f"{name}_folded", val))
    gm.graph.eliminate_dead_code()
