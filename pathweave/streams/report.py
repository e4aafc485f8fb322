"""``pathweave plan --streams``: Opara's stream plans for a model and its baselines, without a GPU.

Node weights are the static cost model's (the profiled kernel times need CUDA), boundedness comes
from arithmetic intensity against ``kernels.DEFAULT_RIDGE``, and resource demand is unknown (0), so
the launch order here is Kahn's order with memory- and compute-bound nodes alternating.
"""

from __future__ import annotations

import time

from pathweave.analysis.cost import annotate
from pathweave.analysis.dag import build_dag
from pathweave.analysis.kernels import DEFAULT_RIDGE, node_bounds
from pathweave.frontend.graph import Captured
from pathweave.meta import COST
from pathweave.streams.alloc import allocate_opara
from pathweave.streams.launch_order import launch_order
from pathweave.streams.plan import POLICIES, plan_streams


def stream_plans(captured: Captured, max_streams: int | None = None) -> list[dict]:
    gm = captured.gm
    annotate(gm)
    dag = build_dag(gm)
    by_name = {n.name: n for n in gm.graph.nodes}
    weight = {n: float(by_name[n].meta[COST].weight) for n in dag.nodes}
    bound = node_bounds(gm, list(dag.nodes), DEFAULT_RIDGE)
    t0 = time.perf_counter()
    allocate_opara(dag, weight.__getitem__, max_streams)
    launch_order(dag, bound, {})
    core_ms = (time.perf_counter() - t0) * 1e3
    rows = []
    for policy in POLICIES:
        t0 = time.perf_counter()
        plan = plan_streams(dag, policy, weight.__getitem__, bound, {}, max_streams)
        rows.append({
            "policy": policy, "streams": plan.streams, "waits": len(plan.waits),
            "simulated": plan.makespan_us, "one_stream": plan.sequential_us,
            "plan_ms": (time.perf_counter() - t0) * 1e3,
        })  # fmt: skip
    rows[0]["alloc_order_ms"] = core_ms
    return rows


def format_stream_plans(model: str, rows: list[dict]) -> str:
    header = f"{'policy':10} {'streams':>7} {'waits':>6} {'simulated':>10} {'speed-up':>8} {'plan ms':>8}"
    lines = [f"{model}: stream plans on static weights (simulated with unlimited SMs)", header]
    for r in rows:
        speedup = r["one_stream"] / r["simulated"] if r["simulated"] else 1.0
        lines.append(f"{r['policy']:10} {r['streams']:7d} {r['waits']:6d} {r['simulated']:10.0f} "
                     f"{speedup:7.2f}x {r['plan_ms']:8.1f}")  # fmt: skip
    lines.append(f"Opara allocation + launch order alone: {rows[0]['alloc_order_ms']:.2f} ms")
    return "\n".join(lines)
