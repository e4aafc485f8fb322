"""Experiment (issue 24, item 3): Ramiel's lanes on the native engines against dynamic stealing.

Not part of the package. Per model, one tiles strategy on 2 workers; layer costs traced on 1 worker;
Ramiel's plan on 2 lanes (``tiles.placement``) as each tile's home worker. Three policies on the same
engines, interleaved in rounds: ``dynamic`` (no homes: the runtime's depth-first engines with stealing),
``mix`` (homes, stealing allowed), ``static`` (homes, no stealing: each worker runs its lane). Each call
is checked against the dynamic policy's first output (bit for bit: the kernels are the same, only who
runs them changes). Prints the median ms per policy, and the lanes' simulated makespan.

    flock /tmp/pw-bench.lock env PYTHONPATH=. python experiments/tiles_lanes.py nasnet_a_mobile googlenet
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch

from pathweave.frontend.capture import capture
from pathweave.tiles.mixed import build_tiles
from pathweave.tiles.placement import lane_homes, layer_costs
from pathweave.tiles.profile import traced_runs
from pathweave.tiles.strategy import TilesStrategy
from pathweave.zoo.load import load_model


def measure(name: str, rounds: int, calls: int) -> None:
    loaded = load_model(name, batch=1)
    strategy = build_tiles(capture(loaded.model, *loaded.inputs, name=loaded.name), threads=2)
    if not isinstance(strategy, TilesStrategy):
        print(f"{name}: tile islands, not one program; skipped")
        strategy.close()
        return
    inputs = list(strategy.captured.example_inputs)
    try:
        strategy.set_workers(1)
        costs = layer_costs(
            strategy.graph, traced_runs(strategy.runtime, lambda: strategy.run_flat(inputs), 10)
        )
        strategy.set_workers(2)
        homes = lane_homes(strategy.graph, costs, 2)
        share = np.bincount(strategy.graph.tile_layer, minlength=strategy.graph.num_layers)
        lane_us = [float(costs[np.unique(strategy.graph.tile_layer[homes == w])].sum()) for w in (0, 1)]
        policies = {"dynamic": (None, True), "mix": (homes, True), "static": (homes, False)}
        want = strategy.run_flat(inputs)
        times: dict[str, list[float]] = {p: [] for p in policies}
        for _ in range(rounds):
            for policy, (h, steal) in policies.items():
                strategy.runtime.set_homes(h, steal)
                for _ in range(3):
                    strategy.run_flat(inputs)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    got = strategy.run_flat(inputs)
                    times[policy].append((time.perf_counter() - t0) * 1e3)
                    if not all(torch.equal(a, b) for a, b in zip(got, want, strict=True)):
                        raise SystemExit(f"{name}: {policy} gave another output")
        strategy.runtime.set_homes(None)
        meds = {p: statistics.median(v) for p, v in times.items()}
        total = costs.sum() / 1e3
        print(f"{name}: {strategy.graph.num_layers} layers, {int(share.sum())} tiles; lanes"
              f" {lane_us[0] / 1e3:.2f} + {lane_us[1] / 1e3:.2f} of {total:.2f} ms")  # fmt: skip
        print(
            "  " + "  ".join(f"{p} {m:.2f} ms ({m / meds['dynamic']:.2f}x)" for p, m in meds.items()),
            flush=True,
        )
    finally:
        strategy.close()


def main() -> None:
    warnings.simplefilter("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    for name in args.models:
        measure(name, args.rounds, args.calls)


if __name__ == "__main__":
    main()
