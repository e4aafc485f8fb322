"""Experiment (issue 24): the tile runtime's own cost per tile and per layer, in ns.

Not part of the package. Two measurements:

- ``synthetic``: graphs of empty tiles (op ``OP_TEST`` with no spin: a few loads and one store) run by
  the native engines; wall time per inference over tiles is the runtime's cost per tile (reset, pop or
  steal, kernel dispatch, child counters, done counter). Shapes: a chain (every tile waits for the one
  before), independent tiles, and layers of ``width`` tiles each depending on every tile of the layer
  before (fan-in ``width``, like a convolution after a channel split).
- ``model``: a zoo model's real tile graph (strategy ``tiles``); per inference the wall time of
  ``runtime.run()`` on 1 worker against the tile kernels' traced time (start to end of each kernel,
  summed): the difference over the tiles is the runtime's cost per tile on that graph. The same with
  every layer as one tile (``tiles_per_layer=1``) gives kernel time per layer at one tile, and the
  difference between the two kernel sums over the extra tiles is what each extra tile costs inside the
  kernels (halo recompute, smaller matrix products, repeated packing).

Run from the repository root: ``PYTHONPATH=. python experiments/tiles_task_cost.py [--models
nasnet_a_mobile,mobilenet_v2] [--runs 30]``, under ``flock /tmp/pw-bench.lock`` when timing.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

import pathweave.zoo as zoo
from pathweave.frontend.capture import capture
from pathweave.tiles.abi import OP_TEST
from pathweave.tiles.runtime import TileRuntime
from pathweave.tiles.strategy import TilesStrategy


def _median_ns(run: object, runs: int) -> float:
    """Median wall ns of ``run()`` over ``runs`` calls, after 5 warm-up calls."""
    for _ in range(5):
        run()  # type: ignore[operator]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        run()  # type: ignore[operator]
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def _shapes(tiles: int, width: int) -> dict[str, list[list[int]]]:
    """Parent lists of the synthetic graphs, each of about ``tiles`` tiles."""
    layered: list[list[int]] = []
    for t in range(tiles):
        start = (t // width - 1) * width
        layered.append(list(range(start, start + width)) if t >= width else [])
    return {
        "chain": [[t - 1] if t else [] for t in range(tiles)],
        "independent": [[] for _ in range(tiles)],
        f"layers of {width}, fan-in {width}": layered,
    }


def synthetic(tiles: int, runs: int, workers: list[int], width: int) -> None:
    for name, parents in _shapes(tiles, width).items():
        for w in workers:
            rt = TileRuntime(parents, np.full(tiles, OP_TEST, dtype=np.int32), workers=w)
            rt.set_test_data(
                np.zeros(tiles, np.float32), np.ones(tiles, np.float32), np.zeros(tiles, np.int32)
            )
            ns = _median_ns(rt.run, runs)
            print(f"synthetic {name:>24} {tiles} tiles, {w} worker{'s' * (w > 1)}: {ns / 1e3:8.1f} us per "
                  f"inference, {ns / tiles:6.0f} ns per tile")  # fmt: skip
            rt.close()


def _traced(strat: TilesStrategy, runs: int) -> tuple[float, float]:
    """Median wall ns of ``runtime.run()`` and median sum of traced kernel ns, over ``runs`` inferences."""
    rt = strat.runtime
    walls, kernels = [], []
    for _ in range(5):
        rt.run()
    with rt.tracing() as times:
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            rt.run()
            walls.append(time.perf_counter_ns() - t0)
            kernels.append(int((times[:, 1] - times[:, 0]).sum()))
    return statistics.median(walls), statistics.median(kernels)


def _chain_links(strat: TilesStrategy) -> None:
    """Of the one-to-one links (a tile whose only child has it as only parent: a chain a merged task
    would cover), how many ran back to back on one worker in a traced 2-worker inference."""
    g, rt = strat.graph, strat.runtime
    n_par, n_chi = np.diff(g.parents_indptr), np.diff(g.children_indptr)
    links = [
        (t, int(g.children(t)[0]))
        for t in range(g.num_tiles)
        if n_chi[t] == 1 and n_par[g.children(t)[0]] == 1
    ]
    for _ in range(5):
        rt.run()
    with rt.tracing() as times:
        rt.run()
    ran = rt.ran_on()
    nxt = {}
    for w in set(ran.tolist()):
        mine = np.flatnonzero(ran == w)
        order = mine[np.argsort(times[mine, 0])]
        nxt.update(zip(order[:-1].tolist(), order[1:].tolist(), strict=True))
    back = sum(nxt.get(a) == b for a, b in links)
    print(f"{strat.captured.name}: {len(links)} one-to-one links of {g.num_edges} edges; {back} ran back to "
          "back on one worker (2 workers)")  # fmt: skip


def model(name: str, runs: int) -> None:
    spec = zoo.get(name)
    captured = capture(spec.build(), *spec.example_inputs(), name=name)
    found = {}
    for label, per_layer in (("default tiles", None), ("one tile per layer", 1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            strat = TilesStrategy(captured, threads=1, tiles_per_layer=per_layer)
        g = strat.graph
        wall, kern = _traced(strat, runs)
        found[label] = (g.num_tiles, kern)
        print(f"{name} {label:>20}: {g.num_layers} layers, {g.num_tiles} tiles, {g.num_edges} edges; "
              f"1 worker {wall / 1e6:7.3f} ms, kernels {kern / 1e6:7.3f} ms, "
              f"runtime {(wall - kern) / 1e6:6.3f} ms = "
              f"{(wall - kern) / g.num_tiles:5.0f} ns per tile")  # fmt: skip
        for w in (2,):
            strat.set_workers(w)
            wall2 = _median_ns(strat.runtime.run, runs)
            print(f"{name} {label:>20}: {w} workers {wall2 / 1e6:7.3f} ms")
            if per_layer is None:
                _chain_links(strat)
        strat.close()
    (t_many, k_many), (t_one, k_one) = found["default tiles"], found["one tile per layer"]
    if t_many > t_one:
        print(f"{name}: kernels with {t_many} tiles against {t_one}: {(k_many - k_one) / 1e6:+.3f} ms, "
              f"{(k_many - k_one) / (t_many - t_one):+.0f} ns per extra tile")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="nasnet_a_mobile,mobilenet_v2")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tiles", type=int, default=1024)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    synthetic(args.tiles, args.runs * 10, [int(w) for w in args.workers.split(",")], args.width)
    for name in filter(None, args.models.split(",")):
        model(name, args.runs)


if __name__ == "__main__":
    main()
