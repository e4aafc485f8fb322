"""``LanePlan``: nodes on lanes, in order, with the hand-offs between lanes; it verifies itself."""

from __future__ import annotations

from dataclasses import dataclass

from pathweave.analysis.dag import Dag
from pathweave.errors import PlanError


@dataclass(frozen=True)
class LanePlan:
    """``lanes[i]`` lists the DAG nodes lane i runs, in that order. ``handoffs`` holds
    (producer, consumer lane) for every value a lane needs from another lane; lane 0 runs on the
    caller's thread and returns the outputs. ``clusters_lc`` and ``clusters_merged`` count Ramiel's
    clusters before and after merging; ``makespan_us`` is the simulated time of this plan."""

    lanes: tuple[tuple[str, ...], ...]
    handoffs: tuple[tuple[str, int], ...]
    clusters_lc: int
    clusters_merged: int
    makespan_us: float
    sequential_us: float

    def lane_of(self) -> dict[str, int]:
        return {n: i for i, lane in enumerate(self.lanes) for n in lane}

    def verify(self, dag: Dag) -> None:
        """Every node on exactly one lane; every data edge ordered within its lane or handed off."""
        lane = self.lane_of()
        placed = [n for ln in self.lanes for n in ln]
        twice = sorted({n for n in placed if placed.count(n) > 1})
        if twice:
            raise PlanError(f"nodes placed on more than one lane or twice: {twice[:5]}")
        if set(placed) != set(dag.nodes):
            missing, extra = sorted(set(dag.nodes) - set(placed)), sorted(set(placed) - set(dag.nodes))
            raise PlanError(f"plan leaves nodes on no lane: {missing[:5]}; places unknown nodes: {extra[:5]}")
        pos = {n: i for ln in self.lanes for i, n in enumerate(ln)}
        handed = set(self.handoffs)
        for n in dag.nodes:
            for p in dag.preds[n]:
                if lane[p] == lane[n] and pos[p] > pos[n]:
                    raise PlanError(f"edge {p} -> {n}: {p} runs after {n} on lane {lane[n]}")
                if lane[p] != lane[n] and (p, lane[n]) not in handed:
                    raise PlanError(f"edge {p} -> {n} crosses lanes {lane[p]} -> {lane[n]} with no hand-off")
        self._check_no_deadlock(dag, lane, pos)

    def _check_no_deadlock(self, dag: Dag, lane: dict[str, int], pos: dict[str, int]) -> None:
        """Lanes follow one global topological order, so no wait can form a cycle; check that."""
        order = {n: i for i, n in enumerate(dag.nodes)}
        for ln in self.lanes:
            for a, b in zip(ln, ln[1:], strict=False):
                if order[a] > order[b]:
                    raise PlanError(f"lane {lane[a]} runs {a} before {b}, against the graph's order")

    def summary(self) -> str:
        loads = ", ".join(str(len(ln)) for ln in self.lanes)
        return (
            f"{len(self.lanes)} lanes ({loads} ops), {len(self.handoffs)} hand-offs; Ramiel clusters "
            f"{self.clusters_lc} -> {self.clusters_merged} merged; simulated {self.makespan_us:.0f} us "
            f"vs {self.sequential_us:.0f} us sequential"
        )
