"""Graph rewrites. Each pass is one module with ``propose(gm) -> list[match]`` (pure) and
``apply(gm, matches)`` (rewrites); ``run_pipeline`` lints the graph after every apply.

The pipelines, in the order they run:

- ``FAST_CPU``: prune (constant propagation, identities, dead code) -> fold_bn -> merge_siblings
  (sibling 1x1 convs as one) -> fuse_conv (oneDNN prepacked conv + activation) -> fuse_linear
  (oneDNN linear + activation) -> channels_last
- lanes only: ``clone`` (bounded task cloning), kept where it shortens the simulated schedule
"""

from __future__ import annotations

from .pipeline import FAST_CPU, PassReport, run_pipeline

__all__ = ["FAST_CPU", "PassReport", "run_pipeline"]
