"""Ramiel's linear clustering (Alg. 1) and cluster merging (Alg. 2-3) on hand-built DAGs.

Every expected cluster and interval is computed by hand in the comment above its assertion:
``f(n)`` is the finish of n on the heaviest path reaching it, f(n) = max over live preds p of
(f(p) + edge_cost), plus w(n); the path ending at the largest f becomes the next cluster.
"""

from __future__ import annotations

from pathweave.analysis.cluster import cluster_intervals, linear_clustering, merge_clusters
from pathweave.analysis.dag import Dag
from tests.analysis.dags import make_dag


def test_make_dag_builds_the_dag_it_is_given() -> None:
    assert make_dag("a b c d", "a>b a>c b>d c>d") == Dag(
        nodes=("a", "b", "c", "d"),
        preds={"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")},
        succs={"a": ("b", "c"), "b": ("d",), "c": ("d",), "d": ()},
    )


def test_chain_is_one_cluster() -> None:
    dag = make_dag("a b c", "a>b b>c")
    w = {"a": 2, "b": 3, "c": 4}
    # f(a) = 2, f(b) = 2 + 1 + 3 = 6, f(c) = 6 + 1 + 4 = 11: the whole chain
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("a", "b", "c")]


def test_diamond_takes_the_heavier_branch_first() -> None:
    dag = make_dag("a b c d", "a>b a>c b>d c>d")
    w = {"a": 1, "b": 3, "c": 1, "d": 1}
    # f(a) = 1, f(b) = 1 + 1 + 3 = 5, f(c) = 1 + 1 + 1 = 3, f(d) = max(5 + 1, 3 + 1) + 1 = 7 via b
    # -> [a, b, d]; c is left alone -> [c]
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("a", "b", "d"), ("c",)]


def test_diamond_heavier_on_the_other_side() -> None:
    dag = make_dag("a b c d", "a>b a>c b>d c>d")
    w = {"a": 1, "b": 1, "c": 3, "d": 1}
    # mirror image: f(c) = 5 > f(b) = 3, so d is reached through c
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("a", "c", "d"), ("b",)]


def test_edge_cost_changes_the_critical_path() -> None:
    # a -> b -> c -> e (three hops, light nodes) against a -> d -> e (two hops, one heavy node)
    dag = make_dag("a b c d e", "a>b b>c a>d c>e d>e")
    w = {"a": 1, "b": 1, "c": 1, "d": 3, "e": 1}
    # edge_cost 0: f(a) = 1, f(b) = 2, f(c) = 3, f(d) = 1 + 3 = 4, f(e) = max(3, 4) + 1 = 5 via d
    # -> [a, d, e]; then b, c (a is gone): f(b) = 1, f(c) = 2 -> [b, c]
    assert linear_clustering(dag, w.__getitem__, edge_cost=0.0) == [("a", "d", "e"), ("b", "c")]
    # edge_cost 2: f(b) = 1 + 2 + 1 = 4, f(c) = 4 + 2 + 1 = 7, f(d) = 1 + 2 + 3 = 6,
    # f(e) = max(7 + 2, 6 + 2) + 1 = 10 via c -> [a, b, c, e]; d is left -> [d]
    assert linear_clustering(dag, w.__getitem__, edge_cost=2.0) == [("a", "b", "c", "e"), ("d",)]


def test_two_independent_chains_heavier_first() -> None:
    # the light chain comes first in graph order; the heavy one is still the first cluster
    dag = make_dag("a1 b1 a2 b2", "a1>a2 b1>b2")
    w = {"a1": 1, "a2": 1, "b1": 2, "b2": 2}
    # f(a1) = 1, f(b1) = 2, f(a2) = 1 + 1 + 1 = 3, f(b2) = 2 + 1 + 2 = 5 -> [b1, b2], then [a1, a2]
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("b1", "b2"), ("a1", "a2")]


def test_fork_join_three_branches() -> None:
    dag = make_dag("s x y z t", "s>x s>y s>z x>t y>t z>t")
    w = {"s": 1, "x": 2, "y": 5, "z": 3, "t": 1}
    # f(s) = 1, f(x) = 1 + 1 + 2 = 4, f(y) = 1 + 1 + 5 = 7, f(z) = 1 + 1 + 3 = 5,
    # f(t) = max(4 + 1, 7 + 1, 5 + 1) + 1 = 9 via y -> [s, y, t]
    # then x and z have no live preds: f(x) = 2, f(z) = 3 -> [z], then [x]
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("s", "y", "t"), ("z",), ("x",)]


def test_tie_between_ends_goes_to_the_first_in_graph_order() -> None:
    # two equal chains: f(a2) = f(b2) = 1 + 1 + 1 = 3; the first maximum in graph order ends the path
    w = {"a1": 1, "a2": 1, "b1": 1, "b2": 1}
    dag = make_dag("a1 a2 b1 b2", "a1>a2 b1>b2")
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("a1", "a2"), ("b1", "b2")]
    dag = make_dag("b1 b2 a1 a2", "a1>a2 b1>b2")
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("b1", "b2"), ("a1", "a2")]


def test_tie_between_preds_goes_to_the_first_pred_listed() -> None:
    # f(b) = f(c) = 1 + 1 + 2 = 4, so t is reached from both at 4 + 1; the strict '>' keeps the first
    # of t's preds, which is the order the op reads them, not graph order
    w = {"s": 1, "b": 2, "c": 2, "t": 1}
    dag = make_dag("s b c t", "s>b s>c b>t c>t")  # t = op(b, c)
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("s", "b", "t"), ("c",)]
    dag = make_dag("s b c t", "s>b s>c c>t b>t")  # t = op(c, b)
    assert linear_clustering(dag, w.__getitem__, edge_cost=1.0) == [("s", "c", "t"), ("b",)]


def test_clustering_covers_every_node_once() -> None:
    dag = make_dag("s x y z t", "s>x s>y s>z x>t y>t z>t")
    for w in ({"s": 1, "x": 1, "y": 1, "z": 1, "t": 1}, {"s": 0, "x": 0, "y": 0, "z": 0, "t": 0}):
        clusters = linear_clustering(dag, w.__getitem__, edge_cost=1.0)
        assert sorted(n for c in clusters for n in c) == sorted(dag.nodes)


def test_cluster_intervals_of_a_diamond() -> None:
    dag = make_dag("a b c d", "a>b a>c b>d c>d")
    w = {"a": 1, "b": 3, "c": 1, "d": 1}
    clusters = [("a", "b", "d"), ("c",)]
    # a [0, 1]; b after a, same cluster: [1, 4]; c after a, other cluster: 1 + 1 = 2 -> [2, 3];
    # d after b (same, 4) and c (other, 3 + 1 = 4): [4, 5]  ->  [a..d] = [0, 5], [c] = [2, 3]
    assert cluster_intervals(dag, clusters, w.__getitem__, edge_cost=1.0) == [(0.0, 5.0), (2.0, 3.0)]
    # edge_cost 0: c [1, 2]; d at max(4, 2) = 4 -> [4, 5]
    assert cluster_intervals(dag, clusters, w.__getitem__, edge_cost=0.0) == [(0.0, 5.0), (1.0, 2.0)]


def test_overlapping_clusters_stay_apart() -> None:
    dag = make_dag("a b c d", "a>b a>c b>d c>d")
    w = {"a": 1, "b": 3, "c": 1, "d": 1}
    clusters = linear_clustering(dag, w.__getitem__, edge_cost=1.0)
    assert clusters == [("a", "b", "d"), ("c",)]
    # intervals [0, 5] and [2, 3] overlap (see above): nothing to merge
    assert merge_clusters(dag, clusters, w.__getitem__, edge_cost=1.0) == clusters


def test_disjoint_clusters_are_merged() -> None:
    # s -> m -> y is the spine; x hangs off s early, t off m late
    dag = make_dag("s m x t y", "s>m s>x m>t m>y")
    w = {"s": 1, "m": 10, "x": 1, "t": 1, "y": 2}
    # f(s) = 1, f(m) = 1 + 1 + 10 = 12, f(x) = 1 + 1 + 1 = 3, f(t) = 12 + 1 + 1 = 14,
    # f(y) = 12 + 1 + 2 = 15 -> [s, m, y]; then f(x) = f(t) = 1, a tie: x first in graph order
    clusters = linear_clustering(dag, w.__getitem__, edge_cost=1.0)
    assert clusters == [("s", "m", "y"), ("x",), ("t",)]
    # s [0, 1], m [1, 11], y [11, 13]; x after s across clusters: [2, 3]; t after m across: [12, 13]
    assert cluster_intervals(dag, clusters, w.__getitem__, edge_cost=1.0) == [
        (0.0, 13.0),
        (2.0, 3.0),
        (12.0, 13.0),
    ]
    # loads 13, 1, 1: [s m y] overlaps both; [x] ends at 3 <= 12 where [t] starts -> merge them;
    # then [x, t] spans [2, 13] and overlaps [s m y]: done
    merged = merge_clusters(dag, clusters, w.__getitem__, edge_cost=1.0)
    assert merged == [("s", "m", "y"), ("x", "t")]
    assert cluster_intervals(dag, merged, w.__getitem__, edge_cost=1.0) == [(0.0, 13.0), (2.0, 13.0)]


def test_touching_intervals_count_as_disjoint() -> None:
    dag = make_dag("a b c", "a>b b>c")
    w = {"a": 1, "b": 1, "c": 1}
    singles = [("a",), ("b",), ("c",)]
    # edge_cost 0: [0, 1], [1, 2], [2, 3] only touch; equal loads, so the first pair goes first:
    # [a, b] = [0, 2] still touches [c] = [2, 3] -> one cluster again
    spans = cluster_intervals(dag, singles, w.__getitem__, edge_cost=0.0)
    assert spans == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert merge_clusters(dag, singles, w.__getitem__, edge_cost=0.0) == [("a", "b", "c")]


def test_heaviest_disjoint_pair_is_merged_first() -> None:
    dag = make_dag("a h l", "a>h a>l")
    w = {"a": 1, "h": 8, "l": 1}
    singles = [("a",), ("h",), ("l",)]
    # a [0, 1]; h after a across clusters: [2, 10]; l likewise: [2, 3]
    spans = cluster_intervals(dag, singles, w.__getitem__, edge_cost=1.0)
    assert spans == [(0.0, 1.0), (2.0, 10.0), (2.0, 3.0)]
    # by load h (8), a (1), l (1): h-l overlap, h-a are disjoint -> [a, h]; now h follows a in its
    # cluster: [0, 9], which overlaps l [2, 3] -> l stays on its own (lightest-first would give [a, l])
    merged = merge_clusters(dag, singles, w.__getitem__, edge_cost=1.0)
    assert merged == [("a", "h"), ("l",)]
    assert cluster_intervals(dag, merged, w.__getitem__, edge_cost=1.0) == [(0.0, 9.0), (2.0, 3.0)]


def test_merged_cluster_keeps_graph_order() -> None:
    dag = make_dag("a b c", "a>b b>c")
    w = {"a": 1, "b": 2, "c": 3}
    singles = [("a",), ("b",), ("c",)]
    # edge_cost 1: a [0, 1], b [2, 4], c [5, 8]; by load c, b, a: c-b disjoint -> (b, c) in graph
    # order at b's place; then a [0, 1] vs [b, c] = [2, 7]: disjoint -> (a, b, c)
    assert merge_clusters(dag, singles, w.__getitem__, edge_cost=1.0) == [("a", "b", "c")]
    assert merge_clusters(dag, [("c",), ("a",), ("b",)], w.__getitem__, edge_cost=1.0) == [("a", "b", "c")]
