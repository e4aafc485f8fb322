"""Hyperclustering's mappings (``plan_hyper``) on a hand-built replicated DAG, simulated by hand.

The sub-batch DAG is a fork-join ``s -> a, b -> t`` (weights 1, 4, 2, 1; hand-off 1). On two lanes its
plan keeps the chain ``s a t`` on lane 0 and moves ``b`` to lane 1 (t at 5..6 instead of 7..8). The
replicated DAG has two groups, each fed by an input slice ``in<g>`` (weight 0), joined by ``out``.
"""

from __future__ import annotations

from pathweave.lanes.hyper import VARIANTS, plan_hyper
from pathweave.lanes.mapping import plan_lanes
from pathweave.meta import Replica
from tests.analysis.dags import make_dag

SUB = make_dag("s a b t", "s>a s>b a>t b>t")
SUB_W = {"s": 1, "a": 4, "b": 2, "t": 1}
HYPER = make_dag(
    "in0 s_0 a_0 b_0 t_0 in1 s_1 a_1 b_1 t_1 out",
    "in0>s_0 s_0>a_0 s_0>b_0 a_0>t_0 b_0>t_0 in1>s_1 s_1>a_1 s_1>b_1 a_1>t_1 b_1>t_1 t_0>out t_1>out",
)
REPLICA = {f"in{g}": Replica(g, "") for g in (0, 1)} | {
    f"{n}_{g}": Replica(g, n) for g in (0, 1) for n in SUB.nodes
}


def weight(n: str) -> float:
    return float(SUB_W.get(n.split("_")[0], 0))


def test_sub_batch_plan() -> None:
    sub = plan_lanes(SUB, SUB_W.__getitem__, 2, handoff=1.0)
    assert sub.lanes == (("s", "a", "t"), ("b",))
    assert sub.makespan_us == 6


def test_variants_simulated_by_hand() -> None:
    best, plans = plan_hyper(HYPER, REPLICA, SUB, weight, 2, handoff=1.0)
    assert set(plans) == set(VARIANTS)
    # plain: both groups on the sub plan's lanes; group 1 queues behind group 0 on lane 0:
    # s0 0-1, a0 1-5, b0 (lane 1) 2-4, t0 5-6, s1 6-7, a1 7-11, b1 (lane 1) 8-10, t1 11-12, out 12
    assert plans["plain"].lanes == (("in0", "s_0", "a_0", "t_0", "in1", "s_1", "a_1", "t_1", "out"),
                                    ("b_0", "b_1"))  # fmt: skip
    assert plans["plain"].makespan_us == 12
    # switched: group 1 shifted by one lane (its slice follows s_1): s1 (lane 1) 4-5, a1 5-9,
    # b1 (lane 0) 6-8, t1 9-10, out on lane 0 at 10 + 1 = 11
    assert plans["switched"].lanes == (("in0", "s_0", "a_0", "t_0", "b_1", "out"),
                                       ("b_0", "in1", "s_1", "a_1", "t_1"))  # fmt: skip
    assert plans["switched"].makespan_us == 11
    # groups: each group whole on its own lane, 8 each; out waits for t_1's hand-off: 9
    assert plans["groups"].lanes == (("in0", "s_0", "a_0", "b_0", "t_0", "out"),
                                     ("in1", "s_1", "a_1", "b_1", "t_1"))  # fmt: skip
    assert plans["groups"].makespan_us == 9
    assert plans[best].makespan_us == min(p.makespan_us for p in plans.values())
    for plan in plans.values():
        plan.verify(HYPER)


def test_ties_keep_the_published_variant() -> None:
    """With one lane every variant is the same sequence; the first (Ramiel's plain) is kept."""
    best, plans = plan_hyper(HYPER, REPLICA, SUB, weight, 1, handoff=1.0)
    assert best == "plain"
    assert {p.makespan_us for p in plans.values()} == {16}
