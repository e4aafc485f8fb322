"""The tile-count tuner: every strategy it returns is checked against eager, its scale names real layers,
and a scale changes the tile counts of exactly the layers it names."""

from __future__ import annotations

import pytest
import torch

import pathweave
from pathweave.errors import InputError
from pathweave.passes import fold_bn, prune
from pathweave.passes.pipeline import run_pipeline
from pathweave.tiles import fuse_epilogue as tile_fuse
from pathweave.tiles.build import build_tile_graph
from pathweave.tiles.tune import tune_tiles


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).eval()  # fmt: skip


def test_scale_changes_the_named_layer_only() -> None:
    captured = pathweave.capture(_net(), torch.randn(1, 3, 64, 64))
    gm = captured.gm
    run_pipeline(gm, (prune, fold_bn, tile_fuse))
    base = build_tile_graph(gm, work_per_tile=2e5)
    names = [str(n) for n in base.layer_names]
    conv = names[0]
    scaled = build_tile_graph(gm, work_per_tile=2e5, scale={conv: 0.25})
    counts = lambda g: list(g.layer_tile_start[1:] - g.layer_tile_start[:-1])  # noqa: E731
    before, after = counts(base), counts(scaled)
    assert after[0] < before[0] and after[1:] == before[1:]
    with pytest.raises(InputError, match="not tiled layers"):
        build_tile_graph(gm, scale={"nope": 2.0})


def test_tuned_strategy_matches_eager(outputs_close) -> None:
    model, x = _net(), torch.randn(1, 3, 64, 64)
    lines: list[str] = []
    strat, scale = tune_tiles(
        pathweave.capture(model, x), threads=2, layers=2, rounds=2, progress=lines.append
    )
    assert set(scale) <= {str(n) for n in strat.graph.layer_names}
    assert all(v in (0.5, 2.0, 0.25, 1.0, 4.0) for v in scale.values())
    assert strat.tile_scale == scale and lines  # at least one trial changed a tile count
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_scale_with_asked_counts_is_refused() -> None:
    captured = pathweave.capture(_net(), torch.randn(1, 3, 64, 64))
    name = next(n.name for n in captured.gm.graph.nodes if n.op == "call_function")
    with pytest.raises(InputError, match="cannot be used with tiles_per_layer"):
        build_tile_graph(captured.gm, 2, scale={name: 2.0})
