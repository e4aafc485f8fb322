"""ASPEN's Fig. 8 for strategy "tiles": how every layer is cut into tiles, and how throughput scales from
1 to P workers, with Karp and Flatt's experimentally determined serial fraction.

For a speed-up psi on p > 1 workers (time on 1 worker / time on p), Karp-Flatt's serial fraction is
e = (1/psi - 1/p) / (1 - 1/p): the share of the work that, by Amdahl's law, would explain the measured
speed-up. We report the parallel fraction p_e = 1 - e, as ASPEN does (1: perfect scaling; above 1 when
the speed-up is superlinear). An e that grows with p points at overheads (scheduling, memory bandwidth,
workers waiting), a constant one at a serial part.

Timing follows BENCHMARKS.md: the worker counts are timed interleaved, in a rotating order, one untimed
call before each timed one (engines are started when the count changes), median per count.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from pathweave.errors import InputError
from pathweave.machine import describe, loadavg
from pathweave.report.progress import Progress
from pathweave.report.tables import table
from pathweave.tiles.coexec import CoExecutor
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy


@dataclass(frozen=True)
class LayerTiles:
    layer: str
    op: str
    shape: tuple[int, ...]  # the layer's output
    tiles: int
    kernel: str = ""  # a convolution's path (``program.kernel_names``)


@dataclass(frozen=True)
class Scaling:
    workers: int
    median_ms: float
    per_second: float  # inferences (samples of the batch) per second
    speedup: float  # time on 1 worker / time on this many
    parallel_fraction: float | None  # Karp-Flatt's p_e = 1 - e; None on 1 worker
    coexec_ms: float | None = None  # ``requests`` requests of the model co-executed in one run
    coexec_per_second: float | None = None


def serial_fraction(speedup: float, workers: int) -> float:
    """Karp-Flatt's experimentally determined serial fraction e = (1/psi - 1/p) / (1 - 1/p), computed as
    (p/psi - 1) / (p - 1) (the same, times p/p), which stays exact for exact (Fraction) speed-ups."""
    if workers < 2:
        raise InputError(f"the Karp-Flatt metric needs at least 2 workers, got {workers}")
    if speedup <= 0:
        raise InputError(f"a speed-up must be positive, got {speedup}")
    return (workers / speedup - 1) / (workers - 1)


def parallel_fraction(speedup: float, workers: int) -> float:
    """ASPEN's parallel fraction p_e = 1 - e (``serial_fraction``)."""
    return 1 - serial_fraction(speedup, workers)


def layer_tiles(graph: TileGraph, kernels: list[str] | None = None) -> list[LayerTiles]:
    """Every layer of ``graph`` with its op, output shape and tile count, in layer order; ``kernels``: each
    layer's convolution path (``program.kernel_names`` of a program over the graph)."""
    starts = graph.layer_tile_start
    kernels = kernels or [""] * graph.num_layers
    return [
        LayerTiles(str(graph.layer_names[i]), str(graph.layer_ops[i]),
                   tuple(int(d) for d in graph.layer_shapes[i][: int(graph.layer_ndim[i])]),
                   int(starts[i + 1] - starts[i]), kernels[i])
        for i in range(graph.num_layers)
    ]  # fmt: skip


def parse_workers(text: str | None) -> list[int]:
    """ "1,2,4" as worker counts, 1 always included; None: 1 up to torch's thread count."""
    if text is None:
        return list(range(1, torch.get_num_threads() + 1))
    try:
        counts = sorted({1, *(int(part) for part in text.split(",") if part.strip())})
    except ValueError as exc:
        raise InputError(f"--threads takes comma-separated worker counts, got {text!r}") from exc
    if counts[0] < 1:
        raise InputError(f"worker counts must be >= 1, got {text!r}")
    return counts


def _timed(fn: Callable[[], Any]) -> float:
    """Milliseconds of one call of ``fn``, after one untimed call (engines just started or idle)."""
    fn()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def measure_scaling(
    strategy: TilesStrategy,
    workers: list[int],
    rounds: int,
    requests: int = 1,
    progress: Progress | None = None,
    first: int = 0,
) -> list[Scaling]:
    """Median time of one inference on the example inputs for every worker count (1 added), and with
    ``requests > 1`` also of that many requests co-executed by a ``CoExecutor`` with as many workers.
    Round r starts at the count ``first + r`` places on (in turn), so that none always runs first."""
    if rounds < 1 or requests < 1:
        raise InputError(f"rounds and requests must be >= 1, got {rounds} and {requests}")
    counts = sorted({1, *workers})
    inputs = list(strategy.captured.example_inputs)
    batch = int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1
    times: dict[int, list[float]] = {p: [] for p in counts}
    co_times: dict[int, list[float]] = {p: [] for p in counts}
    coexecs = {p: CoExecutor(workers=p, slots=requests) for p in counts} if requests > 1 else {}
    jobs = [(strategy, tuple(inputs))] * requests
    threads = strategy.threads
    try:
        for r in range(rounds):
            at = (first + r) % len(counts)
            for p in counts[at:] + counts[:at]:
                strategy.set_workers(p)
                times[p].append(_timed(lambda: strategy.run_flat(inputs)))
                if p in coexecs:
                    co = coexecs[p]
                    co_times[p].append(_timed(lambda co=co: [f.result() for f in co.submit_all(jobs)]))
            if progress is not None:
                progress.step(f"round {r + 1}")
    finally:
        strategy.set_workers(threads)
        for co in coexecs.values():
            co.close()
    return _scaling_rows(counts, times, co_times, batch, requests)


def _scaling_rows(
    counts: list[int],
    times: dict[int, list[float]],
    co_times: dict[int, list[float]],
    batch: int,
    requests: int,
) -> list[Scaling]:
    base = statistics.median(times[1])
    rows = []
    for p in counts:
        ms = statistics.median(times[p])
        co_ms = statistics.median(co_times[p]) if co_times[p] else None
        rows.append(Scaling(
            workers=p, median_ms=ms, per_second=batch * 1e3 / ms, speedup=base / ms,
            parallel_fraction=parallel_fraction(base / ms, p) if p > 1 else None,
            coexec_ms=co_ms, coexec_per_second=requests * batch * 1e3 / co_ms if co_ms else None,
        ))  # fmt: skip
    return rows


def tiles_report(
    strategy: TilesStrategy, workers: list[int], rounds: int, requests: int = 1, show_progress: bool = True
) -> dict[str, Any]:
    """Tiles per layer and scaling as one JSON-ready dict (``format_tiles`` prints it)."""
    g = strategy.graph
    inputs = strategy.captured.example_inputs
    load_before = loadavg()
    progress = Progress(f"tiles {strategy.captured.name}", rounds, enabled=show_progress)
    scaling = measure_scaling(strategy, workers, rounds, requests, progress)
    return {
        "model": strategy.captured.name,
        "batch": int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1,
        "rounds": rounds,
        "requests": requests,
        "graph": {"layers": g.num_layers, "tiles": g.num_tiles, "edges": g.num_edges, "depth": g.depth()},
        "layers": [asdict(row) for row in layer_tiles(g, kernel_names(strategy.program.layers))],
        "scaling": [asdict(row) for row in scaling],
        "machine": describe(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "date": time.strftime("%Y-%m-%d"),
    }


def format_tiles(d: dict[str, Any]) -> str:
    """The report of ``tiles_report`` as two tables: tiles per layer, then scaling over workers."""
    g, m = d["graph"], d["machine"]
    head = (
        f"{d['model']}  batch {d['batch']}: {g['layers']} layers, {g['tiles']} tiles, {g['edges']} edges, "
        f"longest chain {g['depth']} tiles\n{m['cpu']} ({m.get('isa', '?')}), {m['cores']} cores, "
        f"{d['rounds']} rounds, "
        f"load {d['loadavg_before']} -> {d['loadavg_after']}, {d['date']}"
    )
    shape = lambda r: "x".join(map(str, r["shape"]))  # noqa: E731
    per_layer = [[r["layer"], r["op"], shape(r), str(r["tiles"]), r.get("kernel", "")] for r in d["layers"]]
    layers = table(["layer", "op", "output shape", "tiles", "kernel"], per_layer)
    co = d["requests"] > 1
    header = ["workers", "median ms", "inferences/s", "speed-up", "p_e (Karp-Flatt)"]
    if co:
        header += [f"co-exec ms ({d['requests']} requests)", "co-exec inferences/s"]
    rows = []
    for r in d["scaling"]:
        pe = r["parallel_fraction"]
        row = [str(r["workers"]), f"{r['median_ms']:.2f}", f"{r['per_second']:.1f}", f"{r['speedup']:.2f}x",
               "-" if pe is None else f"{pe:.3f}"]  # fmt: skip
        if co:
            row += [f"{r['coexec_ms']:.2f}", f"{r['coexec_per_second']:.1f}"]
        rows.append(row)
    return f"{head}\n\n{layers}\n\n{table(header, rows)}"
