"""Ramiel's clustering: recursive critical-path linear clustering, then merging of clusters that
never run at the same time.

Linear clustering (Ramiel Alg. 1, after Kim & Browne): the critical path of the DAG (node weights
plus an edge cost per hop) becomes a cluster; its nodes leave the DAG, and the critical path of what
remains becomes the next cluster, until no node is left. Every cluster is a chain, so it runs on
one worker without any hand-off inside it.

Merging (Ramiel Alg. 2-3): with clusters placed on separate workers, each cluster occupies a time
interval [first start, last finish] of the schedule in which every node starts as soon as its
inputs are ready. Two clusters whose intervals do not overlap gain nothing from separate workers,
so they are merged, largest first, until no pair is disjoint.
"""

from __future__ import annotations

from collections.abc import Callable

from pathweave.analysis.dag import Dag

Cluster = tuple[str, ...]


def _critical_chain(dag: Dag, alive: set[str], weight: Callable[[str], float], edge_cost: float) -> list[str]:
    """The heaviest path through the nodes still in ``alive`` (graph order is topological)."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for n in dag.nodes:
        if n not in alive:
            continue
        best, best_p = 0.0, None
        for p in dag.preds[n]:
            if p in alive and (best_p is None or finish[p] + edge_cost > best):
                best, best_p = finish[p] + edge_cost, p
        finish[n], via[n] = best + weight(n), best_p
    end: str | None = max(finish, key=lambda n: finish[n])  # first maximum in graph order
    chain = []
    while end is not None:
        chain.append(end)
        end = via[end]
    return chain[::-1]


def linear_clustering(dag: Dag, weight: Callable[[str], float], edge_cost: float = 1.0) -> list[Cluster]:
    """Ramiel Alg. 1: peel off critical paths until every node is in a cluster."""
    alive = set(dag.nodes)
    clusters: list[Cluster] = []
    while alive:
        chain = _critical_chain(dag, alive, weight, edge_cost)
        clusters.append(tuple(chain))
        alive.difference_update(chain)
    return clusters


def cluster_intervals(
    dag: Dag, clusters: list[Cluster], weight: Callable[[str], float], edge_cost: float
) -> list[tuple[float, float]]:
    """[start, finish] of each cluster when every cluster has its own worker and every node starts as
    soon as its inputs have arrived (an edge costs ``edge_cost`` only between clusters) and its
    cluster's previous node has finished."""
    owner = {n: i for i, c in enumerate(clusters) for n in c}
    prev_in_cluster = {c[k]: c[k - 1] for c in clusters for k in range(1, len(c))}
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    order = {n: i for i, n in enumerate(dag.nodes)}
    for n in sorted(owner, key=order.__getitem__):
        ready = finish.get(prev_in_cluster.get(n, ""), 0.0)
        for p in dag.preds[n]:
            ready = max(ready, finish[p] + (edge_cost if owner[p] != owner[n] else 0.0))
        start[n], finish[n] = ready, ready + weight(n)
    return [(min(start[n] for n in c), max(finish[n] for n in c)) for c in clusters]


def merge_clusters(
    dag: Dag, clusters: list[Cluster], weight: Callable[[str], float], edge_cost: float = 1.0
) -> list[Cluster]:
    """Ramiel Alg. 2-3: repeatedly merge the heaviest pair of clusters whose intervals are disjoint."""
    order = {n: i for i, n in enumerate(dag.nodes)}
    clusters = [tuple(c) for c in clusters]
    while True:
        spans = cluster_intervals(dag, clusters, weight, edge_cost)
        loads = [sum(weight(n) for n in c) for c in clusters]
        pair = _disjoint_pair(spans, loads)
        if pair is None:
            return clusters
        i, j = pair
        merged = tuple(sorted(clusters[i] + clusters[j], key=order.__getitem__))
        clusters = [c for k, c in enumerate(clusters) if k not in (i, j)]
        clusters.insert(min(i, j), merged)


def _disjoint_pair(spans: list[tuple[float, float]], loads: list[float]) -> tuple[int, int] | None:
    by_load = sorted(range(len(spans)), key=lambda k: -loads[k])
    for a_pos, i in enumerate(by_load):
        for j in by_load[a_pos + 1 :]:
            (s1, e1), (s2, e2) = spans[i], spans[j]
            if e1 <= s2 or e2 <= s1:
                return (i, j)
    return None
