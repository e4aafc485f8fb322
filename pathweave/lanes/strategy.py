"""The strategies ``optimize`` returns, each a callable with the model's outputs."""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from pathweave.analysis.dag import build_dag
from pathweave.analysis.profile import measure_node_times
from pathweave.errors import InputError, PlanError
from pathweave.frontend.graph import Captured
from pathweave.lanes import replicate
from pathweave.lanes.executor import LanesExecutor, refuse_inplace
from pathweave.lanes.hyper import plan_hyper
from pathweave.lanes.plan import LanePlan
from pathweave.lanes.replicate import Split
from pathweave.meta import REPLICA, TIME_US
from pathweave.passes.pipeline import FAST_CPU
from pathweave.sequential import SequentialExecutor, _compare, intra_op_threads
from pathweave.stacks.strategy import StacksStrategy
from pathweave.strategy import CallGuard, Strategy


class LanesStrategy(Strategy):
    """Ramiel's clustering mapped onto lanes: the fast CPU rewrites first (the sequential executor
    builds and checks them), then one profiling run of the rewritten graph at one intra-op thread
    per lane, then the plan (verified), then the lanes executor."""

    strategy = "lanes"

    def __init__(
        self,
        captured: Captured,
        lanes: int | None = None,
        threads: int | None = None,
        clone: bool = True,
        pipeline: tuple[ModuleType, ...] = FAST_CPU,
        stacks: bool = False,
        node_times: dict[str, float] | None = None,
        check: bool = True,
    ) -> None:
        """``threads`` is the thread budget (default: torch's), ``lanes`` how many lanes share it (default:
        one intra-op thread per lane); ``pipeline`` the rewrites before planning (default: the fast CPU
        path; Ramiel's variants use none or pruning alone); ``clone`` allows bounded task cloning;
        ``stacks`` adds BrainSlug's stacks after the fast CPU path (``StacksStrategy``), so that each
        stack is one node to the clustering and runs on its lane's thread. ``node_times`` (microseconds
        per node of the rewritten graph, as ``saved_options`` gives them) replace the profiling run;
        ``check=False`` skips comparing the rewritten graph with the captured one (both for a saved plan
        loaded where it was measured and checked)."""
        refuse_inplace(captured.gm, captured.name)
        self.guard = CallGuard(f"{captured.name} (lanes)", exclusive=True)
        self.lanes, self.threads_per_lane = _lanes_and_threads(lanes, threads)
        self.captured = captured
        # weights packed for the thread count each lane runs with (see SequentialExecutor)
        self.sequential = sequential_path(captured, self.threads_per_lane, pipeline, stacks, check)
        self.passes = self.sequential.passes
        gm = self.sequential.gm
        self.node_times = _node_times(dataclasses.replace(captured, gm=gm), self.threads_per_lane, node_times)
        self.plan, self.cloned = _plan(gm, self.node_times, self.lanes, clone)
        self.executor = LanesExecutor(gm, self.plan, self.threads_per_lane)

    @property
    def batch_split(self) -> int:
        return 1

    def saved_options(self) -> dict[str, Any]:
        return {"node_times": dict(self.node_times)}

    def summary(self) -> str:
        return self._stacks_note() + self.plan.summary()

    def _stacks_note(self) -> str:
        seq = self.sequential
        return f"{len(seq.stacks)} stacks; " if isinstance(seq, StacksStrategy) else ""

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        with self.guard.call():  # the lanes' queues serve one call at a time
            return self.executor.run_flat(flat)

    def _free(self) -> None:
        self.executor.close()  # stops the lane threads


class HyperLanesStrategy(LanesStrategy):
    """Hyperclustering for batch > 1: ``sub`` is the model captured at the sub-batch size; its fast
    rewritten graph is replicated once per group of the batch (``lanes.replicate``), checked against
    the whole-batch graph, and the replicas are planned onto the lanes (``lanes.hyper``: plain,
    switched or ours, whichever simulates shortest)."""

    def __init__(
        self,
        captured: Captured,
        sub: Captured,
        split: Split,
        lanes: int | None = None,
        threads: int | None = None,
        stacks: bool = False,
        node_times: dict[str, float] | None = None,
        check: bool = True,
    ) -> None:
        refuse_inplace(captured.gm, captured.name)
        self.guard = CallGuard(f"{captured.name} (lanes)", exclusive=True)
        self.lanes, self.threads_per_lane = _lanes_and_threads(lanes, threads)
        self.captured, self.split, self.cloned = captured, split, 0
        self.sequential = sequential_path(sub, self.threads_per_lane, stacks=stacks, check=check)
        self.passes = self.sequential.passes
        sub_gm = self.sequential.gm
        self.node_times = sub_times = _node_times(dataclasses.replace(sub, gm=sub_gm), self.threads_per_lane,
                                                  node_times)  # fmt: skip
        with intra_op_threads(self.threads_per_lane):
            gm = replicate.apply(self.sequential.gm, captured.gm, split)
            _check_replicated(gm, captured)
        replica = {n.name: n.meta[REPLICA] for n in gm.graph.nodes if REPLICA in n.meta}
        dag = build_dag(gm)

        def weight(n: str) -> float:
            return sub_times.get(replica[n].of, 0.0) if n in replica else 0.0

        sub_dag = build_dag(self.sequential.gm)
        self.variant, self.variants = plan_hyper(dag, replica, sub_dag, weight, self.lanes)
        self.plan = self.variants[self.variant]
        self.plan.verify(dag)
        self.executor = LanesExecutor(gm, self.plan, self.threads_per_lane)

    @property
    def batch_split(self) -> int:
        return self.split.copies

    def summary(self) -> str:
        sims = ", ".join(f"{v} {p.makespan_us / 1e3:.1f}" for v, p in self.variants.items())
        groups = f"{self.split.copies} groups of {self.split.sub_batch}"
        return (
            f"{self._stacks_note()}hyperclusters: {groups}, variant {self.variant} (simulated ms: {sims}); "
            f"{self.plan.summary()}"
        )


def build_lanes(
    captured: Captured,
    recapture: Callable[[tuple[torch.Tensor, ...]], Captured] | None = None,
    threads: int | None = None,
    stacks: bool = False,
    lanes: int | None = None,
    clone: bool = True,
    node_times: dict[str, float] | None = None,
    check: bool = True,
) -> LanesStrategy:
    """Lanes for ``captured``; for a batch > 1 that splits into groups, hyperclustered lanes, with
    ``recapture(inputs)`` capturing the model at the sub-batch size. Where that is not possible (no
    ``recapture``, a graph fixed to one batch size, an output without a batch dimension), plain lanes
    on the whole batch, with a warning saying why. ``stacks``, ``lanes``, ``clone``: see
    ``LanesStrategy`` (hyperclusters do not clone); ``node_times``, ``check``: see ``LanesStrategy``."""
    saved = {"node_times": node_times, "check": check}
    split = replicate.propose(captured.example_inputs, _budget(threads))
    if split is None:
        return LanesStrategy(captured, lanes=lanes, threads=threads, clone=clone, stacks=stacks, **saved)
    why = "the model cannot be captured again at the sub-batch size"
    if recapture is not None:
        try:
            sub = recapture(split.slices(captured.example_inputs, 0))
            return HyperLanesStrategy(
                captured, sub, split, lanes=lanes, threads=threads, stacks=stacks, **saved
            )
        except Exception as exc:  # any failure here costs the hyperclusters, never the answer
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    warnings.warn(f"{captured.name}: no hyperclustering for batch {split.batch}, plain lanes ({why})",
                  stacklevel=2)  # fmt: skip
    return LanesStrategy(captured, lanes=lanes, threads=threads, clone=clone, stacks=stacks, **saved)


def sequential_path(
    captured: Captured,
    threads: int | None = None,
    pipeline: tuple[ModuleType, ...] = FAST_CPU,
    stacks: bool = False,
    check: bool = True,
) -> SequentialExecutor:
    """The checked rewritten graph on CPU (lanes are planned over it, "auto" times it): ``pipeline``'s,
    or with ``stacks`` the fast CPU path and the stacks (``StacksStrategy``, which warns and goes on
    without them where they cannot be built)."""
    if not stacks:
        return SequentialExecutor(captured, threads=threads, pipeline=pipeline, check=check)
    if pipeline != FAST_CPU:
        raise InputError("stacks join the fast CPU pipeline only, not another one")
    return StacksStrategy(captured, threads=threads)


def _node_times(captured: Captured, threads: int, given: dict[str, float] | None) -> dict[str, float]:
    """Microseconds per node of ``captured``'s (rewritten) graph: ``given`` where it names every node the
    profile would (a saved plan's), else measured at ``threads`` intra-op threads."""
    names = [n.name for n in captured.gm.graph.nodes]
    if given is not None and all(name in given for name in names):
        times = {name: float(given[name]) for name in names}
        for node in captured.gm.graph.nodes:
            node.meta[TIME_US] = times[node.name]
        return times
    with intra_op_threads(threads):
        return measure_node_times(captured)


def _budget(threads: int | None) -> int:
    """The thread budget: ``threads``, else torch's intra-op thread count."""
    return threads or torch.get_num_threads() or os.cpu_count() or 1


def _lanes_and_threads(lanes: int | None, threads: int | None) -> tuple[int, int]:
    """Lanes (default: one per thread of the budget) and intra-op threads per lane."""
    budget = _budget(threads)
    n = max(1, min(lanes or budget, budget))
    return n, max(1, budget // n)


def _check_replicated(gm: torch.fx.GraphModule, captured: Captured) -> None:
    problem = _compare(gm, captured.gm, captured.example_inputs)
    if problem:
        raise PlanError(f"{captured.name}: the graph replicated per sub-batch is wrong: {problem}")


def _plan(gm: torch.fx.GraphModule, times: dict[str, float], lanes: int, clone: bool) -> tuple[LanePlan, int]:
    """Plan the lanes; with ``clone``, also with cheap multi-reader nodes cloned, and keep the clones
    (applied to ``gm``) only if their simulated schedule is shorter. Returns the plan and the clone count."""
    from pathweave.lanes import clone as cloning
    from pathweave.lanes.mapping import plan_lanes

    dag = build_dag(gm)
    plan = plan_lanes(dag, lambda n: times.get(n, 0.0), lanes)
    matches = cloning.propose(gm) if clone and lanes > 1 else []
    if matches:
        trial = copy.deepcopy(gm.graph)
        trial_gm = torch.fx.GraphModule(gm, trial)
        origin = cloning.apply(trial_gm, matches)
        trial_dag = build_dag(trial_gm)
        trial_plan = plan_lanes(trial_dag, lambda n: times.get(origin.get(n, n), 0.0), lanes)
        if trial_plan.makespan_us < plan.makespan_us:
            gm.graph = trial
            gm.recompile()
            dag, plan = trial_dag, trial_plan
        else:
            matches = []
    plan.verify(dag)
    return plan, sum(len(m.users) for m in matches)
