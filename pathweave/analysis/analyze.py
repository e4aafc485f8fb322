"""Read-only analysis: per-node cost, the operator DAG, critical path and parallelism."""

from __future__ import annotations

from dataclasses import dataclass

from pathweave.analysis.cost import EDGE_COST, annotate, total_flops
from pathweave.analysis.dag import Dag, PathStats, build_dag, path_stats
from pathweave.analysis.profile import measure_node_times
from pathweave.frontend.graph import Captured
from pathweave.meta import COST, NodeCost

__all__ = ["Analysis", "Dag", "PathStats", "analyze_captured", "build_dag", "path_stats", "static_stats"]


@dataclass(frozen=True)
class Analysis:
    """Statistics of one captured model: static (Ramiel weights, edge costs) and, if profiled, measured."""

    model: str
    flops: int
    static: PathStats
    measured: PathStats | None = None

    @property
    def parallelism(self) -> float:
        return self.static.parallelism

    def to_dict(self) -> dict:
        d = {"model": self.model, "flops": self.flops, **self.static.to_dict()}
        if self.measured is not None:
            d["measured"] = self.measured.to_dict()
        return d


def static_stats(captured: Captured, edge_cost: float = EDGE_COST, dag: Dag | None = None) -> PathStats:
    annotate(captured.gm)
    dag = dag or build_dag(captured.gm)
    costs: dict[str, NodeCost] = {n.name: n.meta[COST] for n in captured.gm.graph.nodes if COST in n.meta}
    return path_stats(dag, lambda n: costs[n].weight, edge_cost, "static weight")


def analyze_captured(captured: Captured, measure: bool = False, use_cache: bool = True) -> Analysis:
    """Static statistics always; measured ones (one profiling run, cached) when ``measure`` is set."""
    dag = build_dag(captured.gm)
    static = static_stats(captured, dag=dag)
    measured = None
    if measure:
        times = measure_node_times(captured, use_cache=use_cache)
        measured = path_stats(dag, lambda n: times.get(n, 0.0), 0.0, "us")
    return Analysis(captured.name, total_flops(captured.gm), static, measured)
