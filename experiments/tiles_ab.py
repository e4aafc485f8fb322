"""Experiment (issue 5): A/B of one tile-kernel decision on a whole model, in one process.

Not part of the package. On a noisy 2-core VM, runs of two processes one after the other differed by
±20%; two ``TilesStrategy`` objects built side by side and timed in alternating runs gave stable ratios.
The second strategy is built while a module attribute is replaced by a Python expression (a policy
function, a constant), then the attribute is restored. Between runs the script sleeps 10 ms so that the
other runtime's workers, which spin a few ms after an inference, have parked.

Run: ``python experiments/tiles_ab.py MODEL MODULE:ATTR EXPR [--threads 2] [--rounds 30]``, e.g.
``python experiments/tiles_ab.py resnet50 pathweave.tiles.bind_cnn:conv_layout "lambda n, w: None"``
(the transposed and im2col-free convolution layouts against the row-vector kernels alone).

``ATTR`` may also be ``c:NAME``, an int the native library exports for experiments (``pw_tj_max``: the
most positions per micro-tile of the transposed kernel). Then one strategy runs both ways, the int
set to EXPR before each "patched" run and restored before each "current" one:
``python experiments/tiles_ab.py resnet50 c:pw_tj_max 12``.

``ATTR`` may also be ``opt:NAME``, a keyword of ``TilesStrategy`` (one of ``optimize``'s tiles options):
the second strategy is built with ``NAME=EXPR``, e.g.
``python experiments/tiles_ab.py resnet50 opt:winograd_min_channels 10**9`` (Winograd against direct).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import torch

import pathweave
import pathweave.zoo as zoo
from pathweave.tiles.strategy import TilesStrategy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("attribute", help="MODULE:ATTR replaced while the second strategy is built")
    parser.add_argument("expression", help="its value there (a Python expression)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    spec = zoo.get(args.model)
    captured = pathweave.capture(spec.build(), *spec.example_inputs(), name=args.model)
    inputs = list(captured.example_inputs)
    current = TilesStrategy(captured, threads=args.threads)
    if args.attribute.startswith("c:"):
        _native_ab(args, current, inputs)
        return
    if args.attribute.startswith("opt:"):
        option = {args.attribute.removeprefix("opt:"): eval(args.expression)}  # the experiment's own input
        patched = TilesStrategy(captured, threads=args.threads, **option)
        _time_ab(args, current, patched, inputs)
        return
    module_name, attr = args.attribute.split(":")
    module = importlib.import_module(module_name)
    kept = getattr(module, attr)
    setattr(module, attr, eval(args.expression))  # an experiment's own command line
    try:
        patched = TilesStrategy(captured, threads=args.threads)
    finally:
        setattr(module, attr, kept)
    _time_ab(args, current, patched, inputs)


def _time_ab(args: argparse.Namespace, current: TilesStrategy, patched: TilesStrategy, inputs: list) -> None:
    """Alternating timed runs of the two strategies; prints the medians and their ratio."""
    times: dict[str, list[float]] = {"current": [], "patched": []}
    for strategy in (current, patched):
        for _ in range(3):
            strategy.run_flat(inputs)
    for _ in range(args.rounds):
        for name, strategy in (("current", current), ("patched", patched)):
            time.sleep(0.01)
            start = time.perf_counter()
            strategy.run_flat(inputs)
            times[name].append(time.perf_counter() - start)
    now, then = (statistics.median(times[k]) * 1e3 for k in ("current", "patched"))
    paired = statistics.median(b / a for a, b in zip(times["current"], times["patched"], strict=True))
    print(f"{args.model}, {args.threads} workers, {args.rounds} rounds: current {now:.2f} ms, "
          f"patched {then:.2f} ms ({then / now:.3f}x; median of paired ratios {paired:.3f}x)")  # fmt: skip
    current.close()
    patched.close()


def _native_ab(args: argparse.Namespace, strategy: TilesStrategy, inputs: list) -> None:
    """One strategy, alternating runs with the library's int ``args.attribute[2:]`` at its value and at
    ``args.expression``."""
    import ctypes

    from pathweave.tiles import runtime as tile_runtime

    knob = ctypes.c_int.in_dll(tile_runtime._library(), args.attribute[2:])
    values = {"current": knob.value, "patched": int(args.expression)}
    times: dict[str, list[float]] = {"current": [], "patched": []}
    try:
        for _ in range(args.rounds):
            for name, value in values.items():
                knob.value = value
                time.sleep(0.01)
                strategy.run_flat(inputs)  # untimed: the value's first run after the switch
                start = time.perf_counter()
                strategy.run_flat(inputs)
                times[name].append(time.perf_counter() - start)
    finally:
        knob.value = values["current"]
        strategy.close()
    now, then = (statistics.median(times[k]) * 1e3 for k in ("current", "patched"))
    paired = statistics.median(b / a for a, b in zip(times["current"], times["patched"], strict=True))
    old, new = values["current"], values["patched"]
    print(f"{args.model}, {args.threads} workers, {args.rounds} rounds: {args.attribute[2:]} "
          f"{old} {now:.2f} ms, {new} {then:.2f} ms ({then / now:.3f}x; median of paired ratios "
          f"{paired:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
