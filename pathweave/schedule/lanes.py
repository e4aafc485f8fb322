"""Ours, beyond Ramiel: put the clusters on P lanes by list scheduling on measured node costs.

Ramiel gives every merged cluster its own process. Here the number of lanes is what the machine
has (P = cores / intra-op threads per lane). Walking the nodes in graph order, the first node of a
cluster places the whole cluster on the lane where it can start earliest, counting a hand-off cost
for each input that arrives from another lane; the rest of the cluster follows it there.
"""

from __future__ import annotations

from collections.abc import Callable

from ..analyze.dag import Dag
from .cluster import Cluster, linear_clustering, merge_clusters
from .plan import LanePlan

#: a cross-lane hand-off through a SimpleQueue, measured here at 15-20 us
HANDOFF_US = 20.0


def map_to_lanes(
    dag: Dag, clusters: list[Cluster], weight: Callable[[str], float], lanes: int, handoff: float
) -> tuple[dict[str, int], float]:
    """Lane of every node and the simulated makespan."""
    owner = {n: i for i, c in enumerate(clusters) for n in c}
    placed: dict[int, int] = {}
    free = [0.0] * lanes
    finish: dict[str, float] = {}
    lane_of: dict[str, int] = {}
    for n in dag.nodes:
        c = owner[n]
        if c not in placed:
            placed[c] = min(range(lanes), key=lambda ln: (max(free[ln], _ready(dag, n, ln, lane_of, finish,
                                                                               handoff)), ln))  # fmt: skip
        ln = placed[c]
        start = max(free[ln], _ready(dag, n, ln, lane_of, finish, handoff))
        finish[n] = start + weight(n)
        free[ln] = finish[n]
        lane_of[n] = ln
    return lane_of, max(finish.values(), default=0.0)


def _ready(
    dag: Dag, n: str, ln: int, lane_of: dict[str, int], finish: dict[str, float], handoff: float
) -> float:
    return max((finish[p] + (handoff if lane_of[p] != ln else 0.0) for p in dag.preds[n]), default=0.0)


def plan_lanes(dag: Dag, weight: Callable[[str], float], lanes: int, handoff: float = HANDOFF_US) -> LanePlan:
    """Linear clustering, merging, then mapping onto ``lanes`` lanes (all on measured costs)."""
    lc = linear_clustering(dag, weight, handoff)
    merged = merge_clusters(dag, lc, weight, handoff)
    lane_of, makespan = map_to_lanes(dag, merged, weight, lanes, handoff)
    by_lane: list[list[str]] = [[] for _ in range(lanes)]
    for n in dag.nodes:
        by_lane[lane_of[n]].append(n)
    handoffs = dict.fromkeys(
        (p, lane_of[n]) for n in dag.nodes for p in dag.preds[n] if lane_of[p] != lane_of[n]
    )
    total = sum(weight(n) for n in dag.nodes)
    return LanePlan(tuple(tuple(b) for b in by_lane), tuple(handoffs), len(lc), len(merged), makespan, total)
