"""Experiment (issue 24): each depthwise layer's tile kernel time, its GB/s and the machine's copy bandwidth.

Not part of the package. For each model, strategy "tiles" is built with one worker and profiled with the
kernels timing themselves (``profile_layers``: kernel time per layer, summed over its tiles); each
depthwise convolution (``conv_layout.is_depthwise``) is printed with its ATen time (the same node run
alone, one thread), the bytes it must move (input read once, output written once) over its kernel time,
and the copy bandwidth of the same bytes (a numpy copy of as many bytes, in the cache level they fit:
the bound a kernel that reads and writes each byte once can reach).

Run: ``python experiments/tiles_depthwise.py [--models mobilenet_v2,efficientnet_b0] [--runs 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import numpy as np
import torch

import pathweave
from pathweave import zoo
from pathweave.machine import cpu_isa, cpu_model
from pathweave.tiles.conv_layout import is_depthwise
from pathweave.tiles.profile import profile_layers


def copy_gbs(nbytes: int, reps: int = 200) -> float:
    """GB/s (bytes read + written) of the best of ``reps`` numpy copies of ``nbytes / 2`` bytes."""
    a = np.random.default_rng(0).random(max(1, nbytes // 8), dtype=np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(reps))
    return 2 * a.nbytes / best / 1e9


def _timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def aten_ms(node: torch.fx.Node, env: dict[torch.fx.Node, object], reps: int = 15) -> float:
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    return statistics.median(_timed(lambda: node.target(*args, **kwargs)) for _ in range(reps)) * 1e3


def _values(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> dict[torch.fx.Node, object]:
    """Every node's value in one eager run of ``gm``."""
    env: dict[torch.fx.Node, object] = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            env[n] = out = super().run_node(n)
            return out

    with torch.no_grad():
        Keep(gm).run(*inputs)
    return env


def measure(name: str, runs: int) -> list[tuple[str, str, float, float, float, float]]:
    m = zoo.get(name)
    model, x = m.build(), m.example_inputs()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = pathweave.optimize(
            torch.export.export(model, (x,)), x, strategy="tiles", options={"threads": 1}
        )
    torch.set_num_threads(1)
    rows = []
    islands = getattr(fast, "islands", None)
    for s in [i.tiles for i in islands] if islands is not None else [fast]:
        inputs = list(s.captured.example_inputs)
        names = [str(n) for n in s.graph.layer_names]
        for _ in range(3):
            s.run_flat(inputs)
        spent = {
            lt.layer: lt.ms
            for lt in profile_layers(s.program, names, lambda s=s, i=inputs: s.run_flat(i), runs)
        }
        env = _values(s.gm, inputs)
        with torch.no_grad():
            for n in s.gm.graph.nodes:
                if n.name not in spent or not is_depthwise(n):
                    continue
                nbytes = n.args[0].meta["val"].nbytes + n.meta["val"].nbytes
                ms = spent[n.name]
                rows.append((n.name, "x".join(map(str, n.meta["val"].shape[1:])), ms, aten_ms(n, env),
                             nbytes / ms / 1e6, copy_gbs(nbytes)))  # fmt: skip
    fast.close()
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mobilenet_v2,efficientnet_b0,nasnet_a_mobile")
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    print(f"# {cpu_model()} ({cpu_isa()}), {os.cpu_count()} cores, 1 worker, load {load:.2f}, {when}")
    print("| model | layer | output | tile ms | ATen ms | tile GB/s | copy GB/s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for layer, out, ms, a, gbs, copy in measure(name, args.runs):
            print(f"| {name} | {layer} | {out} | {ms:.3f} | {a:.3f} | {gbs:.1f} | {copy:.0f} |")
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
