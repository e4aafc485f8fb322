"""Runtimes that execute a captured graph: today the sequential executor with its fast CPU path."""

from __future__ import annotations

from .sequential import SequentialExecutor

__all__ = ["SequentialExecutor"]
