"""The strategies ``optimize`` can return: their common base class and the one table that ``optimize``,
``auto`` and ``bench`` read.

A row names its builder as a string, imported on first use, so this module imports no strategy. A new
strategy is one package plus one row here.

Calls from many threads, and ``close()``: a strategy whose state is shared between calls (the tiles'
input and activation buffers, a CUDA graph's static buffers, the lanes' queues) runs one call at a time;
one that allocates per call (the sequential path) runs them at once. Either way ``close()`` refuses new
calls, waits for those already started (running or waiting their turn) and only then frees what the
calls use, so a call never touches freed memory: after ``close()`` it raises ``ClosedError``.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pathweave.errors import ClosedError, InputError, UnsupportedError

if TYPE_CHECKING:
    from pathweave.frontend.graph import Captured


class CallGuard:
    """Admits calls until ``close``; ``exclusive`` runs them one at a time, in the order they come."""

    def __init__(self, name: str, exclusive: bool) -> None:
        self.name = name
        self.exclusive = exclusive
        self._cond = threading.Condition()
        self._started = 0  # calls admitted and not finished (running or waiting their turn)
        self._running = False
        self._closed = False

    def call(self) -> CallGuard:
        """``with guard.call():`` around one call (a plain context manager, not a generator's: its Python
        runs cold after every inference)."""
        return self

    def __enter__(self) -> None:
        with self._cond:
            if self._closed:
                raise ClosedError(f"{self.name} is closed; optimize the model again to run it")
            self._started += 1
            try:
                while self.exclusive and self._running:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting its turn: not started after all
                self._started -= 1
                self._cond.notify_all()
                raise
            if self.exclusive:
                self._running = True

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._started -= 1
            self._running = False
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> bool:
        """Refuse new calls and wait for the started ones; True for the caller that should free the
        resources (the first), False for later ones."""
        with self._cond:
            first = not self._closed
            self._closed = True
            while self._started:
                self._cond.wait()
        return first


class Strategy:
    """A callable with the model's outputs, nested as the model returns them.

    Subclasses set ``strategy`` (their table name), ``captured`` and ``guard`` and implement ``run_flat``
    (flat input tensors -> flat outputs, inside ``self.guard.call()``); ``_free`` releases what calls use
    and runs once, after the last started call."""

    strategy = "?"
    captured: Captured
    guard: CallGuard
    #: how it was built, for ``pathweave.save``: strategy, options, device, auto (set by ``auto.build``)
    recipe: dict[str, Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.captured.out_spec_unflatten(self.run_flat(self.captured.flatten_inputs(args, kwargs)))

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[Any, ...]:
        raise NotImplementedError

    def close(self) -> None:
        """Refuse further calls (``ClosedError``) and free, once the calls already started have finished."""
        if self.guard.close():
            self._free()

    def _free(self) -> None:
        """Release threads, buffers or graphs (nothing by default)."""

    def quiesce(self) -> None:
        """Let worker threads rest before another strategy is timed (nothing by default)."""

    def saved_options(self) -> dict[str, Any]:
        """Options that rebuild this plan without measuring again (``pathweave.save`` keeps them for a
        load on the same machine): what the builder measured, as plain data; nothing by default."""
        return {}

    @property
    def label(self) -> str:
        """The strategy and, where it has one, its variant (e.g. ``streams:single``)."""
        return self.strategy

    def summary(self) -> str:
        return self.label


@dataclass(frozen=True)
class Entry:
    """One strategy: its builder (``"module:callable"``, called as ``builder(captured, **keywords)``), the
    device types it runs on, which of the calling context's values it takes (``device``, ``threads``,
    ``recapture``), and what ``stacks=True`` means for it: True, a keyword it takes; a name, another row
    (sequential with stacks is the stacks strategy); False, not supported yet."""

    name: str
    target: str
    devices: frozenset[str]
    takes: tuple[str, ...] = ()
    stacks: bool | str = False

    def load(self) -> Callable[..., Strategy]:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def device_for(self, kind: str, asked: bool) -> str:
        """The device type this row runs on, given the inputs' (or the ``asked`` for) ``kind``: that one
        where it runs there; a CUDA-only row takes CPU inputs to CUDA unless a device was asked for
        (``UnsupportedError`` where this machine has none); anything else is an ``InputError``."""
        if kind in self.devices:
            return kind
        if not asked and self.devices == {"cuda"}:
            if not torch.cuda.is_available():
                raise UnsupportedError(
                    f"strategy {self.name!r} needs CUDA; on CPU use 'lanes' or 'sequential'"
                )
            return "cuda"
        where = " or ".join(sorted(d.upper() for d in self.devices))
        raise InputError(f"strategy {self.name!r} runs on {where}, not {kind}")

    def build(self, captured: Captured, context: dict[str, Any], options: dict[str, Any]) -> Strategy:
        """The strategy for ``captured``: the context values this row takes, overridden by ``options``
        (checked against the builder's parameters: a misspelt option is an ``InputError``, not a
        TypeError)."""
        builder = self.load()
        params = [p for p in inspect.signature(builder).parameters if p not in ("self", "captured")]
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise InputError(
                f"strategy {self.name!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options: {', '.join(params) or 'none'}"
            )
        keywords = {k: context[k] for k in self.takes if k in context}
        return builder(captured, **(keywords | options))


STRATEGIES: dict[str, Entry] = {e.name: e for e in (
    Entry("sequential", "pathweave.sequential:SequentialExecutor", frozenset({"cpu", "cuda"}),
          takes=("device", "threads"), stacks="stacks"),
    Entry("lanes", "pathweave.lanes.strategy:build_lanes", frozenset({"cpu"}),
          takes=("recapture", "threads"), stacks=True),
    Entry("stacks", "pathweave.stacks.strategy:StacksStrategy", frozenset({"cpu", "cuda"}),
          takes=("device", "threads"), stacks="stacks"),
    Entry("streams", "pathweave.streams.strategy:StreamsStrategy", frozenset({"cuda"})),
    Entry("tiles", "pathweave.tiles.mixed:build_tiles", frozenset({"cpu"}), takes=("threads",)),
)}  # fmt: skip

#: what ``optimize(strategy="auto")`` builds and times per device type: (row, options); the first is
#: the baseline (its failure falls back to the sequential row, the others' cost only themselves)
AUTO: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "cpu": [("sequential", {}), ("lanes", {}), ("tiles", {})],
    "cuda": [("streams", {"policy": "single"}), ("streams", {})],
}


def entry(name: str) -> Entry:
    """The row for ``name``; ``InputError`` naming the choices for anything else."""
    if name not in STRATEGIES:
        raise InputError(f"unknown strategy {name!r}; choose one of auto, {', '.join(STRATEGIES)}")
    return STRATEGIES[name]
