"""Calls from many threads, and ``close()``, for every optimized callable.

A strategy whose state is shared between calls (the tiles' input and activation buffers, a CUDA graph's
static buffers, the lanes' queues) must run one call at a time; one that allocates per call (the
sequential path) may run them at once. Either way ``close()`` refuses new calls, waits for those already
started (running or waiting their turn) and only then frees what the calls use, so a call never touches
freed memory: after ``close()`` it raises ``ClosedError``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pathweave.errors import ClosedError


class CallGuard:
    """Admits calls until ``close``; ``exclusive`` runs them one at a time, in the order they come."""

    def __init__(self, name: str, exclusive: bool) -> None:
        self.name = name
        self.exclusive = exclusive
        self._cond = threading.Condition()
        self._started = 0  # calls admitted and not finished (running or waiting their turn)
        self._running = False
        self._closed = False

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise ClosedError(f"{self.name} is closed; optimize the model again to run it")
            self._started += 1
            if self.exclusive:
                while self._running:
                    self._cond.wait()
                self._running = True
        try:
            yield
        finally:
            with self._cond:
                self._started -= 1
                self._running = False
                self._cond.notify_all()

    def close(self) -> bool:
        """Refuse new calls and wait for the started ones; True for the caller that should free the
        resources (the first), False for later ones."""
        with self._cond:
            first = not self._closed
            self._closed = True
            while self._started:
                self._cond.wait()
        return first
