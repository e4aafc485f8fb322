"""Runtimes that execute a captured graph: the sequential executor with its fast CPU path, and the
lanes strategy (Ramiel's clusters on threads)."""

from __future__ import annotations

from .sequential import SequentialExecutor
from .strategy import HyperLanesStrategy, LanesStrategy, build_lanes, sequential_path

__all__ = ["HyperLanesStrategy", "LanesStrategy", "SequentialExecutor", "build_lanes", "sequential_path"]
