"""Common subexpressions computed once: a node that repeats an earlier one (the same op on the same
inputs with the same arguments) is replaced by the earlier one.

NASNet-A applies ``relu`` to a cell input once per branch that reads it, and repeats some of its pools
(on 224x224: 60 repeated relus, 12 average pools, 6 pads, 1 max pool, 79 of 630 tile layers); each is
a layer of its own in every strategy, computed again for the same values. Only ops whose result
depends on their arguments alone are merged (no random ops, no op that writes into a tensor); a graph
with any in-place op is left as it is, since merging two equal values would let a write to one be seen
through the other. Chains of repeats (a repeated relu, then a pad of it, then a pool of that) merge in
one pass, because the keys name inputs after merging.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.passes.util import aten

_NOT_FOUND = object()
#: random ops that some graphs carry without the ``nondeterministic_seeded`` tag's help (prune's list)
_RANDOM = {aten.rand.default, aten.randn.default, aten.bernoulli.default, aten.dropout.default}


@dataclass(frozen=True)
class Dedupe:
    node: str  # the repeat, erased
    keep: str  # the earlier node computing the same value


def _pure(node: torch.fx.Node) -> bool:
    """An op whose result is a function of its arguments: an ATen op that writes nothing and draws no
    random numbers, or the getitem of a tuple."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload) or node.target in _RANDOM:
        return False
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    return not node.target._schema.is_mutable


def _key(node: torch.fx.Node, merged: dict[str, str]) -> tuple[Any, ...] | None:
    """What the node computes, its inputs named after merging; None when some argument has no stable
    text (such a node is never merged)."""

    def name(a: torch.fx.Node) -> str:
        return merged.get(a.name, a.name)

    args = torch.fx.node.map_arg(node.args, name)
    kwargs = torch.fx.node.map_arg(dict(node.kwargs), name)
    text = repr((args, sorted(kwargs.items())))
    if " at 0x" in text:  # an object printed by address: equal texts would not mean equal values
        return None
    return (node.target, text)


def propose(gm: torch.fx.GraphModule) -> list[Dedupe]:
    nodes = list(gm.graph.nodes)
    if any(_writes(n) or n.op in ("call_method", "call_module") for n in nodes):
        return []  # a write, or a call this pass cannot see into
    first: dict[tuple[Any, ...], str] = {}
    merged: dict[str, str] = {}
    found = []
    for node in nodes:
        if not _pure(node) or any(u.op == "output" for u in node.users):
            continue
        key = _key(node, merged)
        if key is None:
            continue
        keep = first.get(key, _NOT_FOUND)
        if keep is _NOT_FOUND:
            first[key] = node.name
        else:
            merged[node.name] = str(keep)
            found.append(Dedupe(node.name, str(keep)))
    return found


def _writes(node: torch.fx.Node) -> bool:
    """An ATen op that writes into one of its arguments (``relu_``, ``add_``, ``copy_``)."""
    schema = getattr(node.target, "_schema", None)
    return bool(getattr(schema, "is_mutable", False))


def apply(gm: torch.fx.GraphModule, matches: list[Dedupe]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:  # graph order: a repeat's own inputs are merged before it is
        nodes[m.node].replace_all_uses_with(nodes[m.keep])
    for m in reversed(matches):
        gm.graph.erase_node(nodes[m.node])
