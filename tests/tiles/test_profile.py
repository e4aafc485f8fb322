"""Where a tile program's time goes: per-layer kernel time, and one inference traced tile by tile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pathweave.tiles.abi import S_PROFILE
from pathweave.tiles.profile import profile_layers, trace_tiles
from pathweave.tiles.strategy import TilesStrategy


def test_every_layer_gets_its_tiles_and_some_time(branches: TilesStrategy) -> None:
    inputs = list(branches.captured.example_inputs)
    names = [str(n) for n in branches.graph.layer_names]
    spent = profile_layers(branches.program, names, lambda: branches.run_flat(inputs), runs=2)
    assert [p.layer for p in spent] == names
    assert [p.tiles for p in spent] == list(np.diff(branches.graph.layer_tile_start))
    assert all(p.ms > 0 for p in spent)
    with pytest.raises(ValueError, match="runs"):
        profile_layers(branches.program, names, lambda: None, runs=0)


def test_a_hot_profile_runs_each_tile_untimed_first(branches: TilesStrategy) -> None:
    """Each tile twice, the second timed (the C counts the untimed runs; a mismatch raises); afterwards
    the program runs unprofiled with the outputs it had before."""
    inputs = list(branches.captured.example_inputs)
    names = [str(n) for n in branches.graph.layer_names]
    before = [t.clone() for t in branches.run_flat(inputs)]
    spent = profile_layers(branches.program, names, lambda: branches.run_flat(inputs), runs=2, hot=True)
    assert [p.tiles for p in spent] == list(np.diff(branches.graph.layer_tile_start))
    assert all(p.ms > 0 for p in spent)
    assert not branches.program.layers[:, S_PROFILE].any()
    assert all(torch.equal(a, b) for a, b in zip(before, branches.run_flat(inputs), strict=True))


def test_a_trace_has_every_tile_once_after_its_parents(branches: TilesStrategy) -> None:
    graph = branches.graph
    inputs = list(branches.captured.example_inputs)
    spans = trace_tiles(branches.runtime, graph, lambda: branches.run_flat(inputs), warmup=1)
    assert len(spans) == graph.num_tiles
    assert {s.stream for s in spans} <= {0, 1} and min(s.start_us for s in spans) == 0.0
    counts = dict(zip(map(str, graph.layer_names), np.diff(graph.layer_tile_start).tolist(), strict=True))
    assert {name: sum(s.name == name for s in spans) for name in counts} == counts
    # a worker runs one tile at a time
    for worker in {s.stream for s in spans}:
        mine = [s for s in spans if s.stream == worker]
        assert all(a.start_us + a.dur_us <= b.start_us for a, b in zip(mine, mine[1:], strict=False))
    # each tile starts after all its parents ended: the times come from the clock the engines read
    with branches.runtime.tracing() as times:
        branches.run_flat(inputs)
    for t in range(graph.num_tiles):
        parents = graph.parents_indices[graph.parents_indptr[t] : graph.parents_indptr[t + 1]]
        assert all(times[p, 1] <= times[t, 0] for p in parents), f"tile {t} started before a parent ended"
    # outside the context nothing is recorded
    kept = times.copy()
    branches.run_flat(inputs)
    assert (times == kept).all()
