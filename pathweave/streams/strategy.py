"""The streams executor (Opara): a ``StreamPlan`` run on CUDA streams and captured into one CUDA Graph.

Capture contract:
- Warm-up: the plan runs twice on its streams before capture, so cuDNN/cuBLAS pick algorithms and
  allocate workspaces outside the graph; the graph then replays the same kernels in the same order on
  the same addresses.
- Inputs are copied into static buffers before each replay. Outputs live in the graph's memory and
  the next replay overwrites them: ``copy_outputs=True`` (the default) returns copies; with False the
  caller gets the static tensors and must copy what it keeps.
- Fork and join: every stream first waits on the capturing stream (that is what puts it into the
  capture), and the capturing stream waits on every stream at the end.
- Memory comes from a private pool. ``memory="reuse"`` frees a value after its last consumer in
  launch order; a value read on a stream other than the one that made it gets ``record_stream`` for
  that stream first, and the caching allocator does not hand such a block out again while a capture is
  under way, so only blocks used by one stream are reused, by that stream, after it is done with them
  (stream order). ``memory="keepalive"`` frees nothing until the capture ends.
- Refused with ``UnsupportedError``: in-place ops (another stream could read while one writes) and
  random ops (their order on the generator would differ from eager).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from pathweave.analysis.cost import annotate
from pathweave.analysis.dag import build_dag, dag_owners
from pathweave.analysis.kernels import GpuLimits, node_bounds, node_demand, profile_kernels
from pathweave.analysis.ops import mutates, op_name
from pathweave.errors import ExecutionError, UnsupportedError
from pathweave.frontend.graph import Captured
from pathweave.passes.device import to_device
from pathweave.strategy import CallGuard, Strategy
from pathweave.streams.plan import StreamPlan, plan_streams, waits_into

MEMORY_MODES = ("reuse", "keepalive")
_RANDOM = {"rand", "randn", "rand_like", "randn_like", "randint", "bernoulli", "normal", "native_dropout",
           "dropout", "multinomial", "randperm", "uniform", "exponential"}  # fmt: skip


def refuse_unsafe(gm: torch.fx.GraphModule) -> None:
    bad = [n for n in gm.graph.nodes if mutates(n, gm) or op_name(n, gm) in _RANDOM]
    if bad:
        raise UnsupportedError(
            f"streams need a functional graph without random ops; node {bad[0].format_node()} "
            f"({len(bad)} such nodes) cannot be split across streams; use strategy='sequential'",
            ops=sorted({op_name(n, gm) for n in bad}),
        )


def owners(gm: torch.fx.GraphModule, plan_nodes: set[str]) -> dict[torch.fx.Node, str]:
    """The plan node each compute fx node belongs to (``dag_owners``), checked against the plan."""
    out = dag_owners(gm)
    missing = next((n for n, name in out.items() if name not in plan_nodes), None)
    if missing is not None:
        raise ExecutionError(f"the stream plan has no place for node {missing.format_node()}")
    return out


class StreamsExecutor:
    """``run_flat(inputs)`` copies the inputs in, replays the graph and returns the outputs."""

    strategy = "streams"

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        plan: StreamPlan,
        example_inputs: list[torch.Tensor],
        memory: str = "reuse",
        copy_outputs: bool = True,
    ) -> None:
        if memory not in MEMORY_MODES:
            raise UnsupportedError(f"memory={memory!r}; choose one of {', '.join(MEMORY_MODES)}")
        refuse_unsafe(gm)
        self.gm, self.plan, self.memory, self.copy_outputs = gm, plan, memory, copy_outputs
        self._owner = owners(gm, set(plan.order))
        self._members: dict[str, list[torch.fx.Node]] = {n: [] for n in plan.order}
        for node, name in self._owner.items():
            self._members[name].append(node)
        self._last_use = self._last_uses()
        self.static = [t.detach().clone() for t in example_inputs]
        self.streams = [torch.cuda.Stream() for _ in range(max(plan.streams, 1))]
        # made once and reused by every launch, so the capture records events that already exist
        self._events = {n: torch.cuda.Event() for n in plan.recorded()}
        with torch.inference_mode():
            for _ in range(2):  # warm-up, outside the graph
                self._launch(self.static)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            self.graph = torch.cuda.CUDAGraph()
            self.allocations: list[tuple[str, int, int]] = []  # filled during capture, for the tests
            with torch.cuda.graph(self.graph, pool=torch.cuda.graph_pool_handle()):
                self.outputs = self._launch(self.static, self.allocations)
            torch.cuda.synchronize()
        self.graph_bytes = torch.cuda.memory_allocated() - before

    def _last_uses(self) -> dict[str, list[torch.fx.Node]]:
        """For each plan node, the values whose last reader (in launch order) it is."""
        at = {n: i for i, n in enumerate(self.plan.order)}
        last: dict[torch.fx.Node, int] = {}
        for node, name in self._owner.items():
            for a in node.all_input_nodes:
                last[a] = max(last.get(a, -1), at[name])
        out = next(n for n in self.gm.graph.nodes if n.op == "output")
        for a in out.all_input_nodes:
            last[a] = len(self.plan.order)  # outputs live to the end
        free: dict[str, list[torch.fx.Node]] = {n: [] for n in self.plan.order}
        for value, i in last.items():
            if i < len(self.plan.order) and value.op not in ("placeholder", "get_attr"):
                free[self.plan.order[i]].append(value)
        return free

    def _launch(
        self, flat: list[torch.Tensor], log: list[tuple[str, int, int]] | None = None
    ) -> tuple[Any, ...]:
        interp = torch.fx.Interpreter(self.gm)
        env: dict[torch.fx.Node, Any] = interp.env
        inputs = iter(flat)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
            elif node.op == "get_attr":
                env[node] = interp.run_node(node)
        made_on: dict[torch.fx.Node, int] = {}
        sof = self.plan.stream_of()
        waits = waits_into(self.plan.waits)
        here = torch.cuda.current_stream()
        for s in self.streams:
            s.wait_stream(here)  # fork: joins every stream to the capture
        for name in self.plan.order:
            self._launch_one(name, sof[name], waits.get(name, ()), interp, made_on, log)
            if self.memory == "reuse":
                for value in self._last_use[name]:
                    env.pop(value, None)
        for s in self.streams:
            here.wait_stream(s)  # join
        out = next(n for n in self.gm.graph.nodes if n.op == "output")
        return tuple(pytree.tree_leaves(torch.fx.node.map_arg(out.args[0], env.__getitem__)))

    def _launch_one(
        self,
        name: str,
        s: int,
        waits: Any,
        interp: torch.fx.Interpreter,
        made_on: dict[torch.fx.Node, int],
        log: list[tuple[str, int, int]] | None,
    ) -> None:
        """Plan node ``name`` on stream ``s``: wait for the events it depends on, run its members, record
        its own event where others wait for it."""
        env, events, stream = interp.env, self._events, self.streams[s]
        with torch.cuda.stream(stream):
            for p in waits:
                stream.wait_event(events[p])
            for node in self._members[name]:
                self._record_reads(node, env, made_on, s, stream)
                env[node] = interp.run_node(node)
                made_on[node] = s
                if log is not None:
                    log.extend((node.name, s, p) for p in _new_storages(node, env))
            if name in events:
                events[name].record(stream)

    def _record_reads(
        self, node: torch.fx.Node, env: Mapping, made_on: Mapping, s: int, stream: torch.cuda.Stream
    ) -> None:
        """Tell the allocator that this stream reads values another stream made (see module doc)."""
        for a in node.all_input_nodes:
            if made_on.get(a, s) != s:
                for t in pytree.tree_leaves(env[a]):
                    if isinstance(t, torch.Tensor):
                        t.record_stream(stream)

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[Any, ...]:
        for buf, x in zip(self.static, flat, strict=True):
            buf.copy_(x, non_blocking=True)
        self.graph.replay()
        if not self.copy_outputs:
            return self.outputs
        return tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in self.outputs)


def _new_storages(node: torch.fx.Node, env: Mapping) -> list[int]:
    """Storages a node's output holds that none of its inputs did (a fresh allocation, not a view)."""

    def ptrs(v: Any) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in pytree.tree_leaves(v) if isinstance(t, torch.Tensor)}

    seen = set().union(*(ptrs(env[a]) for a in node.all_input_nodes)) if node.all_input_nodes else set()
    return sorted(ptrs(env[node]) - seen)


class StreamsStrategy(Strategy):
    """Opara end to end on CUDA: profile the kernels once, plan the streams, capture one CUDA Graph.

    ``policy`` picks the stream allocation (``streams.plan.POLICIES``). If the plan cannot be
    captured, it warns and captures the single-stream plan (the sequential CUDA Graph); if that fails
    too, it raises ``ExecutionError``: never a graph that runs part of the model.
    """

    strategy = "streams"

    def __init__(
        self,
        captured: Captured,
        policy: str = "opara",
        max_streams: int | None = None,
        memory: str = "reuse",
        copy_outputs: bool = True,
        use_cache: bool = True,
    ) -> None:
        if not torch.cuda.is_available():
            raise UnsupportedError("strategy 'streams' needs CUDA; on CPU use 'lanes' or 'sequential'")
        self.captured = captured
        # one replay at a time: the CUDA graph reads and writes its static buffers
        self.guard = CallGuard(f"{captured.name} (streams)", exclusive=True)
        gm = to_device(captured.gm, "cuda")
        refuse_unsafe(gm)  # before seconds of profiling; the executor checks again for direct callers
        static = [t.to("cuda") for t in captured.example_inputs]
        limits = GpuLimits.of_device()
        t0 = time.perf_counter()
        annotate(gm)
        found = profile_kernels(gm, static, f"{captured.graph_hash()}-{limits.name.replace(' ', '_')}",
                                use_cache=use_cache)  # fmt: skip
        t1 = time.perf_counter()
        dag = build_dag(gm)
        weight = {n: found[n].time_us if n in found else 0.0 for n in dag.nodes}
        demand = {n: node_demand(found[n], limits) for n in dag.nodes if n in found}
        bound = node_bounds(gm, list(dag.nodes), limits.ridge_flop_per_byte)
        self.plan = plan_streams(dag, policy, weight.__getitem__, bound, demand, max_streams)
        t2 = time.perf_counter()
        self.profile_s, self.plan_s = t1 - t0, t2 - t1
        try:
            self.executor = StreamsExecutor(gm, self.plan, static, memory, copy_outputs)
        except Exception as exc:  # noqa: BLE001 - capture errors come in many types; all fall back loudly
            if policy == "single":
                raise ExecutionError(f"{captured.name}: CUDA graph capture failed: {exc}") from exc
            warnings.warn(f"{captured.name}: {policy} streams could not be captured ({exc}); running the "
                          "sequential CUDA Graph instead", stacklevel=2)  # fmt: skip
            self.plan = plan_streams(dag, "single", weight.__getitem__)
            self.executor = StreamsExecutor(gm, self.plan, static, memory, copy_outputs)

    @property
    def label(self) -> str:
        """The strategy and the plan it runs, e.g. ``streams:opara`` (``streams:single`` after a fallback)."""
        return f"streams:{self.plan.policy}"

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[Any, ...]:
        with self.guard.call():
            return self.executor.run_flat(flat)

    def report(self) -> dict[str, Any]:
        return {
            "policy": self.plan.policy,
            "streams": self.plan.streams,
            "waits": len(self.plan.waits),
            "graph_bytes": self.executor.graph_bytes,
            "profile_s": self.profile_s,
            "plan_s": self.plan_s,
            "simulated_us": self.plan.makespan_us,
            "kernel_us": self.plan.sequential_us,
        }
