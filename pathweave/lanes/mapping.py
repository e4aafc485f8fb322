"""Ours, beyond Ramiel: put the clusters on P lanes, choosing each lane by simulated makespan.

Ramiel gives every merged cluster its own process. Here the number of lanes is what the machine
has (P = cores / intra-op threads per lane). Clusters are placed most critical first (the order
linear clustering found them in): each goes to the lane that gives the shortest simulated schedule,
where clusters not yet placed still count as running on lanes of their own. The simulation runs
nodes in graph order, each when its lane is free and its inputs have arrived, a hand-off costing
``handoff`` between lanes.
"""

from __future__ import annotations

from collections.abc import Callable

from pathweave.analysis.cluster import Cluster, linear_clustering, merge_clusters
from pathweave.analysis.dag import Dag
from pathweave.lanes.plan import LanePlan

#: a cross-lane hand-off through a SimpleQueue, measured here at 15-20 us
HANDOFF_US = 20.0


def simulate(dag: Dag, lane_of: dict[str, int], weight: Callable[[str], float], handoff: float) -> float:
    """Makespan when every lane runs its nodes in graph order."""
    free: dict[int, float] = {}
    finish: dict[str, float] = {}
    for n in dag.nodes:
        ln = lane_of[n]
        ready = max((finish[p] + (handoff if lane_of[p] != ln else 0.0) for p in dag.preds[n]), default=0.0)
        finish[n] = max(free.get(ln, 0.0), ready) + weight(n)
        free[ln] = finish[n]
    return max(finish.values(), default=0.0)


def map_to_lanes(
    dag: Dag, clusters: list[Cluster], weight: Callable[[str], float], lanes: int, handoff: float
) -> tuple[dict[str, int], float]:
    """Lane of every node and the simulated makespan."""
    placed: dict[int, int] = {}
    best = 0.0
    for c in range(len(clusters)):
        trials = []
        for ln in range(lanes):
            placed[c] = ln
            trials.append((simulate(dag, _lanes(clusters, placed, lanes), weight, handoff), ln))
        best, placed[c] = min(trials)
    return _lanes(clusters, placed, lanes), best


def _lanes(clusters: list[Cluster], placed: dict[int, int], lanes: int) -> dict[str, int]:
    """Placed clusters on their lanes, the others each on a virtual lane of its own."""
    return {n: placed.get(c, lanes + c) for c, cluster in enumerate(clusters) for n in cluster}


def plan_lanes(dag: Dag, weight: Callable[[str], float], lanes: int, handoff: float = HANDOFF_US) -> LanePlan:
    """Linear clustering, merging, then mapping onto ``lanes`` lanes (all on measured costs)."""
    lc = linear_clustering(dag, weight, handoff)
    merged = merge_clusters(dag, lc, weight, handoff)
    lane_of, makespan = map_to_lanes(dag, merged, weight, lanes, handoff)
    return plan_from_lanes(dag, lane_of, weight, len(lc), len(merged), makespan)


def plan_from_lanes(
    dag: Dag,
    lane_of: dict[str, int],
    weight: Callable[[str], float],
    clusters_lc: int,
    clusters_merged: int,
    makespan: float,
) -> LanePlan:
    """The plan that runs every node on its lane in graph order; empty lanes are dropped, lane 0 kept."""
    used = sorted(set(lane_of.values()), key=lambda ln: (ln != 0, ln))  # lane 0 stays first
    renumber = {ln: i for i, ln in enumerate(used)}  # an empty lane would cost a thread for nothing
    lane_of = {n: renumber[ln] for n, ln in lane_of.items()}
    by_lane: list[list[str]] = [[] for _ in range(max(len(used), 1))]
    for n in dag.nodes:
        by_lane[lane_of[n]].append(n)
    handoffs = dict.fromkeys(
        (p, lane_of[n]) for n in dag.nodes for p in dag.preds[n] if lane_of[p] != lane_of[n]
    )
    total = sum(weight(n) for n in dag.nodes)
    return LanePlan(
        tuple(tuple(b) for b in by_lane), tuple(handoffs), clusters_lc, clusters_merged, makespan, total
    )
