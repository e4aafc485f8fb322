"""Where a tile program's time goes: the kernels add each tile's wall time to a per-layer counter.

The counters are addressed from the layer rows (slot ``S_PROFILE``), which the native runtime reads in
place, so profiling needs no other build of the runtime and costs two clock reads per tile only while
it is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pathweave.errors import ExecutionError, InputError
from pathweave.report.timeline import Span
from pathweave.tiles.abi import S_PROFILE
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.program import TileProgram
from pathweave.tiles.runtime import TileRuntime


@dataclass(frozen=True)
class LayerTime:
    layer: str
    ms: float  # kernel time summed over the layer's tiles and all workers, per inference
    tiles: int  # tiles run per inference


def profile_layers(
    program: TileProgram, names: list[str], run: Callable[[], None], runs: int = 5, hot: bool = False
) -> list[LayerTime]:
    """Run ``run`` (one inference of ``program``) ``runs`` times with the kernels timing themselves;
    returns each layer's kernel time per inference, in the program's layer order.

    ``hot``: each tile runs once untimed right before its timed run, its input copies (im2col, blocked
    and padded copies) made again: the layer's time with its data in cache. Against the plain profile
    (data as the inference leaves it) it says what data arriving from farther away costs each layer.
    A hot profile's inferences compute each tile twice; their outputs are for timing only."""
    if runs < 1:
        raise InputError(f"runs must be >= 1, not {runs}")
    counters = np.zeros((len(program.layers), 4), dtype=np.int64)
    counters[:, 2] = int(hot)
    program.layers[:, S_PROFILE] = counters.ctypes.data + counters.strides[0] * np.arange(len(program.layers))
    try:
        for _ in range(runs):
            run()
    finally:
        program.layers[:, S_PROFILE] = 0
    if hot and (counters[:, 3] != counters[:, 1]).any():
        raise ExecutionError("a hot profile did not run every tile twice")
    return [
        LayerTime(str(name), float(ns) / runs / 1e6, int(calls) // runs)
        for name, (ns, calls, _, _) in zip(names, counters, strict=True)
    ]


def trace_tiles(
    runtime: TileRuntime, graph: TileGraph, run: Callable[[], None], warmup: int = 3
) -> list[Span]:
    """One inference (``run``, after ``warmup`` untraced ones) as spans: one per tile, ``stream`` = the
    worker that ran it, ``name`` = its layer, times in us from the first tile's start. The gaps between
    a worker's spans are its idle time: waiting for ready tiles, or scheduling."""
    for _ in range(warmup):
        run()
    with runtime.tracing() as times:
        run()
    workers = runtime.ran_on()
    if len(times) != graph.num_tiles or (times[:, 1] == 0).any() or (workers < 0).any():
        raise ExecutionError("the traced inference did not run every tile of the graph")
    layer_of = np.searchsorted(graph.layer_tile_start, np.arange(graph.num_tiles), side="right") - 1
    t0 = int(times[:, 0].min())
    return sorted(
        (Span(int(w), (int(s) - t0) / 1e3, (int(e) - int(s)) / 1e3, str(graph.layer_names[layer]))
         for (s, e), w, layer in zip(times, workers, layer_of, strict=True)),
        key=lambda sp: sp.start_us,
    )  # fmt: skip


@dataclass(frozen=True)
class TracedRun:
    """One traced inference: each tile's kernel start and end (int64 [tiles, 2]) and worker, and the
    monotonic clock (the trace's) just before ``run`` was called and just after it returned (ns)."""

    times: np.ndarray
    workers: np.ndarray
    called_ns: int
    returned_ns: int


def traced_runs(runtime: TileRuntime, run: Callable[[], None], runs: int, warmup: int = 3) -> list[TracedRun]:
    """``runs`` inferences (``run``, after ``warmup`` untraced ones), each traced tile by tile."""
    if runs < 1:
        raise InputError(f"runs must be >= 1, not {runs}")
    for _ in range(warmup):
        run()
    found = []
    with runtime.tracing() as times:
        for _ in range(runs):
            times[:] = 0
            called = time.monotonic_ns()  # CLOCK_MONOTONIC, as the trace
            run()
            returned = time.monotonic_ns()
            workers = runtime.ran_on()
            if (times[:, 1] == 0).any() or (workers < 0).any():
                raise ExecutionError("a traced inference did not run every tile of the graph")
            found.append(TracedRun(times.copy(), workers, called, returned))
    return found
