"""Bounded task cloning (Ramiel): give each consumer of a cheap, widely read node its own copy.

A cheap node (an element-wise op or a view) whose result several later ops read ties those ops to
one lane or costs a hand-off per other lane. Recomputing it next to each reader removes the edges.
``propose`` picks the nodes (most readers first) up to ``max_growth`` of the graph's size;
``lanes.mapping.plan_lanes`` decides whether the clones shorten the schedule (``apply`` only runs if so).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx

from pathweave.analysis.ops import is_compute, mutates, op_kind, op_name

#: op kinds cheap enough to recompute
CHEAP = {"elementwise", "view"}
MAX_GROWTH = 0.1


@dataclass(frozen=True)
class CloneNode:
    node: str
    users: tuple[str, ...]  # readers that get a copy each (the first reader keeps the original)


def propose(gm: torch.fx.GraphModule, max_growth: float = MAX_GROWTH) -> list[CloneNode]:
    compute = [n for n in gm.graph.nodes if is_compute(n)]
    budget = int(max_growth * len(compute))
    found: list[CloneNode] = []
    candidates = [
        n for n in compute
        if len(n.users) > 1 and op_kind(op_name(n, gm)) in CHEAP and op_name(n, gm) != "getitem"
        and all(u.op != "output" for u in n.users) and not mutates(n, gm)  # two copies would write twice
    ]  # fmt: skip
    for node in sorted(candidates, key=lambda n: -len(n.users)):
        extra = tuple(u.name for u in list(node.users)[1:])
        if len(extra) > budget:
            continue
        budget -= len(extra)
        found.append(CloneNode(node.name, extra))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[CloneNode]) -> dict[str, str]:
    """Add the copies; returns copy name -> original name (copies cost what the original costs)."""
    nodes = {n.name: n for n in gm.graph.nodes}
    origin: dict[str, str] = {}
    for m in matches:
        node = nodes[m.node]
        for user_name in m.users:
            user = nodes[user_name]
            with gm.graph.inserting_after(node):
                copy = gm.graph.node_copy(node)
            copy.meta.update(node.meta)
            user.replace_input_with(node, copy)
            origin[copy.name] = node.name
    return origin
