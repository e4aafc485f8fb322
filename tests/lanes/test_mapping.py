"""Clusters onto P lanes (``map_to_lanes``), the whole pipeline (``plan_lanes``) and ``LanePlan.verify``.

Lane assignments and makespans are simulated by hand in the comments: walking the nodes in graph
order, a cluster's first node picks the lane where it starts earliest (ties: the lowest lane), an
input from another lane arrives ``handoff`` later, and a lane runs one node at a time.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pathweave.analysis.dag import build_dag
from pathweave.errors import PlanError
from pathweave.frontend.capture import capture
from pathweave.lanes.mapping import map_to_lanes, plan_lanes
from pathweave.lanes.plan import LanePlan
from tests.analysis.dags import make_dag

FORK_JOIN = make_dag("s x y z t", "s>x s>y s>z x>t y>t z>t")
FORK_JOIN_W = {"s": 1, "x": 2, "y": 5, "z": 3, "t": 1}
#: linear clustering of FORK_JOIN with edge cost 1 (see test_cluster.test_fork_join_three_branches)
FORK_JOIN_CLUSTERS = [("s", "y", "t"), ("z",), ("x",)]


def test_fork_join_on_two_lanes() -> None:
    lane_of, makespan = map_to_lanes(FORK_JOIN, FORK_JOIN_CLUSTERS, FORK_JOIN_W.__getitem__, 2, handoff=1.0)
    # s: both lanes free at 0 -> lane 0, [0, 1]
    # x (cluster [x]): lane 0 at max(1, 1) = 1, lane 1 at 1 + 1 = 2 -> lane 0, [1, 3]
    # y (cluster of s): lane 0, [3, 8]
    # z (cluster [z]): lane 0 at max(8, 1) = 8, lane 1 at max(0, 1 + 1) = 2 -> lane 1, [2, 5]
    # t (cluster of s): lane 0 at max(8; x 3, y 8, z 5 + 1) = 8 -> [8, 9]
    assert lane_of == {"s": 0, "x": 0, "y": 0, "z": 1, "t": 0}
    assert makespan == 9.0


def test_a_dear_handoff_keeps_one_lane() -> None:
    lane_of, makespan = map_to_lanes(FORK_JOIN, FORK_JOIN_CLUSTERS, FORK_JOIN_W.__getitem__, 2, handoff=10.0)
    # as above, but z on lane 1 could only start at 1 + 10 = 11 > 8 on lane 0: everything on lane 0,
    # back to back: 1 + 2 + 5 + 3 + 1 = 12
    assert lane_of == dict.fromkeys("sxyzt", 0)
    assert makespan == 12.0


def test_more_clusters_than_lanes() -> None:
    dag = make_dag("a b c d", "")
    w = {"a": 4, "b": 3, "c": 2, "d": 1}
    lane_of, makespan = map_to_lanes(dag, [("a",), ("b",), ("c",), ("d",)], w.__getitem__, 2, handoff=1.0)
    # a: lane 0 [0, 4]; b: lane 0 free at 4, lane 1 at 0 -> lane 1 [0, 3];
    # c: 4 vs 3 -> lane 1 [3, 5]; d: 4 vs 5 -> lane 0 [4, 5]
    assert lane_of == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert makespan == 5.0


def test_a_cluster_stays_on_its_first_nodes_lane() -> None:
    dag = make_dag("a b c", "")
    w = {"a": 5, "b": 1, "c": 1}
    lane_of, makespan = map_to_lanes(dag, [("a", "c"), ("b",)], w.__getitem__, 2, handoff=1.0)
    # a: lane 0 [0, 5]; b: lane 1 [0, 1]; c follows a to lane 0 [5, 6] though lane 1 is free at 1
    assert lane_of == {"a": 0, "b": 1, "c": 0}
    assert makespan == 6.0


def test_plan_lanes_on_a_fork_join() -> None:
    plan = plan_lanes(FORK_JOIN, FORK_JOIN_W.__getitem__, lanes=2, handoff=1.0)
    # clusters [s y t], [z], [x]; intervals [0, 7], [2, 5], [2, 4] all overlap, so nothing merges;
    # then the lanes of test_fork_join_on_two_lanes; s -> z and z -> t cross lanes
    assert plan == LanePlan(
        lanes=(("s", "x", "y", "t"), ("z",)),
        handoffs=(("s", 1), ("z", 0)),
        clusters_lc=3,
        clusters_merged=3,
        makespan_us=9.0,
        sequential_us=12.0,
    )
    plan.verify(FORK_JOIN)
    assert "2 lanes (4, 1 ops), 2 hand-offs; Ramiel clusters 3 -> 3 merged" in plan.summary()


def test_plan_lanes_with_spare_lanes() -> None:
    dag = make_dag("a b c", "a>b b>c")
    plan = plan_lanes(dag, {"a": 1, "b": 1, "c": 1}.__getitem__, lanes=3, handoff=1.0)
    assert plan.lanes == (("a", "b", "c"),)  # empty lanes are dropped: they would cost idle threads
    assert plan.handoffs == () and plan.makespan_us == plan.sequential_us == 3.0
    plan.verify(dag)


def test_plan_lanes_is_deterministic() -> None:
    w = {"s": 1.5, "x": 2.5, "y": 2.5, "z": 2.5, "t": 1.0}  # ties everywhere
    plans = {plan_lanes(FORK_JOIN, w.__getitem__, lanes=2, handoff=0.5) for _ in range(5)}
    assert len(plans) == 1
    plans.pop().verify(FORK_JOIN)


def test_parallel_branch_gets_the_second_lane() -> None:
    # s -> a -> t and s -> r -> b -> t, a listed first (as `left = f(s); right = g(s)` gives)
    dag = make_dag("s a r b t", "s>a s>r r>b a>t b>t")
    w = {"s": 1, "a": 10, "r": 1, "b": 10, "t": 1}
    plan = plan_lanes(dag, w.__getitem__, lanes=2, handoff=1.0)
    # clusters [s r b t] (f(t) = 16 via b) and [a]; their intervals [0, 14] and [2, 12] overlap.
    # Today: a starts earliest on lane 0 (1 against 1 + 1 = 2 on lane 1), so r, b, t queue behind
    # it: makespan 23 = the sequential time. With a on lane 1: s [0, 1], a [2, 12], r [1, 2],
    # b [2, 12], t [13, 14] -> 14.
    assert plan.clusters_merged == 2
    assert all(plan.lanes), f"a lane is empty: {plan.lanes}"
    assert plan.makespan_us < plan.sequential_us


# --- LanePlan.verify -------------------------------------------------------------------------------

BRANCHES = make_dag("stem left right head", "stem>left stem>right left>head right>head")


def _plan(lanes: tuple, handoffs: tuple) -> LanePlan:
    return LanePlan(lanes, handoffs, clusters_lc=2, clusters_merged=2, makespan_us=0.0, sequential_us=0.0)


def test_verify_accepts_a_good_plan() -> None:
    _plan((("stem", "left", "head"), ("right",)), (("stem", 1), ("right", 0))).verify(BRANCHES)


def test_verify_names_an_edge_with_no_handoff() -> None:
    plan = _plan((("stem", "left", "head"), ("right",)), (("stem", 1),))
    with pytest.raises(PlanError, match=r"^edge right -> head crosses lanes 1 -> 0 with no hand-off$"):
        plan.verify(BRANCHES)


def test_verify_names_an_edge_ordered_backwards_in_a_lane() -> None:
    plan = _plan((("stem", "head", "left"), ("right",)), (("stem", 1), ("right", 0)))
    with pytest.raises(PlanError, match=r"^edge left -> head: left runs after head on lane 0$"):
        plan.verify(BRANCHES)


def test_verify_names_a_node_on_no_lane() -> None:
    plan = _plan((("stem", "left", "head"), ()), ())
    with pytest.raises(PlanError, match=r"plan leaves nodes on no lane: \['right'\]"):
        plan.verify(BRANCHES)


def test_verify_rejects_a_node_on_two_lanes() -> None:
    plan = _plan((("stem", "left", "right", "head"), ("right",)), (("stem", 1), ("right", 0)))
    with pytest.raises(PlanError, match=r"more than one lane or twice: \['right'\]"):
        plan.verify(BRANCHES)


def test_verify_names_a_node_on_two_lanes() -> None:
    plan = _plan((("stem", "left", "right", "head"), ("right",)), (("stem", 1), ("right", 0)))
    with pytest.raises(PlanError) as info:
        plan.verify(BRANCHES)
    assert "right" in str(info.value), str(info.value)


def test_verify_rejects_an_order_against_the_graph_order() -> None:
    # v -> x and y -> u; lane 0 runs x then y, lane 1 runs u then v: x waits for v, which waits
    # behind u, which waits for y, which waits behind x -- a deadlock, though every edge has its hand-off
    dag = make_dag("v x y u", "v>x y>u")
    plan = _plan((("x", "y"), ("u", "v")), (("v", 0), ("y", 1)))
    with pytest.raises(PlanError, match=r"^lane 1 runs u before v, against the graph's order$"):
        plan.verify(dag)


def test_plan_drops_empty_lanes() -> None:
    captured = capture(nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval(), torch.randn(2, 3))
    dag = build_dag(captured.gm)
    plan = plan_lanes(dag, lambda n: 1.0, lanes=8)
    assert len(plan.lanes) == 1 and plan.lanes[0] == dag.nodes  # a chain: one lane, no idle threads
    plan.verify(dag)
