"""Stream allocation: which CUDA stream each DAG node is launched on.

Four policies, all returning ``{node: stream}`` with streams numbered 0.. in order of first use:

- ``opara`` (Opara Alg. 1): in graph order, a node takes the stream of its first producer that has not
  yet handed its stream on to another consumer; otherwise it opens a new stream. With ``max_streams``,
  a node that would open one stream too many joins the stream with the least work placed so far.
- ``nimble`` (Nimble, Kwon et al. 2020): the fewest chains that cover the DAG's transitive reduction,
  from a maximum bipartite matching (node -> the consumer it hands its stream to); one stream per chain.
- ``wavefront`` (Rammer-style): nodes grouped by depth; a wave's nodes go to streams 0..k-1 and every
  wave waits for the whole previous one (``wave_barriers`` gives those extra edges).
- ``critical`` (ours): Ramiel's linear clustering on measured kernel times peels off the critical path
  first, so the longest chain of work never shares a stream with side branches; clusters that never
  overlap are merged, and with ``max_streams`` the lightest clusters are folded into the least loaded
  streams.
"""

from __future__ import annotations

from collections.abc import Callable

from pathweave.analysis.cluster import linear_clustering, merge_clusters
from pathweave.analysis.dag import Dag

Allocation = dict[str, int]


def allocate_opara(
    dag: Dag, weight: Callable[[str], float] | None = None, max_streams: int | None = None
) -> Allocation:
    weight = weight or (lambda n: 1.0)
    stream: Allocation = {}
    handed: set[str] = set()
    load: list[float] = []
    for n in dag.nodes:
        giver = next((p for p in dag.preds[n] if p not in handed), None)
        if giver is not None:
            handed.add(giver)
            s = stream[giver]
        elif max_streams is None or len(load) < max_streams:
            s = len(load)
            load.append(0.0)
        else:
            s = min(range(len(load)), key=lambda k: (load[k], k))
        stream[n] = s
        load[s] += weight(n)
    return stream


def transitive_reduction(dag: Dag) -> dict[str, tuple[str, ...]]:
    """Successor lists without the edges implied by longer paths (reachability as integer bitsets)."""
    index = {n: i for i, n in enumerate(dag.nodes)}
    reach: dict[str, int] = {}
    reduced: dict[str, tuple[str, ...]] = {}
    for n in reversed(dag.nodes):
        succs = sorted(dag.succs[n], key=index.__getitem__)
        covered = 0  # nodes reachable through a successor already kept or dropped
        keep = []
        for s in succs:  # nearest first: a later successor reachable from an earlier one is implied
            if not covered >> index[s] & 1:
                keep.append(s)
            covered |= reach[s]
        reach[n] = covered | sum(1 << index[s] for s in succs) | (1 << index[n])
        reduced[n] = tuple(keep)
    return reduced


def _augment(u: str, edges: dict[str, tuple[str, ...]], match_of: dict[str, str], seen: set[str]) -> bool:
    """One augmenting path from left vertex ``u`` (iterative depth-first search)."""
    stack = [(u, iter(edges[u]))]
    path: list[tuple[str, str]] = []
    while stack:
        left, it = stack[-1]
        for v in it:
            if v in seen:
                continue
            seen.add(v)
            path.append((left, v))
            owner = match_of.get(v)
            if owner is None:
                for lft, rgt in path:  # flip the path: every right vertex moves to its new partner
                    match_of[rgt] = lft
                return True
            stack.append((owner, iter(edges[owner])))
            break
        else:
            stack.pop()
            if path:
                path.pop()
    return False


def allocate_nimble(dag: Dag) -> Allocation:
    reduced = transitive_reduction(dag)
    match_of: dict[str, str] = {}  # consumer -> the producer whose stream it continues
    for n in dag.nodes:
        _augment(n, reduced, match_of, set())
    follows = {p: c for c, p in match_of.items()}
    stream: Allocation = {}
    for n in dag.nodes:  # chain heads in graph order get streams 0, 1, ...
        if n in match_of:
            continue
        s, cur = len(set(stream.values())), n
        while cur is not None:
            stream[cur] = s
            cur = follows.get(cur)
    return stream


def depths(dag: Dag) -> dict[str, int]:
    depth: dict[str, int] = {}
    for n in dag.nodes:
        depth[n] = 1 + max((depth[p] for p in dag.preds[n]), default=-1)
    return depth


def allocate_wavefront(dag: Dag, max_streams: int | None = None) -> Allocation:
    seen_in_wave: dict[int, int] = {}
    stream: Allocation = {}
    for n, d in depths(dag).items():
        k = seen_in_wave.get(d, 0)
        seen_in_wave[d] = k + 1
        stream[n] = k if max_streams is None else k % max_streams
    return stream


def wave_barriers(dag: Dag) -> dict[str, tuple[str, ...]]:
    """Rammer's barrier per wave, as extra edges: every node of wave d+1 after every node of wave d."""
    depth = depths(dag)
    waves: dict[int, list[str]] = {}
    for n in dag.nodes:
        waves.setdefault(depth[n], []).append(n)
    return {n: tuple(waves.get(depth[n] - 1, ())) for n in dag.nodes}


def allocate_critical(
    dag: Dag, weight: Callable[[str], float], sync_cost: float, max_streams: int | None = None
) -> Allocation:
    clusters = merge_clusters(dag, linear_clustering(dag, weight, sync_cost), weight, sync_cost)
    load = [sum(weight(n) for n in c) for c in clusters]
    keep = len(clusters) if max_streams is None else min(max_streams, len(clusters))
    home = {c: c for c in range(keep)}  # the first clusters found are the most critical: each keeps a stream
    stream_load = load[:keep]
    for c in sorted(range(keep, len(clusters)), key=lambda k: (-load[k], k)):
        home[c] = min(range(keep), key=lambda k: (stream_load[k], k))
        stream_load[home[c]] += load[c]
    order = {n: i for i, n in enumerate(dag.nodes)}
    return _renumber({n: home[i] for i, c in enumerate(clusters) for n in c}, order)


def _renumber(stream: Allocation, order: dict[str, int]) -> Allocation:
    """Streams numbered by first use in graph order (so the plan reads and compares the same way)."""
    first: dict[int, int] = {}
    for n in sorted(stream, key=order.__getitem__):
        first.setdefault(stream[n], len(first))
    return {n: first[stream[n]] for n in sorted(stream, key=order.__getitem__)}
