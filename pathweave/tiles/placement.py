"""Ramiel's lanes on the native engines (issue 24, item 3): each layer's tiles get a home worker.

The Python-thread lanes (``pathweave.lanes``) hand values between threads through queues (15-20 us a
hand-off) and run each node whole on one thread. Here the same plan, critical-path linear clustering of
the layer graph, merging, mapping onto as many lanes as workers (``lanes.mapping.plan_lanes``, on
measured layer costs), becomes a home worker per tile (``TileRuntime.set_homes``): a tile that becomes
ready goes to its home worker's row. With stealing, idle workers still take other rows' tiles (lanes as a
preference); without, each worker runs its lane only (static lanes, Ramiel's schedule on the engines).
A hand-off between native engines is a push into another row (a lock and an atomic, ~1 us), so the plan
is made with that cost, not the queues'.
"""

from __future__ import annotations

import numpy as np

from pathweave.analysis.dag import Dag
from pathweave.errors import InputError
from pathweave.lanes.mapping import plan_lanes
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.profile import TracedRun

#: a tile handed to another engine's row (us): lock, push, the consumer's cache misses on the values
NATIVE_HANDOFF_US = 2.0


def layer_dag(graph: TileGraph) -> Dag:
    """The graph of layers (by node name, in layer order, which is topological) that the tile edges join."""
    names = [str(n) for n in graph.layer_names]
    preds: dict[str, list[str]] = {n: [] for n in names}
    succs: dict[str, list[str]] = {n: [] for n in names}
    for p, c in sorted(graph.layer_edges(), key=lambda e: (names.index(e[1]), names.index(e[0]))):
        preds[c].append(p)
        succs[p].append(c)
    return Dag(tuple(names), {k: tuple(v) for k, v in preds.items()}, {k: tuple(v) for k, v in succs.items()})


def layer_costs(graph: TileGraph, runs: list[TracedRun]) -> np.ndarray:
    """Each layer's kernel time (us): its tiles' durations summed, the fastest of ``runs`` per tile."""
    if not runs:
        raise InputError("layer costs need at least one traced run")
    durations = np.min(np.stack([r.times[:, 1] - r.times[:, 0] for r in runs]), axis=0)
    return np.bincount(graph.tile_layer, weights=durations, minlength=graph.num_layers) / 1e3


def lane_homes(
    graph: TileGraph, cost_us: np.ndarray, workers: int, handoff_us: float = NATIVE_HANDOFF_US
) -> np.ndarray:
    """Each tile's home worker (int32 [tiles]): its layer's lane in Ramiel's plan on ``workers`` lanes."""
    if workers < 1:
        raise InputError(f"lanes need at least one worker, not {workers}")
    if cost_us.shape != (graph.num_layers,):
        raise InputError(f"need one cost per layer ({graph.num_layers}), got shape {cost_us.shape}")
    dag = layer_dag(graph)
    cost = {str(n): float(c) for n, c in zip(graph.layer_names, cost_us, strict=True)}
    plan = plan_lanes(dag, cost.__getitem__, workers, handoff_us)
    plan.verify(dag)
    lane = plan.lane_of()
    per_layer = np.array([lane[str(n)] for n in graph.layer_names], dtype=np.int32)
    return per_layer[graph.tile_layer]
