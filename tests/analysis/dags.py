"""Hand-built DAGs for the schedule tests: no torch, every weight written out."""

from __future__ import annotations

from pathweave.analysis.dag import Dag


def make_dag(nodes: str, edges: str) -> Dag:
    """``make_dag("a b c", "a>b b>c")``: nodes in graph order; a node's predecessors in the order its
    edges are listed (``build_dag`` lists them in the order the op reads its arguments)."""
    order = tuple(nodes.split())
    preds: dict[str, list[str]] = {n: [] for n in order}
    for edge in edges.split():
        src, dst = edge.split(">")
        preds[dst].append(src)
    succs: dict[str, list[str]] = {n: [] for n in order}
    for n in order:
        for p in preds[n]:
            succs[p].append(n)
    return Dag(
        nodes=order,
        preds={n: tuple(ps) for n, ps in preds.items()},
        succs={n: tuple(ss) for n, ss in succs.items()},
    )
