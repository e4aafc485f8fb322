"""Launch order (Opara Alg. 2): the order in which the host issues kernels to the streams.

Kahn's algorithm with two ready lists, memory-bound and compute-bound nodes. Picks alternate between
the lists (compute-bound first), so a long compute kernel is in flight while memory-bound kernels of
other streams slot in beside it; within a list the node with the least resource demand goes first, so
it leaves room on the SMs for the next one. Ties keep the order in which nodes became ready.

Demand is the share of the GPU a node's largest kernel occupies (``analysis.kernels.node_demand``),
over all of its kernels and all three resources (threads, registers, shared memory): Opara's prototype
ranks by the first kernel's shared memory alone.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from pathweave.analysis.dag import Dag

MEMORY, COMPUTE = "memory", "compute"


def launch_order(dag: Dag, bound: Mapping[str, str], demand: Mapping[str, float]) -> tuple[str, ...]:
    indeg = {n: len(dag.preds[n]) for n in dag.nodes}
    ready: dict[str, list[tuple[float, int, str]]] = {MEMORY: [], COMPUTE: []}
    seq = 0

    def push(n: str) -> None:
        nonlocal seq
        heapq.heappush(ready[MEMORY if bound.get(n) == MEMORY else COMPUTE], (demand.get(n, 0.0), seq, n))
        seq += 1

    for n in dag.nodes:
        if not indeg[n]:
            push(n)
    order: list[str] = []
    turn = COMPUTE
    while ready[MEMORY] or ready[COMPUTE]:
        take = turn if ready[turn] else (MEMORY if turn == COMPUTE else COMPUTE)
        n = heapq.heappop(ready[take])[2]
        order.append(n)
        turn = MEMORY if take == COMPUTE else COMPUTE
        for s in dag.succs[n]:
            indeg[s] -= 1
            if not indeg[s]:
                push(s)
    return tuple(order)
