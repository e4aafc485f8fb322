"""What the server runs: a ``Runner`` (named inputs and outputs, ``run`` on numpy arrays) over a pathweave
callable, loaded from a ``.pw`` plan or optimized at start.

Batching: the server concatenates requests along dim 0 only where the model takes any batch size, which
a pathweave callable does when it is dynamic in ``batch`` (``optimize(..., dynamic={"batch": (1, N)})``).
A ``.pw`` file holds a fixed-shape plan (``pathweave.save`` refuses dynamic callables, and its program is
exported at the example's shape, so it cannot be re-planned at another batch): it is served at its saved
shape, one request per run. ``pathweave serve MODEL`` with a zoo name, ``.pt2`` or ``hf:`` model and
``--max-batch N > 1`` optimizes it dynamic in batch at start.

A batched run is padded up to the next bucket (powers of two up to ``max_batch``) so that at most a few
plans are built, all of them at start (``warm``), and each bucket is checked once against one-row runs:
a model whose rows are not independent (a batch statistic, a reshape across the batch) would answer one
request with another's data, so it is refused for batching instead. Batched answers equal one-row
answers within the capture tolerance, not bit for bit (kernels block differently per batch size).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from pathweave.api import optimize
from pathweave.compare import mismatch
from pathweave.errors import InputError
from pathweave.saved import load
from pathweave.serve.protocol import TensorMeta, datatype_of
from pathweave.strategy import Strategy
from pathweave.tiles.coexec import CoExecutor
from pathweave.tiles.strategy import TilesStrategy

#: one-row and batched answers must agree within these (capture's own tolerance)
ROW_RTOL, ROW_ATOL = 1e-4, 1e-5


class Runner:
    """A model as the server sees it. ``max_batch`` > 1 means ``run`` takes any rows ``1..max_batch``
    along dim 0 of every input, with rows independent; ``run`` is called from one thread at a time.
    ``max_requests``: how many requests one ``run_many`` takes (by default as many as fit ``max_batch``)."""

    name: str
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    max_batch: int = 1
    label: str = "?"

    @property
    def max_requests(self) -> int:
        return self.max_batch

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def run_many(self, requests: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        """Each request's outputs, the requests run as one: concatenated along dim 0, split back."""
        if len(requests) == 1:
            return [self.run(requests[0])]
        joined = [np.concatenate([r[i] for r in requests]) for i in range(len(requests[0]))]
        outs, start, answers = self.run(joined), 0, []
        for r in requests:
            rows = r[0].shape[0]
            answers.append([o[start : start + rows] for o in outs])
            start += rows
        return answers

    def close(self) -> None:
        """Release the model (nothing by default)."""


def buckets(max_batch: int) -> list[int]:
    """The batch sizes planned: powers of two below ``max_batch``, and ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def _pad(array: np.ndarray, rows: int) -> np.ndarray:
    """``array`` grown to ``rows`` along dim 0 with copies of its last row (dropped after the run)."""
    if array.shape[0] == rows:
        return array
    extra = np.repeat(array[-1:], rows - array.shape[0], axis=0)
    return np.concatenate([array, extra], axis=0)


class PathweaveRunner(Runner):
    """A pathweave callable (``optimize``'s or ``load``'s result) behind the server."""

    def __init__(
        self, fast: Strategy, name: str | None = None, max_batch: int = 1, verify: bool = True
    ) -> None:
        self.fast = fast
        captured = fast.captured
        self.name = name or captured.name
        self.label = f"pathweave:{fast.label}"
        self._spec = captured.in_spec
        self._lock = threading.Lock()
        batch = next((d for d in getattr(fast, "dims", ()) if d.name == "batch"), None)
        if max_batch > 1 and batch is None:
            raise InputError(
                f"{self.name}: --max-batch {max_batch} needs a model dynamic in batch; a .pw plan has fixed "
                "shapes (serve the model itself with --max-batch, or use --max-batch 1)"
            )
        if batch is not None and max_batch > batch.hi:
            raise InputError(
                f"{self.name}: max_batch {max_batch} is above its batch range {batch.lo}..{batch.hi}"
            )
        if batch is not None and batch.lo > 1:
            raise InputError(f"{self.name}: its batch range starts at {batch.lo}; batching needs 1")
        self.max_batch = max_batch
        self.buckets = buckets(max_batch) if max_batch > 1 else []
        names = [n.name for n in captured.gm.graph.nodes if n.op == "placeholder"]
        dyn = 0 if max_batch > 1 else None
        self.inputs = [_meta(n, t, dyn) for n, t in zip(names, captured.example_inputs, strict=True)]
        outs = self._call([t.numpy() for t in captured.example_inputs])
        self.outputs = [_meta(f"output_{i}", torch.from_numpy(o), dyn) for i, o in enumerate(outs)]
        if self.max_batch > 1:
            self._warm(verify)

    def _call(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        args, kwargs = pytree.tree_unflatten([torch.from_numpy(a) for a in arrays], self._spec)
        with self._lock, torch.no_grad():
            out = self.fast(*args, **kwargs)
        return [t.detach().cpu().numpy() for t in pytree.tree_leaves(out)]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.max_batch == 1:
            return self._call(inputs)
        rows = inputs[0].shape[0]
        size = next(b for b in self.buckets if b >= rows)
        outs = self._call([_pad(a, size) for a in inputs])
        return [o[:rows] for o in outs]

    def _warm(self, verify: bool) -> None:
        """Plan every bucket now, and check that rows are answered independently (module docstring)."""
        rows = [_row(self.fast.captured.example_inputs, k) for k in range(4)]
        single = [self._call(r) for r in rows]
        for size in self.buckets:
            joined = [np.concatenate([rows[k % 4][i] for k in range(size)]) for i in range(len(rows[0]))]
            batched = self._call(joined)
            unbatched = [i for i, o in enumerate(batched) if o.ndim == 0 or o.shape[0] != size]
            if unbatched:
                raise InputError(
                    f"{self.name}: outputs {unbatched} have no batch dim 0 at batch {size}; requests "
                    "cannot be batched (use --max-batch 1)"
                )
            for k in range(size if verify else 0):
                got = [torch.from_numpy(o[k : k + 1]) for o in batched]
                why = mismatch(got, [torch.from_numpy(o) for o in single[k % 4]], ROW_RTOL, ROW_ATOL, True)
                if why is not None:
                    raise InputError(
                        f"{self.name}: row {k} of a batch of {size} differs from that row run alone "
                        f"({why}); its rows are not independent, so requests cannot be batched "
                        "(use --max-batch 1)"
                    )

    def close(self) -> None:
        self.fast.close()


class CoExecRunner(PathweaveRunner):
    """A fixed-shape tiles plan whose concurrent requests run together in one ``CoExecutor`` run (ASPEN's
    co-execution: up to ``slots`` requests share the native engines, each with its own buffers)."""

    def __init__(self, fast: Strategy, name: str | None = None, slots: int = 4) -> None:
        if not isinstance(fast, TilesStrategy):
            who = name or fast.captured.name
            raise InputError(f"{who}: co-execution runs a whole tiles plan; this one is {fast.label}")
        super().__init__(fast, name)
        self.slots = slots
        self.label = f"pathweave:{fast.label} (co-executed, {slots} slots)"
        self._coexec = CoExecutor(slots=slots)

    @property
    def max_requests(self) -> int:
        return self.slots

    def run_many(self, requests: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        jobs = []
        for arrays in requests:
            args, kwargs = pytree.tree_unflatten([torch.from_numpy(a) for a in arrays], self._spec)
            jobs.append((self.fast, args, kwargs))
        futures = self._coexec.submit_all(jobs)
        return [[t.numpy() for t in pytree.tree_leaves(f.result())] for f in futures]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.run_many([inputs])[0]

    def close(self) -> None:
        self._coexec.close()
        super().close()


def _meta(name: str, t: torch.Tensor, dynamic_dim: int | None) -> TensorMeta:
    shape = tuple(-1 if d == dynamic_dim else s for d, s in enumerate(t.shape))
    return TensorMeta(name, datatype_of(t.dtype), shape)


def _row(example: tuple[torch.Tensor, ...], k: int) -> list[np.ndarray]:
    """A one-row input unlike the others: the example's first row, shifted (floats) or rolled (integers)."""
    out = []
    for t in example:
        row = t[:1].clone()
        if row.is_floating_point():
            gen = torch.Generator().manual_seed(k)
            row = row + 0.5 * k * torch.randn(row.shape, generator=gen, dtype=row.dtype)
        elif row.dim() > 1 and k:
            row = torch.roll(row, k, dims=-1)
        out.append(row.contiguous().numpy())
    return out


def load_runner(
    source: Any,
    *inputs: Any,
    name: str | None = None,
    max_batch: int = 1,
    strategy: str = "auto",
    verify: bool = True,
    co_execute: int = 0,
) -> PathweaveRunner:
    """A runner for ``source``: a pathweave callable, a ``.pw`` plan, or a model ``optimize`` takes (zoo
    name, ``.pt2``, ``hf:``, nn.Module with ``inputs``), optimized dynamic in batch when ``max_batch > 1``.
    ``co_execute=k`` runs up to k concurrent requests of a fixed-shape tiles plan together."""
    if co_execute and max_batch > 1:
        raise InputError("co-execution and batching exclude each other: give --co-execute or --max-batch")
    if isinstance(source, Strategy):
        fast = source
    elif isinstance(source, str) and source.endswith(".pw"):
        fast = load(source)
    else:
        dynamic = {"batch": (1, max_batch)} if max_batch > 1 else None
        fast = optimize(source, *inputs, strategy=strategy, dynamic=dynamic)
    if co_execute:
        return CoExecRunner(fast, name, co_execute)
    return PathweaveRunner(fast, name, max_batch, verify)
