"""``StreamPlan``: every DAG node on a CUDA stream, a launch order, and the event waits between streams.

A stream runs its kernels in launch order (FIFO), so an edge inside one stream needs nothing. An edge
across streams needs the consumer's stream to wait on an event the producer's stream recorded after
the producer. Waits are derived with vector clocks: stream s knows how far into every other stream it
has synchronised, directly or through the events it waited on, and a wait that adds nothing is dropped.
``verify`` recomputes that knowledge from the waits alone and proves every edge ordered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pathweave.analysis.dag import Dag
from pathweave.errors import PlanError, UnsupportedError
from pathweave.streams.alloc import (
    allocate_critical,
    allocate_nimble,
    allocate_opara,
    allocate_wavefront,
    depths,
    wave_barriers,
)
from pathweave.streams.launch_order import launch_order

#: "single" puts everything on one stream in graph order: the sequential CUDA Graph, as a plan
POLICIES = ("opara", "critical", "nimble", "wavefront", "single")
#: an event record + wait between streams inside a CUDA graph, a few microseconds
SYNC_US = 3.0


@dataclass(frozen=True)
class StreamPlan:
    """``order[i]`` is launched on stream ``stream[i]``; before launching consumer c, its stream waits on
    the event recorded after producer p, for each (p, c) in ``waits``. ``makespan_us`` is simulated with
    unlimited SMs (an upper bound on the overlap the GPU can give)."""

    policy: str
    order: tuple[str, ...]
    stream: tuple[int, ...]
    waits: tuple[tuple[str, str], ...]
    makespan_us: float
    sequential_us: float

    @property
    def streams(self) -> int:
        return max(self.stream, default=-1) + 1

    def stream_of(self) -> dict[str, int]:
        return dict(zip(self.order, self.stream, strict=True))

    def recorded(self) -> tuple[str, ...]:
        """Nodes after which an event is recorded (someone waits on it), in launch order."""
        waited = {p for p, _ in self.waits}
        return tuple(n for n in self.order if n in waited)

    def verify(self, dag: Dag, extra: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """Every node launched once, in a topological order; every edge (and ``extra`` edge) ordered by
        its stream or by waits recorded before they are waited on."""
        if len(self.order) != len(self.stream):
            raise PlanError(f"{len(self.order)} nodes in the launch order but {len(self.stream)} streams")
        if sorted(self.order) != sorted(dag.nodes) or len(set(self.order)) != len(self.order):
            missing = sorted(set(dag.nodes) - set(self.order))[:5]
            raise PlanError(f"launch order is not a permutation of the graph's nodes (missing {missing})")
        at = {n: i for i, n in enumerate(self.order)}
        for n in dag.nodes:
            late = [p for p in dag.preds[n] if at[p] > at[n]]
            if late:
                raise PlanError(f"node {n} is launched before its input {late[0]}")
        sof = self.stream_of()
        for p, c in self.waits:
            if at[p] >= at[c]:  # waiting on an event not yet recorded does not wait at all in CUDA
                raise PlanError(f"{c} waits on the event of {p}, which is launched after it")
            if sof[p] == sof[c]:
                raise PlanError(f"{c} waits on {p} on its own stream {sof[p]}")
        clock, pos = _clocks(self.order, sof, self.waits, self.streams)
        for n in dag.nodes:
            for p in (*dag.preds[n], *(extra or {}).get(n, ())):
                if clock[n][sof[p]] < pos[p]:
                    raise PlanError(
                        f"edge {p} -> {n}: stream {sof[n]} never synchronises with {p} on stream {sof[p]}"
                    )

    def summary(self) -> str:
        return (
            f"{self.policy}: {len(self.order)} nodes on {self.streams} streams, {len(self.waits)} event "
            f"waits; simulated {self.makespan_us:.0f} us vs {self.sequential_us:.0f} us on one stream"
        )

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "order": list(self.order),
            "stream": list(self.stream),
            "waits": [list(w) for w in self.waits],
            "makespan_us": self.makespan_us,
            "sequential_us": self.sequential_us,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> StreamPlan:
        return cls(
            str(d["policy"]),
            tuple(d["order"]),
            tuple(int(s) for s in d["stream"]),
            tuple((str(p), str(c)) for p, c in d["waits"]),
            float(d["makespan_us"]),
            float(d["sequential_us"]),
        )


def waits_into(waits: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    """Consumer -> the producers whose events its stream waits on, in the plan's order."""
    into: dict[str, list[str]] = {}
    for p, c in waits:
        into.setdefault(c, []).append(p)
    return into


def _clocks(
    order: tuple[str, ...], sof: Mapping[str, int], waits: tuple[tuple[str, str], ...], streams: int
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Vector clock of every node (how far into each stream it is ordered after) and its stream position."""
    waits_of = waits_into(waits)
    stream_clock = [[-1] * streams for _ in range(streams)]
    clock: dict[str, list[int]] = {}
    pos: dict[str, int] = {}
    for n in order:
        s = sof[n]
        for p in waits_of.get(n, ()):
            stream_clock[s] = [max(a, b) for a, b in zip(stream_clock[s], clock[p], strict=True)]
        pos[n] = stream_clock[s][s] + 1
        stream_clock[s][s] = pos[n]
        clock[n] = list(stream_clock[s])
    return clock, pos


def derive_waits(
    order: tuple[str, ...],
    sof: Mapping[str, int],
    deps: Mapping[str, tuple[str, ...]],
    streams: int,
) -> tuple[tuple[str, str], ...]:
    """The waits that order every dependency, each kept only if the stream does not know it already."""
    at = {n: i for i, n in enumerate(order)}
    stream_clock = [[-1] * streams for _ in range(streams)]
    clock: dict[str, list[int]] = {}
    pos: dict[str, int] = {}
    waits: list[tuple[str, str]] = []
    for n in order:
        s = sof[n]
        for p in sorted(set(deps.get(n, ())), key=lambda q: -at[q]):  # latest first: it knows the most
            if sof[p] != s and stream_clock[s][sof[p]] < pos[p]:
                waits.append((p, n))
                stream_clock[s] = [max(a, b) for a, b in zip(stream_clock[s], clock[p], strict=True)]
        pos[n] = stream_clock[s][s] + 1
        stream_clock[s][s] = pos[n]
        clock[n] = list(stream_clock[s])
    return tuple(waits)


def simulate(
    order: tuple[str, ...],
    sof: Mapping[str, int],
    waits: tuple[tuple[str, str], ...],
    weight: Callable[[str], float],
    sync_us: float = SYNC_US,
) -> float:
    """Makespan when each stream runs its kernels in order and the GPU never runs out of SMs."""
    waits_of = waits_into(waits)
    free: dict[int, float] = {}
    finish: dict[str, float] = {}
    for n in order:
        ready = max((finish[p] + sync_us for p in waits_of.get(n, ())), default=0.0)
        finish[n] = max(free.get(sof[n], 0.0), ready) + weight(n)
        free[sof[n]] = finish[n]
    return max(finish.values(), default=0.0)


def plan_streams(
    dag: Dag,
    policy: str = "opara",
    weight: Callable[[str], float] | None = None,
    bound: Mapping[str, str] | None = None,
    demand: Mapping[str, float] | None = None,
    max_streams: int | None = None,
    sync_us: float = SYNC_US,
) -> StreamPlan:
    """Allocate streams by ``policy``, order the launches, derive the waits, verify, simulate."""
    weight = weight or (lambda n: 1.0)
    deps: Mapping[str, tuple[str, ...]] = dag.preds
    if policy == "opara":
        sof = allocate_opara(dag, weight, max_streams)
        order = launch_order(dag, bound or {}, demand or {})
    elif policy == "critical":
        sof = allocate_critical(dag, weight, sync_us, max_streams)
        order = launch_order(dag, bound or {}, demand or {})
    elif policy == "single":
        sof, order = dict.fromkeys(dag.nodes, 0), dag.nodes
    elif policy == "nimble":
        sof, order = allocate_nimble(dag), dag.nodes
    elif policy == "wavefront":
        sof = allocate_wavefront(dag, max_streams)
        depth = depths(dag)
        order = tuple(sorted(dag.nodes, key=lambda n: depth[n]))  # stable: graph order inside a wave
        barrier = wave_barriers(dag)
        deps = {n: (*dag.preds[n], *barrier[n]) for n in dag.nodes}
    else:
        raise UnsupportedError(f"unknown stream policy {policy!r}; choose one of {', '.join(POLICIES)}")
    streams = max(sof.values(), default=-1) + 1
    waits = derive_waits(tuple(order), sof, deps, streams)
    plan = StreamPlan(
        policy,
        tuple(order),
        tuple(sof[n] for n in order),
        waits,
        simulate(tuple(order), sof, waits, weight, sync_us),
        float(sum(weight(n) for n in dag.nodes)),
    )
    plan.verify(dag, deps if policy == "wavefront" else None)
    return plan
