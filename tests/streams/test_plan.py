"""Stream allocation (Opara, Nimble, wavefront, critical path), launch order and ``StreamPlan.verify``,
on hand-built DAGs with every expected result worked out in the comments. No GPU needed."""

from __future__ import annotations

import pytest

from pathweave.errors import PlanError, UnsupportedError
from pathweave.streams.alloc import (
    allocate_critical,
    allocate_nimble,
    allocate_opara,
    allocate_wavefront,
    transitive_reduction,
)
from pathweave.streams.launch_order import launch_order
from pathweave.streams.plan import StreamPlan, derive_waits, plan_streams, simulate
from tests.analysis.dags import make_dag

#: an inception block: input, four branches (two of them two ops long), concat
INCEPTION = make_dag("i a b1 b2 c1 c2 d o", "i>a i>b1 b1>b2 i>c1 c1>c2 i>d a>o b2>o c2>o d>o")
FORK_JOIN = make_dag("s x y z t", "s>x s>y s>z x>t y>t z>t")
FORK_JOIN_W = {"s": 1, "x": 2, "y": 5, "z": 3, "t": 1}


def test_opara_hands_each_stream_on_once() -> None:
    # a takes i's stream; b1, c1, d find i handed on and open streams 1..3; b2/c2 follow their producer;
    # o takes the stream of its first input a (not yet handed on)
    assert allocate_opara(INCEPTION) == {"i": 0, "a": 0, "b1": 1, "b2": 1, "c1": 2, "c2": 2, "d": 3, "o": 0}


def test_opara_stream_cap_joins_least_loaded() -> None:
    # cap 2, unit weights: b1 opens stream 1 (loads 2, 1 after b2: 2, 2); c1 joins stream 0 (tie: lowest),
    # c2 follows c1 (loads 4, 2); d joins stream 1; o follows a on stream 0
    got = allocate_opara(INCEPTION, max_streams=2)
    assert got == {"i": 0, "a": 0, "b1": 1, "b2": 1, "c1": 0, "c2": 0, "d": 1, "o": 0}


def test_opara_greedy_against_nimble_matching() -> None:
    # c reads b first, so Opara gives c b's stream; then d (only input b, handed on) needs a third stream.
    # Nimble's matching pairs a->c and b->d: two chains.
    dag = make_dag("a b c d", "b>c a>c b>d")
    assert allocate_opara(dag) == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert allocate_nimble(dag) == {"a": 0, "c": 0, "b": 1, "d": 1}


def test_transitive_reduction_drops_implied_edges() -> None:
    dag = make_dag("a b c d", "a>b b>c a>c c>d a>d b>d")
    assert transitive_reduction(dag) == {"a": ("b",), "b": ("c",), "c": ("d",), "d": ()}


def test_nimble_min_chain_cover_of_inception() -> None:
    # matching i->a, a->o, b1->b2, c1->c2 (b2, c2 and d cannot reach o, a has it): 8 - 4 = 4 chains
    assert allocate_nimble(INCEPTION) == {"i": 0, "a": 0, "o": 0, "b1": 1, "b2": 1, "c1": 2, "c2": 2, "d": 3}


def test_nimble_rematches_along_an_augmenting_path() -> None:
    # greedy would match a->c and then find b with nothing left; the augmenting path b->c, a->d fixes it
    dag = make_dag("a b c d", "a>c a>d b>c")
    got = allocate_nimble(dag)
    assert len(set(got.values())) == 2 and got["a"] == got["d"] and got["b"] == got["c"]


def test_wavefront_streams_by_position_in_wave() -> None:
    assert allocate_wavefront(FORK_JOIN) == {"s": 0, "x": 0, "y": 1, "z": 2, "t": 0}
    assert allocate_wavefront(FORK_JOIN, max_streams=2) == {"s": 0, "x": 0, "y": 1, "z": 0, "t": 0}


def test_critical_path_keeps_its_own_stream() -> None:
    # linear clustering (edge cost 1): [s y t], [z], [x]; their intervals all overlap, so none merge.
    # Streams by first use in graph order s x y z t: [s y t] 0, [x] 1, [z] 2.
    w = FORK_JOIN_W.__getitem__
    assert allocate_critical(FORK_JOIN, w, 1.0) == {"s": 0, "x": 1, "y": 0, "z": 2, "t": 0}
    # cap 2: [s y t] and [z] keep streams; [x] joins the lighter one (z: 3 against 7)
    assert allocate_critical(FORK_JOIN, w, 1.0, max_streams=2) == {"s": 0, "x": 1, "y": 0, "z": 1, "t": 0}


def test_launch_order_alternates_and_prefers_low_demand() -> None:
    bound = {"s": "compute", "x": "memory", "y": "compute", "z": "memory", "t": "memory"}
    demand = {"x": 0.5, "y": 0.9, "z": 0.2}
    # s (only one ready); then memory's turn: z (0.2) before x (0.5); compute: y; memory: x;
    # t is the last one ready (compute list empty, so memory again)
    assert launch_order(FORK_JOIN, bound, demand) == ("s", "z", "y", "x", "t")


def test_launch_order_without_profile_is_kahn_fifo() -> None:
    assert launch_order(INCEPTION, {}, {}) == ("i", "a", "b1", "c1", "d", "b2", "c2", "o")


def test_waits_of_the_inception_plan() -> None:
    plan = plan_streams(INCEPTION, "opara")
    assert plan.order == ("i", "a", "b1", "c1", "d", "b2", "c2", "o")
    assert plan.stream == (0, 0, 1, 2, 3, 1, 2, 0)
    # branches wait on i; o waits on the last node of every other stream, latest launched first
    assert plan.waits == (("i", "b1"), ("i", "c1"), ("i", "d"), ("c2", "o"), ("b2", "o"), ("d", "o"))
    assert plan.streams == 4 and plan.recorded() == ("i", "d", "b2", "c2")


def test_a_wait_known_through_another_is_dropped() -> None:
    dag = make_dag("a b c", "a>b a>c b>c")
    # c on stream 2 waits on b (stream 1), which itself waited on a: c knows a already
    assert derive_waits(("a", "b", "c"), {"a": 0, "b": 1, "c": 2}, dag.preds, 3) == (("a", "b"), ("b", "c"))


def test_simulated_makespan() -> None:
    plan = plan_streams(FORK_JOIN, "opara", FORK_JOIN_W.__getitem__, sync_us=1.0)
    # streams: s x t -> 0, y -> 1, z -> 2. s [0,1]; x [1,3]; y [2,7]; z [2,5]; t after y + 1: [8,9]
    assert plan.makespan_us == 9.0 and plan.sequential_us == 12.0
    assert simulate(plan.order, plan.stream_of(), plan.waits, FORK_JOIN_W.__getitem__, 1.0) == 9.0


def test_wavefront_adds_the_barrier_waits() -> None:
    dag = make_dag("a b c d", "a>c b>d")
    plan = plan_streams(dag, "wavefront")
    # data alone needs no wait (c follows a on stream 0, d follows b on 1); the barrier adds two
    assert plan.stream == (0, 1, 0, 1)
    assert plan.waits == (("b", "c"), ("a", "d"))
    assert plan_streams(dag, "opara").waits == ()


@pytest.mark.parametrize("policy", ["opara", "critical", "nimble", "wavefront", "single"])
def test_every_policy_verifies_on_a_wide_graph(policy: str) -> None:
    plan = plan_streams(INCEPTION, policy, max_streams=3)
    plan.verify(INCEPTION)
    assert StreamPlan.from_dict(plan.to_dict()) == plan


def test_verify_catches_a_missing_wait() -> None:
    plan = plan_streams(INCEPTION, "opara")
    broken = StreamPlan(plan.policy, plan.order, plan.stream, plan.waits[1:], 0.0, 0.0)
    with pytest.raises(PlanError, match="edge i -> b1"):
        broken.verify(INCEPTION)


def test_verify_catches_a_wait_on_an_event_not_yet_recorded() -> None:
    plan = plan_streams(INCEPTION, "opara")
    order = ("i", "a", "b1", "c1", "d", "c2", "b2", "o")  # still topological
    stream = tuple(plan.stream_of()[n] for n in order)
    late = StreamPlan("opara", order, stream, (*plan.waits, ("b2", "c2")), 0.0, 0.0)
    with pytest.raises(PlanError, match="launched after it"):
        late.verify(INCEPTION)


def test_verify_catches_an_order_against_the_data() -> None:
    bad = StreamPlan("opara", ("b", "a"), (0, 0), (), 0.0, 0.0)
    with pytest.raises(PlanError, match="b is launched before its input a"):
        bad.verify(make_dag("a b", "a>b"))


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(UnsupportedError, match="opara, critical, nimble, wavefront, single"):
        plan_streams(INCEPTION, "magic")


def test_single_stream_plan_needs_no_waits() -> None:
    plan = plan_streams(INCEPTION, "single")
    assert plan.order == INCEPTION.nodes and set(plan.stream) == {0} and plan.waits == ()
