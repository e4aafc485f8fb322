"""Co-execution (ASPEN, Section 5): requests of several models, or several requests of one model, run at
once in one ready pool of native engines.

``CoExecutor`` holds one tile runtime with a fixed number of workers and a dispatcher thread. Any thread
may ``submit(model, *inputs)`` and gets a ``concurrent.futures.Future``. The dispatcher takes every pending
request (at most ``slots`` per model, in submission order), runs them in ONE runtime call over the
disjoint union of their tile graphs (``tile_union``), and completes every request's future with its own
outputs, or with the exception that stopped the run. Requests that arrive during a run go into the next.

Each request in a run needs its own input and activation buffers, so a model gets up to ``slots``
program instances over its one tile graph and its one set of weights (built when first needed; memory:
``slots`` times the model's activations), and the k-th request of a model in a run uses instance k. The
union of each combination (which models, how many requests of each) is built once and cached.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from pathweave.errors import ClosedError, ExecutionError, InputError
from pathweave.frontend.capture import capture
from pathweave.frontend.graph import Captured
from pathweave.tiles.runtime import TileRuntime
from pathweave.tiles.strategy import TilesStrategy
from pathweave.tiles.union import TilePart, TileUnion, make_part, union

#: unions (combinations of requests) kept built; a run of another combination builds its union again
MAX_UNIONS = 32


class _Model:
    """A model the executor has run: its tiles strategy and its program instances, one per slot."""

    def __init__(self, index: int, strategy: TilesStrategy) -> None:
        self.index = index
        self.strategy = strategy
        self.name = strategy.captured.name
        self.parts: list[TilePart] = []

    def part(self, k: int) -> TilePart:
        while len(self.parts) <= k:
            self.parts.append(make_part(self.strategy.graph, self.strategy.new_program()))
        return self.parts[k]


@dataclass(eq=False)
class _Request:
    model: _Model
    inputs: list[np.ndarray]  # copies taken at submission
    future: Future


class CoExecutor:
    """Runs tiles strategies' requests together on ``workers`` native engines (the dispatcher thread is
    engine 0). ``slots``: requests of one model in one run. Use it as a context manager, or ``close()``."""

    def __init__(self, workers: int | None = None, slots: int = 4, max_unions: int = MAX_UNIONS) -> None:
        counts = (slots, max_unions, 1 if workers is None else workers)
        if any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in counts):
            raise InputError(
                f"CoExecutor needs workers, slots and max_unions >= 1, got {workers}, {slots}, {max_unions}"
            )
        self.workers = workers or torch.get_num_threads()
        self.slots = slots
        self.max_unions = max_unions
        self._runtime = TileRuntime([], np.zeros(0, np.int32), self.workers)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[_Request] = deque()
        self._models: dict[int, _Model] = {}  # by id of the strategy, which the _Model keeps alive
        # (id of a module, input signature, its tensors' addresses and versions) -> (module, strategy)
        self._built: dict[tuple, tuple[Any, TilesStrategy]] = {}
        self._build_lock = threading.Lock()
        self._unions: OrderedDict[tuple[int, ...], TileUnion] = OrderedDict()
        self._loaded: TileUnion | None = None
        self._closed = False
        self.stats = {"runs": 0, "requests": 0, "largest_run": 0}
        self._thread = threading.Thread(target=self._loop, name="pathweave-coexec", daemon=True)
        self._thread.start()

    # ---- submitting (any thread) ------------------------------------------------------------------------

    def submit(self, model: Any, *args: Any, **kwargs: Any) -> Future:
        """A future of ``model(*args, **kwargs)``'s outputs, computed in a later co-executed run.

        ``model`` is a ``TilesStrategy`` (what ``optimize(..., strategy="tiles")`` returns), or a module,
        ``Captured`` graph or anything else ``capture`` takes; those become a tiles strategy once per
        model and input signature, here in the caller's thread. Inputs are copied now. Errors about this
        request (wrong shapes, a model the tile kernels cannot run, a failed run) go into the future."""
        return self.submit_all([(model, args, kwargs)])[0]

    def submit_all(self, requests: Iterable[tuple]) -> list[Future]:
        """``submit`` for several requests, each ``(model, args)`` or ``(model, args, kwargs)``; they are
        queued together, so they run together (up to ``slots`` per model)."""
        self._check_open()
        ready = []
        futures = []
        for request in requests:
            shaped = isinstance(request, tuple) and len(request) in (2, 3)
            if not shaped or not isinstance(request[1], (tuple, list)) or (
                    len(request) == 3 and not isinstance(request[2], dict)):  # fmt: skip
                raise InputError(
                    f"submit_all takes (model, args) or (model, args, kwargs) tuples, not {request!r}"
                )
            model, args, *rest = request
            future: Future = Future()
            futures.append(future)
            try:
                ready.append(self._request(model, tuple(args), rest[0] if rest else {}, future))
            except Exception as exc:  # noqa: BLE001 - any failure to prepare belongs to this request
                future.set_exception(exc)
        with self._lock:
            self._check_open()
            self._queue.extend(ready)
            self._wake.notify()
        return futures

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this CoExecutor is closed; no new requests")
        if not self._thread.is_alive():
            raise ExecutionError("this CoExecutor's dispatcher has stopped; no new requests")

    def _request(self, model: Any, args: tuple, kwargs: dict, future: Future) -> _Request:
        strategy = self._strategy(model, args, kwargs)
        flat = strategy.captured.flatten_inputs(args, kwargs)
        inputs = [np.array(t.detach().cpu().numpy(), copy=True) for t in flat]  # ids keep their dtype
        with self._lock:
            entry = self._models.get(id(strategy))
            if entry is None:
                entry = self._models[id(strategy)] = _Model(len(self._models), strategy)
        return _Request(entry, inputs, future)

    def _strategy(self, model: Any, args: tuple, kwargs: dict) -> TilesStrategy:
        if isinstance(model, TilesStrategy):
            return model
        leaves = pytree.tree_leaves((args, kwargs))
        signature = tuple(
            (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t) for t in leaves
        )
        # the built strategy holds a copy of the weights (folded, packed): a module whose parameters or
        # buffers changed since (in place or replaced) is built again rather than run with stale ones
        state = ()
        if isinstance(model, torch.nn.Module):
            tensors = [*model.parameters(), *model.buffers()]
            state = tuple((t.data_ptr(), t._version) for t in tensors)
        key = (id(model), signature, state)
        with self._build_lock:
            if key not in self._built:
                captured = model if isinstance(model, Captured) else capture(model, *args, **kwargs)
                strategy = TilesStrategy(captured, threads=1)
                strategy.close()  # only its graph and programs are used here, not its own runtime
                for stale in [k for k in self._built if k[:2] == key[:2]]:
                    del self._built[stale]  # the same module and inputs with older weights
                self._built[key] = (model, strategy)  # the model is kept so that its id stays its own
            return self._built[key][1]

    # ---- dispatching (the dispatcher thread) -----------------------------------------------------------

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._queue and not self._closed:
                        self._wake.wait()
                    if not self._queue:
                        break
                    batch = self._take()
                try:
                    if batch:
                        self._run(batch)
                except BaseException as exc:  # noqa: BLE001 - no request may wait for a dead dispatcher
                    for req in batch:
                        if not req.future.done():
                            req.future.set_exception(exc)
                    raise
        finally:
            with self._lock:
                self._closed = True
                left, self._queue = list(self._queue), deque()
            for req in left:
                if req.future.set_running_or_notify_cancel():
                    req.future.set_exception(ExecutionError("the CoExecutor stopped before this request ran"))
            self._runtime.close()

    def _take(self) -> list[_Request]:
        """The pending requests of the next run (called under the lock): the oldest ``slots`` of every
        model; cancelled ones are dropped."""
        taken: list[_Request] = []
        counts: Counter[_Model] = Counter()
        rest: deque[_Request] = deque()
        for req in self._queue:
            if counts[req.model] >= self.slots:
                rest.append(req)
            elif not req.future.done() and req.future.set_running_or_notify_cancel():
                counts[req.model] += 1  # (a future finished by its holder is dropped)
                taken.append(req)
        self._queue = rest
        return taken

    def _run(self, batch: list[_Request]) -> None:
        united: TileUnion | None = None
        part_of: list[int] = []
        self._runtime.failed_tile = None  # a failure before this run's kernels names no tile
        try:
            united, part_of = self._union(batch)
            for req, k in zip(batch, part_of, strict=True):
                for buf, x in zip(united.parts[k].program.inputs, req.inputs, strict=True):
                    np.copyto(buf, x, casting="no")
            if united is not self._loaded:
                self._loaded = None
                united.load(self._runtime)
                self._loaded = united
            self._runtime.run()
            results = [self._outputs(req, united.parts[k]) for req, k in zip(batch, part_of, strict=True)]
        except Exception as exc:  # noqa: BLE001 - every request of the run gets the reason it failed
            self._count(batch)
            self._fail(batch, exc, united, part_of)
            return
        self._count(batch)
        for req, out in zip(batch, results, strict=True):
            req.future.set_result(out)

    def _union(self, batch: list[_Request]) -> tuple[TileUnion, list[int]]:
        """The union for the batch (parts by model, then by slot) and each request's part in it."""
        order = sorted(range(len(batch)), key=lambda i: batch[i].model.index)  # stable: slots in order
        key = tuple(batch[i].model.index for i in order)
        part_of = [0] * len(batch)
        for pos, i in enumerate(order):
            part_of[i] = pos
        united = self._unions.get(key)
        if united is None:
            seen: Counter[_Model] = Counter()
            parts = []
            for i in order:
                m = batch[i].model
                parts.append(m.part(seen[m]))
                seen[m] += 1
            united = self._unions[key] = union(parts)
            while len(self._unions) > self.max_unions:  # the runtime keeps the arrays of a loaded one
                self._unions.popitem(last=False)
        self._unions.move_to_end(key)
        return united, part_of

    @staticmethod
    def _outputs(req: _Request, part: TilePart) -> Any:
        flat = part.program.read()
        return req.model.strategy.captured.out_spec_unflatten(flat)

    def _count(self, batch: list[_Request]) -> None:
        self.stats["runs"] += 1
        self.stats["requests"] += len(batch)
        self.stats["largest_run"] = max(self.stats["largest_run"], len(batch))

    def _fail(
        self, batch: list[_Request], exc: Exception, united: TileUnion | None, part_of: list[int]
    ) -> None:
        """Every request of a failed run gets an exception. Where a tile kernel failed, the request it
        belongs to is told which layer, the others that they were not computed."""
        tile = self._runtime.failed_tile if isinstance(exc, ExecutionError) else None
        if united is None or tile is None or not part_of:
            for req in batch:
                req.future.set_exception(exc)
            return
        part, layer = united.locate(tile)
        culprit = batch[part_of.index(part)].model.name
        for req, k in zip(batch, part_of, strict=True):
            if k == part:
                err = ExecutionError(
                    f"{req.model.name}: the tile kernel of layer {layer} failed ({exc})", layer
                )
            else:
                why = f"not computed; the run it shared failed in layer {layer} of a {culprit} request"
                err = ExecutionError(f"{req.model.name}: {why}")
            req.future.set_exception(err)

    # ---- shutting down ----------------------------------------------------------------------------------

    def close(self, wait: bool = True, cancel_pending: bool = False) -> None:
        """No new requests; the pending ones still run unless ``cancel_pending``. ``wait``: return once
        the dispatcher has stopped and the engines are gone."""
        with self._lock:
            self._closed = True
            if cancel_pending:
                for req in self._queue:
                    req.future.cancel()
                self._queue.clear()
            self._wake.notify_all()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> CoExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
