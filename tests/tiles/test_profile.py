"""Where a tile program's time goes: per-layer kernel time, and one inference traced tile by tile."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

import pathweave
from pathweave.tiles.profile import profile_layers, trace_tiles
from pathweave.tiles.strategy import TilesStrategy


class _Branches(torch.nn.Module):
    """Two convolution branches over one input, added: tiles of both can run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.left = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.right = torch.nn.Conv2d(16, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return self.left(y) + self.right(y)


@pytest.fixture(scope="module")
def strategy() -> Iterator[TilesStrategy]:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 40, 40)
    strat = TilesStrategy(pathweave.capture(_Branches().eval(), x), threads=2)
    yield strat
    strat.close()


def test_every_layer_gets_its_tiles_and_some_time(strategy: TilesStrategy) -> None:
    inputs = list(strategy.captured.example_inputs)
    names = [str(n) for n in strategy.graph.layer_names]
    spent = profile_layers(strategy.program, names, lambda: strategy.run_flat(inputs), runs=2)
    assert [p.layer for p in spent] == names
    assert [p.tiles for p in spent] == list(np.diff(strategy.graph.layer_tile_start))
    assert all(p.ms > 0 for p in spent)
    with pytest.raises(ValueError, match="runs"):
        profile_layers(strategy.program, names, lambda: None, runs=0)


def test_a_trace_has_every_tile_once_after_its_parents(strategy: TilesStrategy) -> None:
    graph = strategy.graph
    inputs = list(strategy.captured.example_inputs)
    spans = trace_tiles(strategy.runtime, graph, lambda: strategy.run_flat(inputs), warmup=1)
    assert len(spans) == graph.num_tiles
    assert {s.stream for s in spans} <= {0, 1} and min(s.start_us for s in spans) == 0.0
    counts = dict(zip(map(str, graph.layer_names), np.diff(graph.layer_tile_start).tolist(), strict=True))
    assert {name: sum(s.name == name for s in spans) for name in counts} == counts
    # a worker runs one tile at a time
    for worker in {s.stream for s in spans}:
        mine = [s for s in spans if s.stream == worker]
        assert all(a.start_us + a.dur_us <= b.start_us for a, b in zip(mine, mine[1:], strict=False))
    # each tile starts after all its parents ended: the times come from the clock the engines read
    with strategy.runtime.tracing() as times:
        strategy.run_flat(inputs)
    for t in range(graph.num_tiles):
        parents = graph.parents_indices[graph.parents_indptr[t] : graph.parents_indptr[t + 1]]
        assert all(times[p, 1] <= times[t, 0] for p in parents), f"tile {t} started before a parent ended"
    # outside the context nothing is recorded
    kept = times.copy()
    strategy.run_flat(inputs)
    assert (times == kept).all()
