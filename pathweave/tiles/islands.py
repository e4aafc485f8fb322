"""Tile islands: a graph the tiles cannot run whole, cut into the largest sub-graphs they can run
(islands), with ATen segments between them.

``propose(gm)`` is pure: it asks the tiles' own rules which nodes they can run (``nodes.map_nodes``: a
range map; ``ops.graph_only``: a kernel binder; a float32 output, the only type the kernels write), lets
torch.fx's ``CapabilityBasedPartitioner`` group the runnable nodes into maximal acyclic partitions, and
leaves to ATen the islands smaller than ``min_flops`` (a handful of element-wise nodes costs a tile
program's start more than it saves). The ``IslandPlan`` names the nodes of every island, prints, and
``verify()``-s that the islands are disjoint, runnable and contractible without a cycle. ``apply(gm,
plan)`` then fuses each island into a submodule ``island_<i>`` of ``gm`` (its weights read by ``get_attr``
inside it, so the tile kernels can pack them) that returns a tuple.
"""

from __future__ import annotations

import copy
import operator
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from pathweave.analysis.cost import node_cost
from pathweave.analysis.ops import op_kind, op_name
from pathweave.errors import PlanError
from pathweave.frontend.shapes import tensor_specs
from pathweave.tiles.maps import MULTI_VIEWS
from pathweave.tiles.nodes import map_nodes
from pathweave.tiles.ops import TILE_OPS, graph_only
from pathweave.tiles.rows import value

#: the fewest FLOPs an island must hold to run as tiles; smaller ones run in ATen (measured on 2 Zen 4
#: cores: a tile program's call costs ~20-40 us, an element-wise ATen op on 64k floats ~10 us)
MIN_ISLAND_FLOPS = 1_000_000
#: the submodules ``apply`` makes are named this plus the island's index
PREFIX = "island_"


@dataclass(frozen=True)
class Island:
    """One island: its nodes by name in graph order, its FLOPs and the count of each op it runs."""

    nodes: tuple[str, ...]
    flops: int
    ops: Mapping[str, int]


@dataclass(frozen=True)
class Coverage:
    """How much of a model the tiles run: the share of its FLOPs inside tile programs, the number of
    islands (1 and ``share`` 1.0 for a model run whole) and the ops left to ATen with their counts."""

    share: float
    islands: int
    outside: Mapping[str, int] = field(default_factory=dict)

    def line(self) -> str:
        ops = ", ".join(f"{op} x{n}" for op, n in self.outside.items()) or "none"
        return f"tiles run {100 * self.share:.1f}% of the FLOPs in {self.islands} island(s); outside: {ops}"


@dataclass(frozen=True)
class IslandPlan:
    """Which nodes run as tiles (``islands``) and why each other compute node does not (``outside``:
    node name -> reason); ``total_flops`` of the graph, ``outside_ops`` the ops left to ATen, counted."""

    islands: tuple[Island, ...]
    outside: Mapping[str, str]
    outside_ops: Mapping[str, int]
    total_flops: int

    def coverage(self, dropped: Collection[int] = ()) -> Coverage:
        """The coverage when the islands at ``dropped`` run in ATen after all."""
        kept = [isl for i, isl in enumerate(self.islands) if i not in dropped]
        outside = Counter(self.outside_ops)
        for i in dropped:
            outside.update(self.islands[i].ops)
        share = sum(isl.flops for isl in kept) / self.total_flops if self.total_flops else float(bool(kept))
        return Coverage(share, len(kept), dict(sorted(outside.items(), key=lambda kv: (-kv[1], kv[0]))))

    def format(self) -> str:
        lines = []
        for i, isl in enumerate(self.islands):
            ops = ", ".join(f"{op} x{n}" for op, n in isl.ops.items())
            lines.append(f"{PREFIX}{i}: {len(isl.nodes)} nodes, {isl.flops / 1e6:.1f} MFLOP: {ops}")
        lines.extend(f"outside {name}: {why}" for name, why in self.outside.items())
        return "\n".join(lines)

    def verify(self, gm: torch.fx.GraphModule) -> None:
        """Raise PlanError unless every island node exists in ``gm`` and is runnable, no node is in two
        islands, and contracting each island to one node leaves the graph acyclic."""
        nodes = {n.name: n for n in gm.graph.nodes}
        group: dict[torch.fx.Node, int] = {}
        for i, isl in enumerate(self.islands):
            for name in isl.nodes:
                if name not in nodes or name in self.outside or nodes[name] in group:
                    raise PlanError(f"{PREFIX}{i}: node {name} is missing, not runnable or in two islands")
                group[nodes[name]] = i
        _check_acyclic(gm, group)


def _check_acyclic(gm: torch.fx.GraphModule, group: dict[torch.fx.Node, int]) -> None:
    """Kahn's algorithm on the graph with every island contracted to one vertex."""
    key = {n: ("island", group[n]) if n in group else ("node", n.name) for n in gm.graph.nodes}
    edges: dict[tuple, set[tuple]] = {k: set() for k in key.values()}
    for n in gm.graph.nodes:
        for user in n.users:
            if key[user] != key[n]:
                edges[key[n]].add(key[user])
    indegree = Counter(v for targets in edges.values() for v in targets)
    ready = [k for k in edges if indegree[k] == 0]
    seen = 0
    while ready:
        k = ready.pop()
        seen += 1
        for v in edges[k]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if seen != len(edges):
        raise PlanError("the islands form a cycle with the nodes between them; they cannot be fused")


class _TileSupport(OperatorSupportBase):
    def __init__(self, runnable: Collection[torch.fx.Node]) -> None:
        self.runnable = runnable

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node in self.runnable


def refusals(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, str]:
    """Why the tiles cannot run each compute node they cannot run, by the same rules as ``plan_nodes``,
    ``require_kernels`` and ``build_program`` (layer outputs of the types their kernels write)."""
    plans, failed = map_nodes(gm)
    why = dict(failed) | graph_only(plans)
    for node, plan in plans.items():
        if plan.role == "layer" and node not in why:
            why.update(_types(node))
    for node in gm.graph.nodes:  # the pieces of an op without a map (plan_nodes names the op only)
        if node.target is operator.getitem and node.args[0] in why:
            why.setdefault(node, why[node.args[0]])
    return why


def _types(node: torch.fx.Node) -> dict[torch.fx.Node, str]:
    """{node: why} where a layer's output, or a tensor input, has a type its kernel does not write or read."""
    op = TILE_OPS[op_name(node)]
    dtype = getattr(value(node), "dtype", None)
    if dtype not in op.writes:
        return {node: f"{op_name(node)}: a {dtype} output; its tile kernel writes "
                      f"{', '.join(str(t) for t in op.writes)}"}  # fmt: skip
    inputs = {getattr(value(a), "dtype", None) for a in node.all_input_nodes}
    if op.takes is not None and not inputs <= set(op.takes):
        return {node: f"{op_name(node)}: a {sorted(map(str, inputs - set(op.takes)))[0]} input; its tile "
                      f"kernel reads {', '.join(str(t) for t in op.takes)}"}  # fmt: skip
    return {}


def _runnable(gm: torch.fx.GraphModule, why: Mapping[torch.fx.Node, str]) -> set[torch.fx.Node]:
    """Call nodes the tiles can take: mapped layers and views, pieces read through views (``split``) and
    nodes that make no tensor (assertions: nothing to run, and left outside they would cut islands)."""
    return {n for n in gm.graph.nodes if n.op == "call_function" and n not in why}


def flops(node: torch.fx.Node) -> int:
    """A node's FLOPs (``analysis.cost``) under the cost kind the tiles' op table gives it."""
    name = op_name(node)
    kind = TILE_OPS[name].kind if name in TILE_OPS else op_kind(name)
    return int(node_cost(node, kind=kind).flops) if tensor_specs(node) else 0


def _counted(nodes: Collection[torch.fx.Node]) -> dict[str, int]:
    """The ops of ``nodes`` that compute (no views, no pieces of multi-output ops), counted."""
    ops = Counter(
        op_name(n) for n in nodes
        if n.op == "call_function" and tensor_specs(n) and op_name(n) not in MULTI_VIEWS
        and (TILE_OPS[op_name(n)].view is None if op_name(n) in TILE_OPS else op_kind(op_name(n)) != "view")
    )  # fmt: skip
    return dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))


def propose(
    gm: torch.fx.GraphModule, refused: Mapping[str, str] | None = None, min_flops: int = MIN_ISLAND_FLOPS
) -> IslandPlan:
    """The islands of ``gm`` (rewritten for the tiles), in graph order; ``refused`` names more nodes to
    leave outside (node name -> why: a binder refused them when their island was built)."""
    refused = refused or {}
    why = {n: refused.get(n.name) or r for n, r in refusals(gm).items()}
    why |= {n: refused[n.name] for n in gm.graph.nodes if n.name in refused}
    partitioner = CapabilityBasedPartitioner(gm, _TileSupport(_runnable(gm, why)),
                                             allows_single_node_partition=True)  # fmt: skip
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    parts = sorted((sorted(p.nodes, key=order.__getitem__) for p in partitioner.propose_partitions()),
                   key=lambda nodes: order[nodes[0]])  # fmt: skip
    islands, small = [], []
    for nodes in parts:
        isl = Island(tuple(n.name for n in nodes), sum(flops(n) for n in nodes), _counted(nodes))
        (islands if isl.flops >= min_flops and isl.ops else small).append(isl)
    for isl in small:
        why |= {n: f"in an island of {isl.flops} FLOPs (< {min_flops})" for n in gm.graph.nodes
                if n.name in isl.nodes}  # fmt: skip
    inside = {name for isl in islands for name in isl.nodes}
    left = [n for n in gm.graph.nodes if n.op == "call_function" and n.name not in inside]
    return IslandPlan(
        islands=tuple(islands),
        outside={n.name: why.get(n, "") for n in left if n in why},
        outside_ops=_counted(left),
        total_flops=sum(flops(n) for n in gm.graph.nodes if n.op == "call_function"),
    )


def apply(gm: torch.fx.GraphModule, plan: IslandPlan) -> list[str]:
    """Fuse every island of ``plan`` into a submodule of ``gm`` (in place; its ``get_attr`` inputs go
    inside, copied where other nodes read them too); the submodules' names, in the plan's order."""
    nodes = {n.name: n for n in gm.graph.nodes}
    partitions = []
    for isl in plan.islands:
        members = [nodes[name] for name in isl.nodes]
        partitions.append(dict.fromkeys([*_weights(gm, members), *members]))
    fuse_by_partitions(gm, partitions, prefix=PREFIX, always_return_tuple=True)
    gm.graph.lint()
    gm.recompile()
    return [f"{PREFIX}{i}" for i in range(len(partitions))]


def _weights(gm: torch.fx.GraphModule, members: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """The ``get_attr`` nodes the island reads, as nodes of its own: one read by nodes outside it too is
    copied for the island (a weight must be a constant of the island for the kernels to pack it)."""
    inside = set(members)
    found: dict[torch.fx.Node, None] = {}
    for node in members:
        for arg in node.all_input_nodes:
            if arg.op != "get_attr" or arg in found:
                continue
            if all(u in inside for u in arg.users):
                found[arg] = None
                continue
            with gm.graph.inserting_after(arg):
                twin = gm.graph.get_attr(str(arg.target))
            twin.meta = copy.copy(arg.meta)
            for user in [u for u in arg.users if u in inside]:
                user.replace_input_with(arg, twin)
            found[twin] = None
    return list(found)
