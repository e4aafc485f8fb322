"""``pathweave plan``: Ramiel's clustering of a model, variant by variant, without running it.

For the captured graph with measured 1-thread op times: linear clustering alone (LC), LC after
pruning, LC after pruning with cloning; for each, clusters before and after merging (Ramiel's
Table II), the lanes' loads, the simulated time on P lanes against one thread, and planning time.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import torch
import torch.fx

from pathweave.analysis.dag import build_dag
from pathweave.analysis.profile import measure_node_times
from pathweave.frontend.graph import Captured
from pathweave.lanes import clone
from pathweave.lanes.mapping import plan_lanes
from pathweave.lanes.plan import LanePlan
from pathweave.passes import prune
from pathweave.passes.pipeline import run_pipeline
from pathweave.sequential import intra_op_threads


@dataclass(frozen=True)
class PlanVariant:
    name: str
    plan: LanePlan
    nodes: int
    planning_s: float

    def to_dict(self) -> dict:
        p = self.plan
        return {
            "variant": self.name, "nodes": self.nodes, "clusters_lc": p.clusters_lc,
            "clusters_merged": p.clusters_merged, "lane_ops": [len(ln) for ln in p.lanes],
            "handoffs": len(p.handoffs), "simulated_us": p.makespan_us, "one_thread_us": p.sequential_us,
            "simulated_speedup": p.sequential_us / p.makespan_us if p.makespan_us else 1.0,
            "planning_s": self.planning_s,
        }  # fmt: skip


def plan_variants(captured: Captured, lanes: int) -> list[PlanVariant]:
    """LC, LC + pruning, LC + pruning + cloning on ``lanes`` lanes (times measured on 1 thread)."""
    with intra_op_threads(1):
        plain = _variant("LC", captured.gm, captured, lanes)
        pruned_gm = copy.deepcopy(captured.gm)
        run_pipeline(pruned_gm, (prune,))
        pruned = _variant("LC + pruning", pruned_gm, captured, lanes)
        cloned_gm = copy.deepcopy(pruned_gm)
        origin = clone.apply(cloned_gm, clone.propose(cloned_gm))
        cloned_gm.graph.lint()
        cloned_gm.recompile()
        cloned = _variant("LC + pruning + cloning", cloned_gm, captured, lanes, origin)
    return [plain, pruned, cloned]


def lc_plan(captured: Captured, lanes: int) -> LanePlan:
    """Ramiel's plan for the captured graph as it is, on measured 1-thread op times (verified)."""
    with intra_op_threads(1):
        return _variant("LC", captured.gm, captured, lanes).plan


def _variant(
    name: str, gm: torch.fx.GraphModule, captured: Captured, lanes: int, origin: dict[str, str] | None = None
) -> PlanVariant:
    origin = origin or {}
    times = measure_node_times(dataclasses.replace(captured, gm=gm))
    dag = build_dag(gm)
    t0 = time.perf_counter()
    plan = plan_lanes(dag, lambda n: times.get(origin.get(n, n), 0.0), lanes)
    planning = time.perf_counter() - t0
    plan.verify(dag)
    return PlanVariant(name, plan, len(dag.nodes), planning)


def format_variants(model: str, lanes: int, variants: list[PlanVariant]) -> str:
    from pathweave.report.tables import table

    rows = []
    for v in variants:
        d = v.to_dict()
        rows.append([d["variant"], str(d["nodes"]), f"{d['clusters_lc']} -> {d['clusters_merged']}",
                     " / ".join(map(str, d["lane_ops"])), str(d["handoffs"]),
                     f"{d['simulated_speedup']:.2f}x", f"{d['planning_s'] * 1e3:.0f} ms"])  # fmt: skip
    header = ["variant", "ops", "clusters (LC -> merged)", "ops per lane", "hand-offs",
              f"simulated speed-up, {lanes} lanes vs 1 thread", "planning"]  # fmt: skip
    return f"{model}\n" + table(header, rows)
