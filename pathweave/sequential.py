"""The sequential executor: the baseline every parallel plan is checked against.

The graph runs in topological order as fx-generated Python (each intermediate is dropped right
after its last use). On CPU the FAST_CPU pipeline rewrites it first; the rewritten graph is checked
against the captured one on the example inputs, and a mismatch falls back to the plain graph with
a warning, never to a wrong answer.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
import torch.fx

from pathweave.compare import mismatch
from pathweave.errors import ExecutionError
from pathweave.frontend.graph import Captured
from pathweave.passes.device import to_device
from pathweave.passes.pipeline import FAST_CPU, PassReport, run_pipeline
from pathweave.strategy import CallGuard, Strategy

#: the fast path must agree with the captured graph within these on the example inputs
FAST_RTOL, FAST_ATOL = 1e-3, 1e-4


class SequentialExecutor(Strategy):
    """``executor(*inputs)`` returns the model's outputs, nested as the model returns them.

    Calls from several threads run at once (each call allocates its own intermediates); outputs are
    ordinary tensors (computed under ``no_grad``, not ``inference_mode``: the same speed, measured on
    GoogLeNet and DeepFM, and the caller may write into them)."""

    strategy = "sequential"

    def __init__(
        self,
        captured: Captured,
        device: str = "cpu",
        fast: bool = True,
        threads: int | None = None,
        pipeline: tuple[ModuleType, ...] | None = None,
        check: bool = True,
    ) -> None:
        """``pipeline``: the rewrites (default: ``FAST_CPU`` on CPU, none on other devices, whose kernels
        they target); one given is applied on any device (the stacks' on CUDA). ``check=False`` skips
        comparing the rewritten graph with the captured one (a saved plan loaded where it was checked)."""
        self.check = check
        self.captured = captured
        self.device = torch.device(device)
        self.passes: list[PassReport] = []
        # oneDNN lays weights out for the thread count they are packed under; run with another count
        # and it reorders them on every call (Inception-v3: 38 ms packed for 2 threads, 165 ms when
        # those weights then run on 1). So the executor owns its thread count and applies it per call.
        self.threads = threads or torch.get_num_threads()
        self.guard = CallGuard(f"{captured.name} ({self.strategy})", exclusive=False)
        if pipeline is None:
            pipeline = FAST_CPU if self.device.type == "cpu" else ()
        with intra_op_threads(self.threads):
            self.gm = self._build(pipeline if fast else ())
        self._aliased = aliased_outputs(self.gm)

    def _build(self, pipeline: tuple[ModuleType, ...]) -> torch.fx.GraphModule:
        gm = to_device(self.captured.gm, self.device)
        if not pipeline:
            return gm
        # the reference is the graph to compare with and to fall back to; unchecked (a saved plan
        # loaded where it was checked), it is made again only if a rewrite fails: ResNet-50's weights
        # copied once less
        reference = copy.deepcopy(gm) if self.check else None
        try:
            self.passes = run_pipeline(gm, pipeline)
            inputs = tuple(t.to(self.device) for t in self.captured.example_inputs)
            problem = _compare(gm, reference, inputs) if reference is not None else None
        except Exception as exc:  # a rewrite that breaks must cost speed, never the answer
            problem = f"a rewrite failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        if problem:
            what = "fast CPU path" if self.device.type == "cpu" else f"rewrites on {self.device.type}"
            warnings.warn(f"{self.captured.name}: {what} disabled, {problem}", stacklevel=3)
            self.passes = []
            return reference if reference is not None else to_device(self.captured.gm, self.device)
        return gm

    def summary(self) -> str:
        """The rewrites applied, as ``pass:rewrites``."""
        return ", ".join(f"{p.name}:{p.rewrites}" for p in self.passes) or "no rewrites"

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        with self.guard.call(), torch.no_grad(), intra_op_threads(self.threads):
            try:
                return copy_aliased(self.gm(*flat), self._aliased)
            except Exception as exc:
                raise locate_failure(self.gm, flat, exc) from exc


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run with ``n`` intra-op threads and restore the caller's count (a no-op when they agree)."""
    saved = torch.get_num_threads()
    if saved != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if saved != n:
            torch.set_num_threads(saved)


def _compare(gm: torch.fx.GraphModule, ref: torch.fx.GraphModule, inputs: tuple) -> str | None:
    with torch.inference_mode():
        problem = mismatch(list(gm(*inputs)), list(ref(*inputs)), FAST_RTOL, FAST_ATOL, scale_atol=True)
    return f"{problem} against the captured graph" if problem else None


def locate_failure(gm: torch.fx.GraphModule, flat: list[torch.Tensor], exc: Exception) -> ExecutionError:
    """Re-run node by node to name the node that raised (only on the error path)."""
    failing: list[torch.fx.Node] = []

    class _Finder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            try:
                return super().run_node(n)
            except Exception:
                failing.append(n)
                raise

    try:
        with torch.inference_mode():
            _Finder(gm).run(*flat)
    except Exception:
        pass
    where = failing[0].format_node() if failing else "<unknown node>"
    name = failing[0].name if failing else None
    return ExecutionError(f"node {where} raised {type(exc).__name__}: {exc}", node=name)


def aliased_outputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """Positions of outputs that are a constant of the graph or one of its inputs, or a value an earlier
    output already is (``y, y.clone()`` once the clone is folded away): returned as they are, a caller
    writing into one would change the next call's result, their own input or another output."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    seen: set[torch.fx.Node] = set()
    positions = []
    for i, v in enumerate(values):
        if not isinstance(v, torch.fx.Node):
            continue
        if v.op in ("get_attr", "placeholder") or v in seen:
            positions.append(i)
        seen.add(v)
    return frozenset(positions)


def copy_aliased(outputs: tuple, positions: frozenset[int]) -> tuple:
    if not positions:
        return outputs
    return tuple(
        o.clone() if i in positions and isinstance(o, torch.Tensor) else o for i, o in enumerate(outputs)
    )
