"""``optimize(strategy="auto")``: build the device's candidates from ``strategy.AUTO``, time them on the
example inputs, keep the fastest and close the others."""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

import torch

from pathweave.errors import InputError, PathweaveError
from pathweave.frontend.graph import Captured
from pathweave.strategy import AUTO, STRATEGIES, Strategy

#: timed rounds per candidate
AUTO_ROUNDS = 7
#: idle time before each untimed-then-timed call on CPU (see ``fastest``)
AUTO_GAP_S = 0.02


def build_auto(
    captured: Captured, kind: str, context: dict[str, Any], stacks: bool = False, options: dict | None = None
) -> Strategy:
    """The fastest of ``AUTO[kind]``, each built with its row's options and ``options[name]``. The first
    candidate is the baseline: if it cannot be built, the sequential strategy takes its place (loudly);
    any other candidate that cannot be built or fails while timed costs only itself, with a warning.
    ``stacks`` goes to the candidates that take it."""
    options = options or {}
    unknown = sorted(set(options) - {name for name, _ in AUTO[kind]})
    if unknown or not all(isinstance(v, dict) for v in options.values()):
        raise InputError(
            f"auto: options are one dict per strategy it tries ({', '.join(n for n, _ in AUTO[kind])}), "
            f"got {sorted(options)}"
        )
    built: list[Strategy] = []
    try:
        for i, (name, row_options) in enumerate(AUTO[kind]):
            try:
                built.append(build(name, captured, context, {**row_options, **options.get(name, {})}, stacks))
            except Exception as exc:  # noqa: BLE001 - any failure costs that candidate, loudly
                if i == 0 and name == "sequential":
                    raise
                why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                instead = "running the sequential path" if i == 0 else "choosing among the others"
                warnings.warn(f"auto: {name} not possible, {instead} ({why})", stacklevel=3)
                if i == 0:
                    built.append(build("sequential", captured, context, {}, stacks))
    except BaseException:
        close_all(built)
        raise
    keep = fastest(built, captured, sync=torch.cuda.synchronize if kind == "cuda" else None)
    if keep.recipe is not None:  # pathweave.save re-plans with these where the machine differs
        keep.recipe = {**keep.recipe, "auto": True, "stacks": stacks, "auto_options": options}
    return keep


def build(name: str, captured: Captured, context: dict[str, Any], options: dict, stacks: bool) -> Strategy:
    """One candidate; ``stacks`` where its row takes them (auto builds the others without)."""
    row = STRATEGIES[name]
    if stacks and row.stacks is True:
        options = {**options, "stacks": True}
    elif stacks and isinstance(row.stacks, str):
        row = STRATEGIES[row.stacks]
    fast = row.build(captured, context, options)
    device = str(context.get("device", "cpu"))
    fast.recipe = {"strategy": row.name, "options": dict(options), "device": device, "auto": False}
    return fast


def fastest(built: list[Strategy], captured: Captured, sync: Any = None) -> Strategy:
    """The fastest of the built strategies, timed on the example inputs in rounds of a rotating order;
    the others are closed. Each timed call follows an idle gap (CPU) and one untimed call, as the bench
    does: thread pools that spin after a call (the tile engines linger 3 ms) then slow only their own
    untimed call, not the next strategy's timed one. A strategy other than the first (the baseline)
    that fails while timed is dropped with a warning. ``sync`` waits for asynchronous work (CUDA)."""
    if len(built) == 1:  # nothing to choose from
        built[0].auto_times_ms = {}
        return built[0]
    flat = [t.to("cuda") if sync is not None else t for t in captured.example_inputs]
    times: dict[int, list[float]] = {i: [] for i in range(len(built))}

    def call(i: int) -> None:
        built[i].run_flat(flat)
        if sync is not None:
            sync()

    try:
        _time_rounds(built, times, call, gap=sync is None)
    except BaseException:
        close_all(built)
        raise
    medians = {i: statistics.median(t) for i, t in times.items()}
    keep = built[min(medians, key=medians.__getitem__)]
    close_all([fn for fn in built if fn is not keep])
    keep.auto_times_ms = {built[i].label: m * 1e3 for i, m in medians.items()}  # what it was chosen on
    return keep


def _time_rounds(built: list[Strategy], times: dict[int, list[float]], call: Any, gap: bool) -> None:
    """``AUTO_ROUNDS`` rounds of a rotating order; a failing strategy (not the first) leaves ``times``."""
    for r in range(-1, AUTO_ROUNDS):  # round -1: one warm-up call each
        for i in [(r + j) % len(built) for j in range(len(built))]:
            if i not in times:
                continue
            try:
                if gap:
                    time.sleep(AUTO_GAP_S)
                call(i)
                t0 = time.perf_counter()
                call(i)
                if r >= 0:
                    times[i].append(time.perf_counter() - t0)
                built[i].quiesce()  # tile workers spinning would slow the next one timed
            except PathweaveError as exc:
                if i == 0:
                    raise
                warnings.warn(f"auto: {built[i].label} failed while timed, dropped ({exc})", stacklevel=4)
                del times[i]


def close_all(strategies: list[Strategy]) -> None:
    for fn in strategies:
        fn.close()
