"""Tile counts tuned by measurement, as ASPEN's generator does.

The default counts come from a work-per-tile rule. The tuner takes the layers that cost the most kernel
time (measured by ``tile_profile``) one at a time, tries their count scaled by each factor, and keeps a
change only when the whole inference, timed against the current best in alternating rounds, gets faster
by more than ``MIN_GAIN``. The result is a ``tile_scale`` for ``TilesStrategy``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from pathweave.errors import InputError
from pathweave.frontend.graph import Captured
from pathweave.tiles.profile import profile_layers
from pathweave.tiles.strategy import TilesStrategy

#: a change is kept only when the median gets at least this much faster
MIN_GAIN = 0.02
FACTORS = (0.5, 2.0)


def _median_pair(
    a: TilesStrategy, b: TilesStrategy, inputs: list[torch.Tensor], rounds: int
) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, timed in alternating rounds (after one warm-up each)."""
    a.run_flat(inputs), b.run_flat(inputs)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for strat, out in ((a, times[0]), (b, times[1])):
            t0 = time.perf_counter()
            strat.run_flat(inputs)
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def tune_tiles(
    captured: Captured,
    threads: int | None = None,
    layers: int = 8,
    factors: Sequence[float] = FACTORS,
    rounds: int = 7,
    progress: Callable[[str], None] | None = None,
) -> tuple[TilesStrategy, dict[str, float]]:
    """The fastest strategy found and its ``tile_scale``: the ``layers`` costliest layers, each count
    scaled by every factor in turn. Trials whose tile count would not change are skipped."""
    if rounds < 1 or layers < 0:
        raise InputError(f"rounds must be >= 1 and layers >= 0, not {rounds} and {layers}")
    inputs = list(captured.example_inputs)
    best = TilesStrategy(captured, threads=threads)
    names = list(best.graph.layer_names)
    spent = profile_layers(best.program, [str(n) for n in names], lambda: best.run_flat(inputs), runs=3)
    heaviest = [p.layer for p in sorted(spent, key=lambda p: -p.ms)[:layers]]
    for name in heaviest:
        for factor in factors:
            scale = {**best.tile_scale, name: best.tile_scale.get(name, 1.0) * factor}
            trial = TilesStrategy(captured, threads=best.threads, tile_scale=scale, check=False)
            if _tiles_of(trial, name) == _tiles_of(best, name):
                trial.close()
                continue
            now, then = _median_pair(trial, best, inputs, rounds)
            kept = now < then * (1 - MIN_GAIN)
            if progress:
                progress(f"{name} x{factor:g}: {_tiles_of(trial, name)} tiles {now * 1e3:.2f} ms against "
                         f"{then * 1e3:.2f} ms{' (kept)' if kept else ''}")  # fmt: skip
            if kept:
                trial.check()  # the kept strategy is checked as every one built with check=True
                best.close()
                best = trial
            else:
                trial.close()
    return best, best.tile_scale


def _tiles_of(strat: TilesStrategy, layer: str) -> int:
    g = strat.graph
    i = [str(n) for n in g.layer_names].index(layer)
    return int(g.layer_tile_start[i + 1] - g.layer_tile_start[i])
