"""Where a tile program's time goes: the kernels add each tile's wall time to a per-layer counter.

The counters are addressed from the layer rows (slot ``S_PROFILE``), which the native runtime reads in
place, so profiling needs no other build of the runtime and costs two clock reads per tile only while
it is on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .tile_program import S_PROFILE, TileProgram


@dataclass(frozen=True)
class LayerTime:
    layer: str
    ms: float  # kernel time summed over the layer's tiles and all workers, per inference
    tiles: int  # tiles run per inference


def profile_layers(
    program: TileProgram, names: list[str], run: Callable[[], None], runs: int = 5
) -> list[LayerTime]:
    """Run ``run`` (one inference of ``program``) ``runs`` times with the kernels timing themselves;
    returns each layer's kernel time per inference, in the program's layer order."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, not {runs}")
    counters = np.zeros((len(program.layers), 2), dtype=np.int64)
    program.layers[:, S_PROFILE] = counters.ctypes.data + 16 * np.arange(len(program.layers))
    try:
        for _ in range(runs):
            run()
    finally:
        program.layers[:, S_PROFILE] = 0
    return [
        LayerTime(str(name), float(ns) / runs / 1e6, int(calls) // runs)
        for name, (ns, calls) in zip(names, counters, strict=True)
    ]
