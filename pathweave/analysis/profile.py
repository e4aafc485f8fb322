"""Measured per-node times: one profiling run of the graph, node by node, cached by graph + machine."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.fx

from pathweave.frontend.graph import Captured
from pathweave.machine import cache_dir, machine_key, read_cache, write_cache
from pathweave.meta import TIME_US


class NodeTimer(torch.fx.Interpreter):
    """Runs a graph node by node and keeps each node's wall times in microseconds (``times[name]``)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.times: dict[str, list[float]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        t0 = time.perf_counter()
        out = super().run_node(n)
        self.times.setdefault(n.name, []).append((time.perf_counter() - t0) * 1e6)
        return out


def measure_node_times(captured: Captured, repeats: int = 5, use_cache: bool = True) -> dict[str, float]:
    """Median microseconds per node over ``repeats`` runs after one warm-up; writes ``node.meta[TIME_US]``."""
    path = cache_dir() / "profiles" / f"{captured.graph_hash()}-{machine_key()}.json"
    times = _load(path) if use_cache else None
    if times is None:
        interp = NodeTimer(captured.gm)
        with torch.no_grad():
            for _ in range(repeats + 1):
                interp.run(*captured.example_inputs)
        times = {name: statistics.median(ts[1:]) for name, ts in interp.times.items()}
        if use_cache:
            _save(path, times)
    for node in captured.gm.graph.nodes:
        if node.name in times:
            node.meta[TIME_US] = times[node.name]
    return times


def _load(path) -> dict[str, float] | None:
    try:
        return {str(k): float(v) for k, v in read_cache(path).items()}
    except (ValueError, AttributeError, TypeError):
        return None


def _save(path, times: dict[str, float]) -> None:
    write_cache(path, times)
