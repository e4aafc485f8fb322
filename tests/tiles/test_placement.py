"""Ramiel's lanes as home workers of tiles: the layer graph, the costs, the homes, and runs under them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pathweave
from pathweave.errors import InputError
from pathweave.tiles.placement import lane_homes, layer_costs, layer_dag
from pathweave.tiles.profile import traced_runs
from pathweave.tiles.strategy import TilesStrategy


def test_layer_dag_follows_the_tile_edges(branches: TilesStrategy) -> None:
    g = branches.graph
    dag = layer_dag(g)
    assert dag.nodes == tuple(str(n) for n in g.layer_names)
    assert {(p, c) for c in dag.nodes for p in dag.preds[c]} == g.layer_edges()
    for n in dag.nodes:
        assert all(dag.nodes.index(p) < dag.nodes.index(n) for p in dag.preds[n])


class _Concat(torch.nn.Module):
    """Two convolution branches over one input, concatenated: neither waits for the other."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.left = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.right = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return torch.cat([torch.relu(self.left(y)), torch.relu(self.right(y))], 1)


def test_two_equal_branches_go_to_two_workers() -> None:
    torch.manual_seed(0)
    strat = TilesStrategy(pathweave.capture(_Concat().eval(), torch.randn(1, 3, 24, 24)), threads=2)
    g = strat.graph
    strat.close()
    dag = layer_dag(g)
    forks = [n for n in dag.nodes if len(dag.succs[n]) == 2]
    assert len(forks) == 1, dag
    left, right = dag.succs[forks[0]]
    costs = np.full(g.num_layers, 1.0)
    names = [str(n) for n in g.layer_names]
    costs[names.index(left)] = costs[names.index(right)] = 100.0  # the branches weigh the same
    homes = lane_homes(g, costs, 2)
    assert homes.shape == (g.num_tiles,) and homes.dtype == np.int32
    layer_home = {names[layer]: int(homes[g.layer_tile_start[layer]]) for layer in range(g.num_layers)}
    assert layer_home[left] != layer_home[right]
    for layer in range(g.num_layers):  # a layer's tiles share a home
        lo, hi = g.layer_tile_start[layer], g.layer_tile_start[layer + 1]
        assert len(set(homes[lo:hi].tolist())) == 1
    assert set(lane_homes(g, costs, 1).tolist()) == {0}


def test_costs_and_homes_refuse_bad_input(branches: TilesStrategy) -> None:
    g = branches.graph
    with pytest.raises(InputError):
        layer_costs(g, [])
    with pytest.raises(InputError):
        lane_homes(g, np.ones(g.num_layers + 1), 2)
    with pytest.raises(InputError):
        lane_homes(g, np.ones(g.num_layers), 0)


@pytest.mark.parametrize("steal", [True, False])
def test_runs_under_lane_homes_match_the_unplaced_run(branches: TilesStrategy, steal: bool) -> None:
    inputs = list(branches.captured.example_inputs)
    want = branches.run_flat(inputs)
    costs = layer_costs(branches.graph, traced_runs(branches.runtime, lambda: branches.run_flat(inputs), 3))
    assert costs.shape == (branches.graph.num_layers,) and (costs > 0).all()
    homes = lane_homes(branches.graph, costs, 2)
    try:
        branches.runtime.set_homes(homes, steal)
        for _ in range(5):
            got = branches.run_flat(inputs)
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
            if not steal:
                np.testing.assert_array_equal(branches.runtime.ran_on(), homes)
    finally:
        branches.runtime.set_homes(None)
