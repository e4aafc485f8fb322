"""Experiment (issue 24): where a zoo model's tile program spends its kernel time, by op and kernel path.

Not part of the package. Builds strategy "tiles" at full size, batch 1, runs it a few times, then
``--runs`` inferences with the kernels timing themselves (``profile_layers``: kernel time per layer,
summed over its tiles and workers) and prints the median per layer grouped by (op, convolution path),
and the costliest layers. Unlike ``tiles_opclass.py`` it times no ATen counterpart, so it is quick.

Run: ``python experiments/tiles_kernel_profile.py mobilevit_xs [--workers 1] [--runs 15]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

import pathweave
from pathweave import zoo
from pathweave.machine import cpu_isa, cpu_model
from pathweave.tiles.profile import profile_layers
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--top", type=int, default=10)
    args = p.parse_args()
    entry = zoo.get(args.model)
    inputs = list(entry.example_inputs(1))
    strat = TilesStrategy(pathweave.capture(entry.build(), *inputs), threads=args.workers)
    names = [str(n) for n in strat.graph.layer_names]
    ops = [str(o) for o in strat.graph.layer_ops]
    paths = kernel_names(strat.program.layers)
    for _ in range(5):
        strat.run_flat(inputs)
    runs = [
        profile_layers(strat.program, names, lambda: strat.run_flat(inputs), runs=1) for _ in range(args.runs)
    ]
    ms = [statistics.median(r[i].ms for r in runs) for i in range(len(names))]
    strat.close()
    total = sum(ms)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    print(f"# {args.model}: {cpu_model()} ({cpu_isa()}), {args.workers} worker(s), load {load:.2f}, {when}; "
          f"kernel time {total:.2f} ms per inference (median of {args.runs})")  # fmt: skip
    groups: dict[tuple[str, str], float] = defaultdict(float)
    for op, path, t in zip(ops, paths, ms, strict=True):
        groups[(op, path)] += t
    print("| op | kernel | ms | share |\n|---|---|---|---|")
    for (op, path), t in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {op} | {path or '-'} | {t:.3f} | {100 * t / total:.1f}% |")
    print("\n| costliest layers | op | kernel | ms |\n|---|---|---|---|")
    for i in sorted(range(len(names)), key=lambda i: -ms[i])[: args.top]:
        print(f"| {names[i]} | {ops[i]} | {paths[i] or '-'} | {ms[i]:.3f} |")


if __name__ == "__main__":
    main()
