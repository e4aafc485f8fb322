"""Graph rewrites. Each pass is one module with ``propose(gm) -> list[match]`` (pure) and
``apply(gm, matches)`` (rewrites); ``run_pipeline`` lints the graph after every apply.

The pipelines, in the order they run:

- ``FAST_CPU``: prune (constant propagation, identities, dead code) -> fold_bn -> merge_siblings
  (sibling 1x1 convs as one) -> fuse_conv (oneDNN prepacked conv + activation) -> fuse_linear
  (oneDNN linear + activation) -> channels_last
- lanes only: ``clone`` (bounded task cloning), kept where it shortens the simulated schedule

Tiling (ASPEN) reads the graph and rewrites nothing: ``tile_ranges`` (interval arithmetic per op) ->
``tile_ops`` (fx nodes to range maps, views folded) -> ``tile_grid`` (a layer's tiles) ->
``tile_graph.build_tile_graph`` (a ``TileGraph``: tile-to-tile dependencies as CSR arrays).
"""

from __future__ import annotations

from .pipeline import FAST_CPU, PassReport, run_pipeline
from .tile_graph import TileGraph, build_tile_graph

__all__ = ["FAST_CPU", "PassReport", "TileGraph", "build_tile_graph", "run_pipeline"]
