"""Dynamic batching: requests that arrive within a window run as one batch.

The ``Batcher`` lives on the server's event loop. The first waiting request opens a batch; requests
arriving within ``window_s`` join it while their rows fit ``max_batch`` (and they are at most the
runner's ``max_requests``); the batch is run once in the batcher's one worker thread (the model runs one
call at a time and uses the cores itself) by ``runner.run_many``: concatenated along dim 0 and split back
by rows, or, for a co-executing runner, as requests side by side in one CoExecutor run. While a batch
runs, new requests queue for the next one. A batch that fails is run again request by request, so one
request's failure is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from pathweave.serve.model import Runner


@dataclass(eq=False)
class _Pending:
    inputs: list[np.ndarray]
    rows: int
    future: asyncio.Future


class Batcher:
    """Runs ``runner`` for requests submitted on one event loop; ``on_batch(rows, requests)`` is told of
    each run. With ``runner.max_requests == 1`` each request runs alone."""

    def __init__(
        self, runner: Runner, window_s: float = 0.002, on_batch: Callable[[int, int], None] | None = None
    ) -> None:
        self.runner = runner
        self.window_s = window_s
        self.on_batch = on_batch
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pathweave-serve")

    def start(self) -> None:
        """Start the batching loop on the running event loop."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._pool.shutdown(wait=True)

    async def submit(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs for ``inputs`` (already checked against the model's inputs)."""
        if self._queue is None:
            self.start()
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(inputs, inputs[0].shape[0] if inputs[0].ndim else 1, future))
        return await future

    async def _collect(self, first: _Pending) -> tuple[list[_Pending], _Pending | None]:
        """``first`` and the requests that join it within the window; the one that did not fit, if any."""
        batch, rows = [first], first.rows
        limit = self.runner.max_batch if self.runner.max_batch > 1 else None  # rows, where concatenated
        deadline = asyncio.get_running_loop().time() + self.window_s
        while len(batch) < self.runner.max_requests and (limit is None or rows < limit):
            timeout = deadline - asyncio.get_running_loop().time()
            try:
                nxt = (
                    self._queue.get_nowait()
                    if timeout <= 0
                    else await asyncio.wait_for(self._queue.get(), timeout)
                )
            except (asyncio.TimeoutError, asyncio.QueueEmpty):
                break
            if limit is not None and rows + nxt.rows > limit:
                return batch, nxt
            batch.append(nxt)
            rows += nxt.rows
        return batch, None

    async def _loop(self) -> None:
        held: _Pending | None = None
        while True:
            first = held if held is not None else await self._queue.get()
            batch, held = await self._collect(first)
            batch = [p for p in batch if not p.future.cancelled()]  # clients that went away
            if batch:
                await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        if self.on_batch is not None:
            self.on_batch(sum(p.rows for p in batch), len(batch))
        if len(batch) == 1:
            await self._run_one(batch[0])
            return
        try:
            answers = await loop.run_in_executor(self._pool, self.runner.run_many, [p.inputs for p in batch])
        except Exception:  # noqa: BLE001 - whose request failed is found by running them alone
            for p in batch:
                await self._run_one(p)
            return
        for p, outs in zip(batch, answers, strict=True):
            if not p.future.done():
                p.future.set_result(outs)

    async def _run_one(self, p: _Pending) -> None:
        try:
            outs = await asyncio.get_running_loop().run_in_executor(
                self._pool, self.runner.run_many, [p.inputs]
            )
        except Exception as exc:  # noqa: BLE001 - handed to the request that caused it
            if not p.future.done():
                p.future.set_exception(exc)
            return
        if not p.future.done():
            p.future.set_result(outs[0])
