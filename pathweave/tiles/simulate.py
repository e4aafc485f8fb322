"""Past the cores we have, by simulation: a tile graph replayed with each task's measured cost under the
native runtime's own scheduling policy, and under a layer-by-layer barrier schedule, against the
critical-path and work bounds (``pathweave simulate MODEL --cores 1,2,4,...``).

The policy is ``native/tile_runtime.c``'s, step for step: the roots are dealt round-robin to the
workers' rows; a worker takes the child it kept from its last task, else pops its own row (deepest depth
column first, last pushed first), else steals from the rows after its own in order; when a task ends its
children are counted down in ascending order, the first that becomes ready is kept, the others are
pushed onto the worker's row; a worker that found nothing waits until something is pushed.

What the model knows of time is measured (``TaskCosts``, filled by ``calibrate``), none of it copied
from the C source, so it follows the runtime when its costs change:
- each task's kernel time, from traced 1-worker inferences (median per tile);
- ``overhead_ns``: a worker's time between the end of one task and the start of its next (counting
  down children, pushing, popping, the trace's clock reads), from the same traces;
- ``wake_ns``: how long a waiting worker takes to start a task that became ready (or the inference's
  first task on workers 1..), median over traced 2-worker inferences;
- ``fixed_ns``: per inference, outside the tiles (inputs copied in, outputs out, the call itself);
- the slow-down: the kernels' summed time in traced 2-worker inferences over their 1-worker time (a
  tile whose inputs another core wrote, shared cache and memory, cores lost to other processes), per
  pair of runs taken in turns with each other and with the timed ones (``calibrate``).
Assumptions: on P >= 2 workers every kernel takes its 1-worker time times the slow-down measured on 2
(the rows also give the time without it: no contention at all); it does not grow with P, which is
optimistic where memory bandwidth runs out; one wake-up latency for every wait; no lock contention
growing with the worker count. The barrier schedule deals each layer's tiles to the first free worker
(a dynamic parallel-for) and pays a barrier after each layer (``--barrier-us``; by default ``wake_ns``,
what this runtime's waiting workers take to start). The bounds are those of the same task costs
without any scheduling cost: no schedule on P workers beats max(critical path, work / P).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pathweave.errors import InputError
from pathweave.machine import describe, loadavg
from pathweave.report.progress import Progress
from pathweave.report.tables import table
from pathweave.tiles.abi import MAX_COLUMNS
from pathweave.tiles.graph import TileGraph, transpose_csr
from pathweave.tiles.profile import TracedRun, traced_runs
from pathweave.tiles.report import measure_scaling
from pathweave.tiles.runtime import scale_columns

if TYPE_CHECKING:
    from pathweave.tiles.strategy import TilesStrategy


@dataclass(frozen=True)
class TaskGraph:
    """What the scheduler sees of a tile graph. Tasks are in topological order; a layer's tasks are
    contiguous and every parent lies in an earlier layer (the barrier schedule runs layers in order)."""

    children_indptr: np.ndarray  # int [T + 1]
    children_indices: np.ndarray  # int [E], ascending within a task (the order the runtime walks them)
    parents_count: np.ndarray  # int [T]
    column: np.ndarray  # int [T], the runtime's depth column 0..63 (deeper runs first)
    layer_start: np.ndarray  # int [L + 1], the first task of each layer

    @property
    def num_tasks(self) -> int:
        return len(self.parents_count)

    def children(self, task: int) -> np.ndarray:
        return self.children_indices[self.children_indptr[task] : self.children_indptr[task + 1]]

    @classmethod
    def from_tile_graph(cls, graph: TileGraph) -> TaskGraph:
        """The tasks of ``graph`` with the depth columns ``TileRuntime.from_graph`` gives them."""
        return cls(graph.children_indptr.astype(np.int64), graph.children_indices.astype(np.int64),
                   np.diff(graph.parents_indptr).astype(np.int64),
                   scale_columns(graph.tile_depths() - 1).astype(np.int64),
                   graph.layer_tile_start.astype(np.int64))  # fmt: skip

    @classmethod
    def from_parents(cls, parents: list[list[int]], layer_start: list[int] | None = None) -> TaskGraph:
        """Tasks given by their parents (in topological order); ``layer_start`` as in the class (default:
        every task its own layer)."""
        n = len(parents)
        starts = np.asarray(layer_start if layer_start is not None else range(n + 1), dtype=np.int64)
        if starts[0] != 0 or starts[-1] != n or np.any(np.diff(starts) < 1):
            raise InputError(f"layer_start must rise from 0 to {n}, at least one task per layer")
        layer = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
        depth = np.zeros(n, dtype=np.int64)
        for t, ps in enumerate(parents):
            if any(not 0 <= p < t or layer[p] >= layer[t] for p in ps):
                raise InputError(f"task {t}: every parent must be an earlier task of an earlier layer")
            depth[t] = 1 + max((int(depth[p]) for p in ps), default=-1)
        ptr = np.concatenate([[0], np.cumsum([len(ps) for ps in parents])]).astype(np.int32)
        idx = np.fromiter((p for ps in parents for p in sorted(set(ps))), dtype=np.int32, count=int(ptr[-1]))
        c_ptr, c_idx = transpose_csr(ptr, idx, n)
        return cls(c_ptr.astype(np.int64), c_idx.astype(np.int64), np.diff(ptr).astype(np.int64),
                   scale_columns(depth).astype(np.int64), starts)  # fmt: skip


@dataclass(frozen=True)
class TaskCosts:
    """Measured time of the tasks and of the runtime around them (ns; see the module docstring)."""

    kernel_ns: np.ndarray  # float [T]
    overhead_ns: float = 0.0
    wake_ns: float = 0.0
    fixed_ns: float = 0.0

    def slowed(self, factor: float) -> TaskCosts:
        """The same costs with every kernel ``factor`` times as long (contention on more workers)."""
        return TaskCosts(self.kernel_ns * factor, self.overhead_ns, self.wake_ns, self.fixed_ns)


@dataclass(frozen=True)
class Schedule:
    """One simulated inference: where and when each task ran, from the inference's start (fixed cost
    excluded), the last task's end, and how many tasks were stolen."""

    start_ns: np.ndarray
    worker: np.ndarray
    makespan_ns: float
    steals: int


def _check(graph: TaskGraph, costs: TaskCosts, workers: int) -> None:
    if not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers must be an int >= 1, not {workers!r}")
    if costs.kernel_ns.shape != (graph.num_tasks,) or np.any(costs.kernel_ns < 0):
        raise InputError(f"kernel_ns must hold {graph.num_tasks} times >= 0, not {costs.kernel_ns.shape}")
    if min(costs.overhead_ns, costs.wake_ns, costs.fixed_ns) < 0:
        raise InputError("overhead_ns, wake_ns and fixed_ns must be >= 0")


class _Engines:
    """The runtime's workers as a discrete-event simulation: events are a task's end (its children
    become ready) and a worker's look for its next task; ends come first at equal times."""

    _END, _LOOK = 0, 1

    def __init__(self, graph: TaskGraph, costs: TaskCosts, workers: int) -> None:
        self.g, self.c, self.p = graph, costs, workers
        self.pending = graph.parents_count.copy()
        self.rows: list[list[list[int]]] = [[[] for _ in range(MAX_COLUMNS)] for _ in range(workers)]
        self.kept = [-1] * workers
        self.waiting: list[int] = []
        self.events: list[tuple[float, int, int, int]] = []
        self.start = np.full(graph.num_tasks, -1.0)
        self.worker = np.full(graph.num_tasks, -1, dtype=np.int64)
        self.steals = 0
        self.end = 0.0

    def run(self) -> Schedule:
        roots = np.flatnonzero(self.g.parents_count == 0)
        for i, root in enumerate(roots):
            self.rows[i % self.p][int(self.g.column[root])].append(int(root))
        for w in range(self.p):  # the caller is worker 0; the others see the new inference after wake_ns
            heapq.heappush(self.events, (0.0 if w == 0 else self.c.wake_ns, self._LOOK, w, -1))
        while self.events:
            now, kind, w, task = heapq.heappop(self.events)
            if kind == self._END:
                self._finish(now, w, task)
            else:
                self._look(now, w)
        return Schedule(self.start, self.worker, self.end, self.steals)

    def _pop(self, w: int) -> int:
        row = self.rows[w]
        for col in range(MAX_COLUMNS - 1, -1, -1):
            if row[col]:
                return row[col].pop()
        return -1

    def _take(self, w: int) -> int:
        task, self.kept[w] = self.kept[w], -1
        if task < 0:
            task = self._pop(w)
        for i in range(1, self.p):
            if task >= 0:
                break
            task = self._pop((w + i) % self.p)
            self.steals += task >= 0
        return task

    def _look(self, now: float, w: int) -> None:
        task = self._take(w)
        if task < 0:
            self.waiting.append(w)
            return
        self.start[task], self.worker[task] = now, w
        heapq.heappush(self.events, (now + float(self.c.kernel_ns[task]), self._END, w, task))

    def _finish(self, now: float, w: int, task: int) -> None:
        self.end = max(self.end, now)
        pushed = False
        for child in self.g.children(task):
            self.pending[child] -= 1
            if self.pending[child] == 0:
                if self.kept[w] < 0:
                    self.kept[w] = int(child)
                else:
                    self.rows[w][int(self.g.column[child])].append(int(child))
                    pushed = True
        if pushed:  # every waiting worker sees it and tries; those that find nothing wait again
            for v in sorted(self.waiting):
                heapq.heappush(self.events, (now + self.c.wake_ns, self._LOOK, v, -1))
            self.waiting.clear()
        heapq.heappush(self.events, (now + self.c.overhead_ns, self._LOOK, w, -1))


def simulate_runtime(graph: TaskGraph, costs: TaskCosts, workers: int) -> Schedule:
    """One inference under the native runtime's policy on ``workers`` engines (module docstring)."""
    _check(graph, costs, workers)
    schedule = _Engines(graph, costs, workers).run()
    if np.any(schedule.worker < 0):  # cannot happen on a graph that passed from_parents' checks
        raise InputError("the simulated inference left tasks unrun: the graph has a cycle")
    return schedule


def simulate_barrier(
    graph: TaskGraph, costs: TaskCosts, workers: int, barrier_ns: float | None = None
) -> float:
    """ns of one inference run layer by layer: each layer's tasks in order to the first free worker,
    then a barrier of ``barrier_ns`` on more than one worker (None: ``wake_ns``, the time this runtime's
    waiting workers take to start); the fixed cost excluded."""
    _check(graph, costs, workers)
    if barrier_ns is not None and not barrier_ns >= 0:
        raise InputError(f"barrier_ns must be >= 0, not {barrier_ns!r}")
    wait = (costs.wake_ns if barrier_ns is None else barrier_ns) if workers > 1 else 0.0
    t = 0.0
    starts = graph.layer_start
    for layer in range(len(starts) - 1):
        begin = t + (costs.overhead_ns + wait if layer else 0.0)
        free = [begin] * workers
        t = begin
        for task in range(int(starts[layer]), int(starts[layer + 1])):
            end = heapq.heappop(free) + float(costs.kernel_ns[task])
            t = max(t, end)
            heapq.heappush(free, end + costs.overhead_ns)
    return t


def critical_path_ns(graph: TaskGraph, costs: TaskCosts) -> float:
    """The costliest chain of kernels: no schedule on any number of workers is shorter."""
    return float(_finish_times(graph, costs)[0].max(initial=0.0))


def critical_tasks(graph: TaskGraph, costs: TaskCosts) -> list[int]:
    """The tasks of the costliest chain, first to last (where scaling stops: make them cheaper or cut
    them into more tiles)."""
    finish, best_parent = _finish_times(graph, costs)
    if not len(finish):
        return []
    chain = [int(np.argmax(finish))]
    while best_parent[chain[-1]] >= 0:
        chain.append(int(best_parent[chain[-1]]))
    return chain[::-1]


def _finish_times(graph: TaskGraph, costs: TaskCosts) -> tuple[np.ndarray, np.ndarray]:
    """Each task's end on unlimited workers with no scheduling cost, and its parent that ends last."""
    finish = costs.kernel_ns.astype(np.float64).copy()
    ready = np.zeros(graph.num_tasks)
    best_parent = np.full(graph.num_tasks, -1, dtype=np.int64)
    for task in range(graph.num_tasks):
        finish[task] += ready[task]
        kids = graph.children(task)
        later = finish[task] > ready[kids]
        ready[kids[later]] = finish[task]
        best_parent[kids[later]] = task
    return finish, best_parent


def work_ns(costs: TaskCosts) -> float:
    """Every kernel's time summed: no schedule on P workers is shorter than this over P."""
    return float(costs.kernel_ns.sum())


# ---- the costs, measured ------------------------------------------------------------------------------


def costs_from_traces(graph: TaskGraph, one: list[TracedRun], two: list[TracedRun]) -> TaskCosts:
    """The model's costs from traced inferences on 1 worker (``one``: kernels, overhead, fixed cost) and
    on 2 (``two``: the wake-up latency; none given: 0). Medians over the runs, against other load."""
    if not one:
        raise InputError("the costs need at least one traced inference on 1 worker")
    kernels = np.median([r.times[:, 1] - r.times[:, 0] for r in one], axis=0).astype(np.float64)
    overheads, fixed = [], []
    for r in one:
        order = np.argsort(r.times[:, 0], kind="stable")
        start, end = r.times[order, 0], r.times[order, 1]
        overheads.append(float((start[1:] - end[:-1]).sum()) / max(len(start) - 1, 1))
        fixed.append(float(start[0] - r.called_ns + r.returned_ns - end.max()))
    waits = [_waits(graph, r, float(np.median(overheads))) for r in two]
    wake = float(np.median(np.concatenate(waits))) if waits and sum(map(len, waits)) else 0.0
    return TaskCosts(kernels, float(np.median(overheads)), max(wake, 0.0), float(np.median(fixed)))


def _waits(graph: TaskGraph, run: TracedRun, overhead_ns: float) -> np.ndarray:
    """For every task whose worker was waiting when it became ready (its parents' last end; a root:
    the inference's first start): from then to its start. The very first task waited for nobody."""
    start, end = run.times[:, 0].astype(np.float64), run.times[:, 1].astype(np.float64)
    first = float(start.min())
    ready = np.full(graph.num_tasks, first)
    parent = np.repeat(np.arange(graph.num_tasks), np.diff(graph.children_indptr))
    np.maximum.at(ready, graph.children_indices, end[parent])
    before = np.full(graph.num_tasks, -np.inf)  # the end of the worker's task before this one
    for w in np.unique(run.workers):
        mine = np.flatnonzero(run.workers == w)
        mine = mine[np.argsort(start[mine], kind="stable")]
        before[mine[1:]] = end[mine[:-1]]
    waited = (before + overhead_ns < ready) & (start > first)
    return (start - ready)[waited]


def slowdown(one: list[TracedRun], two: list[TracedRun]) -> float:
    """How much slower the same tasks ran on 2 workers (``two``) than on 1 (``one``): the median over pairs
    of runs taken in turns of their kernels' summed times, one over the other (1.0 without runs). Paired,
    as a host whose speed jumps between two levels within seconds (a 2-core AVX2 VM: 37 and 48 ms per
    GoogLeNet inference on 1 worker) gave ratios of medians from 1.17x to 1.56x in runs minutes apart."""
    sums = [(_kernel_sum(a), _kernel_sum(b)) for a, b in zip(one, two, strict=False)]  # the shorter's pairs
    ratios = [b / a for a, b in sums if a > 0]
    return float(np.median(ratios)) if ratios else 1.0


def _kernel_sum(run: TracedRun) -> float:
    """The run's kernel times summed (ns)."""
    return float((run.times[:, 1] - run.times[:, 0]).sum())


def replay_error(graph: TaskGraph, costs: TaskCosts, traced: list[TracedRun]) -> float:
    """Median % by which the policy, replayed with each traced run's own kernel times (and the model's
    overhead and wake-up), misses that run's first-to-last-tile span: the scheduling model's own error,
    apart from what the kernels cost."""
    errors = []
    for r in traced:
        own = TaskCosts((r.times[:, 1] - r.times[:, 0]).astype(np.float64), costs.overhead_ns, costs.wake_ns)
        span = float(r.times[:, 1].max() - r.times[:, 0].min())
        workers = int(r.workers.max()) + 1
        errors.append(100 * (simulate_runtime(graph, own, workers).makespan_ns - span) / max(span, 1.0))
    return float(np.median(errors)) if errors else 0.0


# ---- the report ---------------------------------------------------------------------------------------

ASSUMPTIONS = (
    "task costs measured on 1 worker; on P >= 2 each kernel takes that times the slow-down measured on 2 "
    "workers (not growing with P: optimistic where memory bandwidth runs out; 'no contention' drops it); "
    "a measured overhead per task and wake-up latency per wait; the barrier schedule deals each layer's "
    "tiles to the first free worker and pays one barrier per layer (default: a wake-up); bounds: the same "
    "costs, no scheduling"
)


def parse_cores(text: str) -> list[int]:
    """ "1,2,4" as sorted core counts, 1 and 2 always included (the measured ones)."""
    try:
        counts = sorted({1, 2, *(int(part) for part in text.split(",") if part.strip())})
    except ValueError as exc:
        raise InputError(f"--cores takes comma-separated core counts, got {text!r}") from exc
    if counts[0] < 1 or counts[-1] > 4096:
        raise InputError(f"core counts must be 1..4096, got {text!r}")
    return counts


@dataclass(frozen=True)
class Calibration:
    graph: TaskGraph
    costs: TaskCosts  # on 1 worker
    slowdown: float  # the kernels on 2 workers over 1 (``slowdown``)
    replay_error_pct: float  # ``replay_error`` of the traced 2-worker runs


def calibrate(
    strategy: TilesStrategy, runs: int, rounds: int = 0, progress: Progress | None = None
) -> tuple[Calibration, dict[int, float]]:
    """The strategy's task graph and costs from ``runs`` traced inferences on 1 worker and on 2, and the
    median time of ``rounds`` untraced ones on each (``measure_scaling``'s, by worker count; empty for
    none), taken in turns: round i measures each count once, then traces each once, which count first
    alternating. Measured first and traced after, a host whose speed drifts over minutes put the two in
    different phases: GoogLeNet's 1-worker time simulated 18% over its measured one, NASNet's 30% under,
    on a 2-core AVX2 VM whose traced and timed inferences, taken in turns, agreed within 2.5%. Leaves the
    strategy on its own worker count."""
    if runs < 1 or rounds < 0:
        raise InputError(f"the calibration needs runs >= 1 and rounds >= 0, got {runs} and {rounds}")
    graph = TaskGraph.from_tile_graph(strategy.graph)
    inputs = list(strategy.captured.example_inputs)
    threads = strategy.threads
    traces: dict[int, list[TracedRun]] = {1: [], 2: []}
    times: dict[int, list[float]] = {1: [], 2: []}
    try:
        for i in range(max(runs, rounds)):
            if i < rounds:  # 1 worker first in even rounds, 2 in odd ones, as the traced runs below
                for row in measure_scaling(strategy, [1, 2], 1, first=i):
                    times[row.workers].append(row.median_ms)
            if i < runs:
                for n in (1, 2) if i % 2 == 0 else (2, 1):
                    strategy.set_workers(n)
                    warmup = 3 if i == 0 else 1  # the engines just started or idle, as measure_scaling's
                    traces[n] += traced_runs(strategy.runtime, lambda: strategy.run_flat(inputs), 1, warmup)
            if progress is not None:
                progress.step(f"round {i + 1}")
    finally:
        strategy.set_workers(threads)
    costs = costs_from_traces(graph, traces[1], traces[2])
    cal = Calibration(graph, costs, slowdown(traces[1], traces[2]), replay_error(graph, costs, traces[2]))
    return cal, {n: float(np.median(t)) for n, t in times.items() if t}


def simulate_rows(
    cal: Calibration, cores: list[int], measured: dict[int, float], barrier_ns: float | None = None
) -> list[dict[str, Any]]:
    """Per core count: both schedules (``barrier_ns`` as in ``simulate_barrier``), both bounds and the
    runtime without the slow-down (ms, the fixed cost added to each), the runtime's steals, and where
    measured (ms by core count) the measured time and the runtime model's error."""
    ms = lambda ns: (ns + cal.costs.fixed_ns) / 1e6  # noqa: E731
    rows = []
    for p in cores:
        costs = cal.costs if p == 1 else cal.costs.slowed(cal.slowdown)
        schedule = simulate_runtime(cal.graph, costs, p)
        row: dict[str, Any] = {
            "cores": p, "runtime_ms": ms(schedule.makespan_ns),
            "no_contention_ms": ms(simulate_runtime(cal.graph, cal.costs, p).makespan_ns),
            "barrier_ms": ms(simulate_barrier(cal.graph, costs, p, barrier_ns)),
            "critical_path_ms": ms(critical_path_ns(cal.graph, costs)),
            "work_bound_ms": ms(work_ns(costs) / p), "steals": schedule.steals,
        }  # fmt: skip
        if p in measured:
            row["measured_ms"] = measured[p]
            row["error_pct"] = 100 * (row["runtime_ms"] - measured[p]) / measured[p]
        rows.append(row)
    return rows


def simulation_report(
    strategy: TilesStrategy,
    cores: list[int],
    rounds: int,
    runs: int,
    barrier_ns: float | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Measured 1- and 2-core times (medians of untraced inferences), the costs calibrated on traced
    runs taken in turns with them (``calibrate``), and the simulated rows, as one JSON-ready dict
    (``format_simulation`` prints it)."""
    load_before = loadavg()
    progress = Progress(f"simulate {strategy.captured.name}", max(rounds, runs), enabled=show_progress)
    cal, measured = calibrate(strategy, runs, rounds, progress)
    inputs = strategy.captured.example_inputs
    path = critical_tasks(cal.graph, cal.costs)
    costs = {"work_ms": work_ns(cal.costs) / 1e6, "overhead_ns": cal.costs.overhead_ns,
             "wake_ns": cal.costs.wake_ns, "fixed_ms": cal.costs.fixed_ns / 1e6, "slowdown_2": cal.slowdown,
             "replay_error_pct": cal.replay_error_pct,
             "barrier_ns": cal.costs.wake_ns if barrier_ns is None else barrier_ns}  # fmt: skip
    return {
        "model": strategy.captured.name,
        "batch": int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1,
        "rounds": rounds,
        "traced_runs": runs,
        "tiles": cal.graph.num_tasks,
        "edges": len(cal.graph.children_indices),
        "layers": len(cal.graph.layer_start) - 1,
        "costs": costs,
        "critical_path": _path_layers(strategy.graph, cal.costs, path),
        "rows": simulate_rows(cal, cores, measured, barrier_ns),
        "assumptions": ASSUMPTIONS,
        "machine": describe(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _path_layers(graph: TileGraph, costs: TaskCosts, path: list[int], top: int = 8) -> dict[str, Any]:
    """The critical path's tiles and layers, and its ``top`` costliest layers (ms of their tiles on it)."""
    on_path: dict[str, float] = {}
    for task in path:
        name = str(graph.layer_names[graph.tile_layer[task]])
        on_path[name] = on_path.get(name, 0.0) + float(costs.kernel_ns[task]) / 1e6
    costliest = dict(sorted(on_path.items(), key=lambda kv: -kv[1])[:top])
    return {"tiles": len(path), "layers": len(on_path), "costliest_ms": costliest}


def format_simulation(d: dict[str, Any]) -> str:
    """The report of ``simulation_report``: the measured parameters, then one row per core count."""
    c, m = d["costs"], d["machine"]
    head = (
        f"{d['model']}  batch {d['batch']}: {d['layers']} layers, {d['tiles']} tiles, {d['edges']} edges\n"
        f"{m['cpu']} ({m.get('isa', '?')}), {m['cores']} cores, {d['rounds']} rounds, {d['traced_runs']} "
        f"traced runs, load {d['loadavg_before']} -> {d['loadavg_after']}, {d['date']}\n"
        f"measured: kernels {c['work_ms']:.2f} ms on 1 worker, {c['slowdown_2']:.2f}x that on 2; overhead "
        f"{c['overhead_ns']:.0f} ns per task, wake-up {c['wake_ns'] / 1e3:.1f} us, fixed "
        f"{c['fixed_ms']:.3f} ms per inference; a barrier {c['barrier_ns'] / 1e3:.1f} us; the traced "
        f"2-worker runs replayed with their own kernel times: {c['replay_error_pct']:+.1f}%"
    )
    header = ["cores", "runtime ms", "no contention", "barrier ms", "critical path", "work/P", "steals",
              "measured ms", "error"]  # fmt: skip
    rows = [
        [str(r["cores"]), f"{r['runtime_ms']:.2f}", f"{r['no_contention_ms']:.2f}", f"{r['barrier_ms']:.2f}",
         f"{r['critical_path_ms']:.2f}", f"{r['work_bound_ms']:.2f}", str(r["steals"]),
         f"{r['measured_ms']:.2f}" if "measured_ms" in r else "-",
         f"{r['error_pct']:+.1f}%" if "error_pct" in r else "-"]
        for r in d["rows"]
    ]  # fmt: skip
    cp = d["critical_path"]
    costliest = ", ".join(f"{name} {ms:.2f}" for name, ms in cp["costliest_ms"].items())
    path = (
        f"critical path on 1 worker: {cp['tiles']} tiles of {cp['layers']} layers; costliest ms: {costliest}"
    )
    return f"{head}\n\n{table(header, rows)}\n\n{path}\nassumptions: {d['assumptions']}"
