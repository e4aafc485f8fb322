"""Experiment (issue 24): where a zoo model's tile program spends its kernel time, by op and kernel path.

Not part of the package. Builds strategy "tiles" at full size, batch 1, runs it a few times, then
``--runs`` inferences with the kernels timing themselves (``profile_layers``: kernel time per layer,
summed over its tiles and workers) and prints the median per layer grouped by (op, convolution path),
and the costliest layers. Unlike ``tiles_opclass.py`` it times no ATen counterpart, so it is quick.

``--hot`` (issue 21) alternates each profiled inference with a hot one (``profile_layers(hot=True)``: each
tile run once untimed right before its timed run, so its data is in cache) and adds the hot time and the
difference per group: what data arriving cold (from L3 or DRAM, as the inference leaves it) costs.

Run: ``python experiments/tiles_kernel_profile.py mobilevit_xs [--workers 1] [--runs 15] [--hot]``.
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
    p.add_argument("--hot", action="store_true", help="also profile with each tile's data in cache")
    args = p.parse_args()
    entry = zoo.get(args.model)
    inputs = list(entry.example_inputs(1))
    strat = TilesStrategy(pathweave.capture(entry.build(), *inputs), threads=args.workers)
    names = [str(n) for n in strat.graph.layer_names]
    ops = [str(o) for o in strat.graph.layer_ops]
    paths = kernel_names(strat.program.layers)
    for _ in range(5):
        strat.run_flat(inputs)
    runs, hot_runs = [], []
    for _ in range(args.runs):  # plain and hot alternate, so that both see the same hour of a noisy host
        runs.append(profile_layers(strat.program, names, lambda: strat.run_flat(inputs), runs=1))
        if args.hot:
            hot_runs.append(profile_layers(strat.program, names, lambda: strat.run_flat(inputs), 1, hot=True))
    ms = [statistics.median(r[i].ms for r in runs) for i in range(len(names))]
    hot = [statistics.median(r[i].ms for r in hot_runs) for i in range(len(names))] if args.hot else ms
    strat.close()
    total = sum(ms)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    print(f"# {args.model}: {cpu_model()} ({cpu_isa()}), {args.workers} worker(s), load {load:.2f}, {when}; "
          f"kernel time {total:.2f} ms per inference (median of {args.runs})"
          + (f", hot {sum(hot):.2f} ms" if args.hot else ""))  # fmt: skip
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for op, path, t, h in zip(ops, paths, ms, hot, strict=True):
        groups[(op, path)][0] += t
        groups[(op, path)][1] += h
    print("| op | kernel | ms | share |" + (" hot ms | cold - hot |" if args.hot else ""))
    print("|---|---|---|---|" + ("---|---|" if args.hot else ""))
    for (op, path), (t, h) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        more = f" {h:.3f} | {t - h:+.3f} |" if args.hot else ""
        print(f"| {op} | {path or '-'} | {t:.3f} | {100 * t / total:.1f}% |{more}")
    print("\n| costliest layers | op | kernel | ms |\n|---|---|---|---|")
    for i in sorted(range(len(names)), key=lambda i: -ms[i])[: args.top]:
        print(f"| {names[i]} | {ops[i]} | {paths[i] or '-'} | {ms[i]:.3f} |")


if __name__ == "__main__":
    main()
