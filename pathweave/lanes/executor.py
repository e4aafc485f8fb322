"""The lanes executor: a plan's lanes run at once on persistent threads, one intra-op thread each.

Lane 0 runs on the caller's thread; lanes 1.. on worker threads created once. Each lane is
generated straight-line code (``codegen``); a value crossing lanes goes through a SimpleQueue
(15-20 us a hand-off here, against 80-100 us for a threading.Event round trip). PyTorch ops release
the GIL while they compute, so lanes overlap. Lanes x intra-op threads never exceed the thread
budget, so no OpenMP team spin-waits on a core another lane needs. One inference runs at a time
(calls from several threads queue on a lock). When a node raises, its lane puts a poison value in
every queue it feeds, so waiting lanes stop instead of blocking; the error names the node, and the
queues are drained before the next call.
"""

from __future__ import annotations

import queue
import sys
import threading
import traceback
import weakref
from typing import Any

import torch
import torch.fx

from pathweave.analysis.dag import dag_owners
from pathweave.analysis.ops import refuse_shared_mutation
from pathweave.errors import ExecutionError, PlanError
from pathweave.lanes.codegen import LaneSource, lane_source
from pathweave.lanes.plan import LanePlan
from pathweave.sequential import aliased_outputs, copy_aliased, intra_op_threads


class _Poison:
    """Put into a lane's outgoing queues when it fails."""


_POISON = _Poison()


class _UpstreamFailed(Exception):
    pass


def _take(q: queue.SimpleQueue) -> Any:
    v = q.get()
    if v is _POISON:
        raise _UpstreamFailed
    return v


def lane_assignment(gm: torch.fx.GraphModule, plan: LanePlan) -> dict[torch.fx.Node, int]:
    """Lane of every compute node; tuple accesses (merged into their producer in the DAG) follow it."""
    lane_of = plan.lane_of()
    out: dict[torch.fx.Node, int] = {}
    for node, name in dag_owners(gm).items():
        if name not in lane_of:
            raise PlanError(f"the plan places no lane for node {node.format_node()}")
        out[node] = lane_of[name]
    return out


def handoff_queues(lane: dict[torch.fx.Node, int]) -> dict[tuple[str, int], int]:
    """One queue per (value, lane that needs it from another lane); graph outputs go to lane 0."""
    queues: dict[tuple[str, int], int] = {}
    for node, ln in lane.items():
        for user in node.users:
            want = 0 if user.op == "output" else lane.get(user)
            if want is not None and want != ln:
                queues.setdefault((node.name, want), len(queues))
    return queues


def queues_fed_by(
    lane: dict[torch.fx.Node, int], queues: dict[tuple[str, int], int], n_lanes: int
) -> list[list[int]]:
    """For each lane, the queues it puts into (poisoned when it fails)."""
    lane_by_name = {n.name: ln for n, ln in lane.items()}
    fed: list[list[int]] = [[] for _ in range(n_lanes)]
    for (name, _), qi in queues.items():
        fed[lane_by_name[name]].append(qi)
    return fed


def refuse_inplace(gm: torch.fx.GraphModule, name: str = "graph") -> None:
    """Lanes order data edges only; a write into a value another lane reads could land at any time."""
    refuse_shared_mutation(gm, name, "lanes")


class LanesExecutor:
    """``executor.run_flat(inputs)`` runs the plan; ``close()`` stops the worker threads."""

    strategy = "lanes"

    def __init__(self, gm: torch.fx.GraphModule, plan: LanePlan, threads_per_lane: int = 1) -> None:
        refuse_inplace(gm)
        self.gm, self.plan, self.threads_per_lane = gm, plan, threads_per_lane
        self._lock = threading.Lock()
        self._sources = self._generate()
        self._fns = [self._compile(i, s) for i, s in enumerate(self._sources)]
        self._workers = [_Worker(i, self) for i in range(1, len(self._fns))]
        self._finalizer = weakref.finalize(self, _stop, list(self._workers))
        self._closed = False
        self._aliased = aliased_outputs(gm)

    def _generate(self) -> list[LaneSource]:
        lane = lane_assignment(self.gm, self.plan)
        n_lanes = len(self.plan.lanes)
        outputs = list(next(n for n in self.gm.graph.nodes if n.op == "output").args[0])
        self.queue_index = handoff_queues(lane)
        sends: dict[str, list[int]] = {}
        for n, t in self.queue_index:
            sends.setdefault(n, []).append(t)
        self.queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in self.queue_index]
        self.outgoing = queues_fed_by(lane, self.queue_index, n_lanes)
        sources = []
        for ln in range(n_lanes):
            nodes = [n for n in self.gm.graph.nodes if lane.get(n) == ln]
            receives = {n for (n, t) in self.queue_index if t == ln}
            srcs = lane_source(self.gm, nodes, sends, receives, outputs if ln == 0 else None,
                               self.queue_index, ln)  # fmt: skip
            sources.append(srcs)
        return sources

    def _compile(self, i: int, src: LaneSource) -> Any:
        env = dict(src.globals, _take=_take)
        code = compile(src.source, f"<pathweave lane {i}>", "exec")
        exec(code, env)
        return env["lane"]

    def source(self, lane: int) -> str:
        return self._sources[lane].source

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        with self._lock:
            if self._closed:
                raise ExecutionError("this lanes executor was closed; build a new one")
            for w in self._workers:  # a call interrupted while it waited: let its lanes finish first
                while w.pending:
                    w.done.get()
                    w.pending -= 1
            for q in self.queues:  # leftovers of a failed call
                while not q.empty():
                    q.get()
            with intra_op_threads(self.threads_per_lane):
                return copy_aliased(self._run_locked(flat), self._aliased)

    def _run_locked(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        for w in self._workers:
            w.pending += 1
            w.start.put(flat)
        errors: list[tuple[int, BaseException]] = []
        result = None
        try:
            with torch.no_grad():
                result = self._fns[0](flat, self.queues)
        except BaseException as exc:  # noqa: BLE001 - every failure must unblock the other lanes
            self.poison(0)
            errors.append((0, exc))
        for w in self._workers:
            exc = w.done.get()
            w.pending -= 1
            if exc is not None:
                errors.append((w.lane, exc))
        for _, exc in errors:  # an interrupt is not the model's error: pass it on as it is
            if not isinstance(exc, Exception):
                raise exc
        real = [(ln, e) for ln, e in errors if not isinstance(e, _UpstreamFailed)]
        if real:
            raise self._error(*real[0]) from real[0][1]
        if errors:
            raise ExecutionError("a lane stopped without an error of its own (internal)")
        return result

    def poison(self, lane: int) -> None:
        for i in self.outgoing[lane]:
            self.queues[i].put(_POISON)

    def _error(self, lane: int, exc: BaseException) -> ExecutionError:
        node = None
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == f"<pathweave lane {lane}>":
                node = self._sources[lane].line_node.get(frame.lineno, node)
        fx_node = next((n for n in self.gm.graph.nodes if n.name == node), None)
        where = fx_node.format_node() if fx_node is not None else "<unknown node>"
        return ExecutionError(f"lane {lane}: node {where} raised {type(exc).__name__}: {exc}", node=node)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._finalizer()


class _Worker:
    def __init__(self, lane: int, ex: LanesExecutor) -> None:
        self.lane = lane
        self.pending = 0  # calls started on this lane and not yet collected
        self.start: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        fn, threads = ex._fns[lane], ex.threads_per_lane
        queues, poison = ex.queues, weakref.WeakMethod(ex.poison)
        self.thread = threading.Thread(target=self._loop, args=(fn, queues, poison, threads),
                                       name=f"pathweave-lane-{lane}", daemon=True)  # fmt: skip
        self.thread.start()

    def _loop(self, fn: Any, queues: list, poison: Any, threads: int) -> None:
        torch.set_num_threads(threads)
        while True:
            flat = self.start.get()
            if flat is None:
                return
            try:
                with torch.no_grad():
                    fn(flat, queues)
                self.done.put(None)
            except BaseException as exc:  # noqa: BLE001
                p = poison()
                if p is not None:
                    p(self.lane)
                self.done.put(exc)


def _stop(workers: list[_Worker]) -> None:
    for w in workers:
        w.start.put(None)
    if sys.is_finalizing():
        return
    for w in workers:
        w.thread.join(timeout=1.0)
