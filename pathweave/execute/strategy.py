"""The strategies ``optimize`` returns, each a callable with the model's outputs."""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

import torch

from ..analyze import build_dag
from ..analyze.profile import measure_node_times
from ..capture.graph import Captured
from ..schedule.plan import LanePlan
from .lanes import LanesExecutor, refuse_inplace
from .sequential import SequentialExecutor, _threads


class LanesStrategy:
    """Ramiel's clustering mapped onto lanes: the fast CPU rewrites first (the sequential executor
    builds and checks them), then one profiling run of the rewritten graph at one intra-op thread
    per lane, then the plan (verified), then the lanes executor."""

    strategy = "lanes"

    def __init__(
        self, captured: Captured, lanes: int | None = None, threads: int | None = None, clone: bool = True
    ) -> None:
        refuse_inplace(captured.gm, captured.name)
        budget = threads or torch.get_num_threads() or os.cpu_count() or 1
        self.lanes = max(1, min(lanes or budget, budget))
        self.threads_per_lane = max(1, budget // self.lanes)
        self.captured = captured
        # weights packed for the thread count each lane runs with (see SequentialExecutor)
        self.sequential = SequentialExecutor(captured, threads=self.threads_per_lane)
        self.passes = self.sequential.passes
        gm = self.sequential.gm
        with _threads(self.threads_per_lane):
            times = measure_node_times(dataclasses.replace(captured, gm=gm))
        self.plan, self.cloned = _plan(gm, times, self.lanes, clone)
        self.executor = LanesExecutor(gm, self.plan, self.threads_per_lane)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self.captured.flatten_inputs(args, kwargs)
        return self.captured.out_spec_unflatten(self.run_flat(flat))

    def run_flat(self, flat: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return self.executor.run_flat(flat)

    def close(self) -> None:
        self.executor.close()


def _plan(gm: torch.fx.GraphModule, times: dict[str, float], lanes: int, clone: bool) -> tuple[LanePlan, int]:
    """Plan the lanes; with ``clone``, also with cheap multi-reader nodes cloned, and keep the clones
    (applied to ``gm``) only if their simulated schedule is shorter. Returns the plan and the clone count."""
    from ..schedule import plan_lanes
    from ..transform import clone as cloning

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
