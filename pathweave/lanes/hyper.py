"""Hyperclustering (Ramiel, batch > 1): lanes for a graph replicated once per sub-batch.

Three mappings of the replicated graph onto P lanes, each simulated on measured costs:

- "plain" (Ramiel's hyperclusters): every group's copy of a node runs on the lane the sub-batch plan
  gave that node, so the groups' copies of a cluster form one hypercluster;
- "switched" (Ramiel's switched hyperclusters): group g shifts every lane by g (mod P), so the heavy
  cluster of one group shares its lane with light clusters of the others; Ramiel chose it by hand
  beyond SqueezeNet, here it is chosen when its simulated schedule is shorter;
- "groups": each group's whole copy on one lane (group g on lane g mod P): switched hyperclusters of a
  one-lane sub-batch plan, that is, data parallelism with no hand-off at all;
- "ours": linear clustering, merging and mapping run on the whole replicated graph.

The plan with the shortest simulated makespan is kept; all three are returned for the report.
"""

from __future__ import annotations

from collections.abc import Callable

from pathweave.analysis.dag import Dag
from pathweave.lanes.mapping import HANDOFF_US, plan_from_lanes, plan_lanes, simulate
from pathweave.lanes.plan import LanePlan
from pathweave.meta import Replica

VARIANTS = ("plain", "switched", "groups", "ours")


def plan_hyper(
    dag: Dag,
    replica: dict[str, Replica],
    sub_dag: Dag,
    weight: Callable[[str], float],
    lanes: int,
    handoff: float = HANDOFF_US,
) -> tuple[str, dict[str, LanePlan]]:
    """The chosen variant's name and every variant's plan. ``dag`` is the replicated graph's DAG and
    ``replica`` its nodes' ``meta[REPLICA]`` by name; ``sub_dag`` is the DAG of the sub-batch graph, whose
    node names ``Replica.of`` refers to; ``weight`` takes node names of ``dag``."""
    sub_weight = _sub_weight(dag, replica, weight)
    sub = plan_lanes(sub_dag, sub_weight, lanes, handoff)
    sub_lane = sub.lane_of()
    plans = {}
    for variant, shift in (("plain", 0), ("switched", 1)):
        lane_of = _hyper_lanes(dag, replica, sub_lane, shift, len(sub.lanes))
        makespan = simulate(dag, lane_of, weight, handoff)
        plans[variant] = plan_from_lanes(dag, lane_of, weight, sub.clusters_lc, sub.clusters_merged, makespan)
    whole = {n: 0 for n in sub_lane}
    lane_of = _hyper_lanes(dag, replica, whole, 1, lanes)
    makespan = simulate(dag, lane_of, weight, handoff)
    plans["groups"] = plan_from_lanes(dag, lane_of, weight, 1, 1, makespan)
    plans["ours"] = plan_lanes(dag, weight, lanes, handoff)
    best = min(VARIANTS, key=lambda v: plans[v].makespan_us)  # first of equals: the published one
    return best, plans


def _sub_weight(
    dag: Dag, replica: dict[str, Replica], weight: Callable[[str], float]
) -> Callable[[str], float]:
    """Weights of the sub-batch DAG's nodes, read from group 0's copies."""
    of = {r.of: n for n, r in replica.items() if r.group == 0 and r.of and n in dag.preds}
    return lambda n: weight(of[n]) if n in of else 0.0


def _hyper_lanes(
    dag: Dag, replica: dict[str, Replica], sub_lane: dict[str, int], shift: int, lanes: int
) -> dict[str, int]:
    """A copied node on its sub-batch node's lane, shifted by ``shift`` per group; a node the sub-batch
    DAG does not hold (merged differently there) on its first producer's lane; a group's input slice on
    its first consumer's lane; the concatenations of the outputs on lane 0."""
    lane_of: dict[str, int] = {}
    for n in dag.nodes:
        rep = replica.get(n)
        if rep is None or not rep.of:
            continue
        if rep.of in sub_lane:
            lane_of[n] = (sub_lane[rep.of] + shift * rep.group) % lanes
        else:
            lane_of[n] = next((lane_of[p] for p in dag.preds[n] if p in lane_of), 0)
    for n in dag.nodes:
        if n not in lane_of:
            rep = replica.get(n)
            first = next((s for s in dag.succs[n] if s in lane_of), None) if rep is not None else None
            lane_of[n] = lane_of[first] if first is not None else 0
    return lane_of
