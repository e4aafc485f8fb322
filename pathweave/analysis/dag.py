"""The operator DAG of a graph and its critical-path statistics.

Nodes are the graph's compute nodes; tuple accesses (``getitem``) are merged into their producer,
inputs and weights are not nodes. Every statistic is computed from the weights it is given, so the
same code serves the static table and measured times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch.fx

from pathweave.analysis.ops import TRANSPARENT, is_compute, op_name


@dataclass(frozen=True)
class Dag:
    """Nodes in graph (topological) order, with predecessor and successor lists by node name."""

    nodes: tuple[str, ...]
    preds: Mapping[str, tuple[str, ...]]
    succs: Mapping[str, tuple[str, ...]]

    @property
    def edges(self) -> int:
        return sum(len(p) for p in self.preds.values())


def dag_owners(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, str]:
    """The DAG node every compute fx node belongs to: itself, or, for a tuple access, its producer's."""
    owner: dict[torch.fx.Node, str] = {}
    for node in gm.graph.nodes:
        if not is_compute(node):
            continue
        srcs = dict.fromkeys(owner[a] for a in node.all_input_nodes if a in owner)
        transparent = op_name(node, gm) in TRANSPARENT and len(srcs) == 1
        owner[node] = next(iter(srcs)) if transparent else node.name
    return owner


def build_dag(gm: torch.fx.GraphModule) -> Dag:
    owner = dag_owners(gm)
    order: list[str] = []
    preds: dict[str, tuple[str, ...]] = {}
    for node, name in owner.items():
        if name == node.name:
            order.append(name)
            preds[name] = tuple(dict.fromkeys(owner[a] for a in node.all_input_nodes if a in owner))
    succs: dict[str, list[str]] = {n: [] for n in order}
    for n in order:
        for p in preds[n]:
            succs[p].append(n)
    return Dag(tuple(order), preds, {k: tuple(v) for k, v in succs.items()})


@dataclass(frozen=True)
class PathStats:
    """Work and span of a DAG under one weighting; ``unit`` says what the numbers count."""

    unit: str
    nodes: int
    edges: int
    total_work: float
    critical_path: float
    max_width: int
    width_per_depth: tuple[int, ...]
    critical_nodes: tuple[str, ...] = field(repr=False)

    @property
    def parallelism(self) -> float:
        return self.total_work / self.critical_path if self.critical_path else 0.0

    def speedup_bound(self, workers: int) -> float:
        """Upper bound on speed-up with P workers: work / max(work / P, critical path)."""
        if not self.total_work:
            return 1.0
        return self.total_work / max(self.total_work / workers, self.critical_path)

    def to_dict(self) -> dict:
        return {
            "unit": self.unit,
            "nodes": self.nodes,
            "edges": self.edges,
            "total_work": self.total_work,
            "critical_path": self.critical_path,
            "parallelism": self.parallelism,
            "max_width": self.max_width,
            "width_per_depth": list(self.width_per_depth),
            "speedup_bound": {str(p): self.speedup_bound(p) for p in (2, 4, 8, 16)},
            "critical_nodes": list(self.critical_nodes),
        }


def path_stats(dag: Dag, weight: Callable[[str], float], edge_cost: float, unit: str) -> PathStats:
    finish: dict[str, float] = {}
    best_pred: dict[str, str | None] = {}
    depth: dict[str, int] = {}
    for n in dag.nodes:
        start, via = 0.0, None
        for p in dag.preds[n]:
            t = finish[p] + edge_cost
            if via is None or t > start:
                start, via = t, p
        finish[n] = start + weight(n)
        best_pred[n] = via
        depth[n] = 1 + max((depth[p] for p in dag.preds[n]), default=-1)
    end = max(dag.nodes, key=lambda n: finish[n], default=None)
    path: list[str] = []
    while end is not None:
        path.append(end)
        end = best_pred[end]
    widths = [0] * (max(depth.values(), default=-1) + 1)
    for d in depth.values():
        widths[d] += 1
    return PathStats(
        unit=unit,
        nodes=len(dag.nodes),
        edges=dag.edges,
        total_work=float(sum(weight(n) for n in dag.nodes)),
        critical_path=max(finish.values(), default=0.0),
        max_width=max(widths, default=0),
        width_per_depth=tuple(widths),
        critical_nodes=tuple(reversed(path)),
    )
