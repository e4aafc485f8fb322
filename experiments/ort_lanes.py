"""Experiment (issue 3): Ramiel's lanes with ONNX Runtime sessions as the kernels.

Not part of the package: it measured whether running each lane segment as its own ONNX Runtime session
(1 intra-op thread, the GIL released inside ``run``) beats ONNX Runtime's own 2-thread intra-op
parallelism. It did not (README, "Lanes with ONNX Runtime kernels"), so the lanes strategy keeps
pathweave's own kernels. Run: ``python experiments/ort_lanes.py googlenet [handoff_us]``.

Steps: export to ONNX, optimise offline (ORT "extended", portable), profile every node at 1 thread,
plan the lanes on those times (``plan_lanes``), cut every lane before a node that receives from another
lane and after one that sends, extract each segment as a model (``onnx.utils.Extractor``) with its own
session, and run the lanes on two threads, interleaved against ONNX Runtime at 1 and 2 threads.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

from pathweave.analysis.dag import Dag
from pathweave.bench.peers import onnx_export
from pathweave.lanes.mapping import plan_lanes
from pathweave.zoo.load import load_model


def options(threads: int, level: Any, **extra: Any) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    for k, v in extra.items():
        setattr(so, k, v)
    return so


def optimised(data: bytes, tmp: str) -> onnx.ModelProto:
    path = f"{tmp}/opt.onnx"
    level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    ort.InferenceSession(data, options(1, level, optimized_model_filepath=path))
    model = onnx.load(path)
    for i, n in enumerate(model.graph.node):
        n.name = n.name or f"node{i}"
    return model


def profile(model: onnx.ModelProto, feeds: dict, tmp: str) -> dict[str, float]:
    level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so = options(1, level, enable_profiling=True, profile_file_prefix=f"{tmp}/prof")
    s = ort.InferenceSession(model.SerializeToString(), so)
    for _ in range(6):
        s.run(None, feeds)
    times: dict[str, list[float]] = {}
    with open(s.end_profiling()) as f:
        for e in json.load(f):
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                times.setdefault(e["name"].removesuffix("_kernel_time"), []).append(e["dur"])
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def onnx_dag(g: onnx.GraphProto) -> Dag:
    producer = {o: n.name for n in g.node for o in n.output}
    order = tuple(n.name for n in g.node)
    preds = {n.name: tuple(dict.fromkeys(producer[i] for i in n.input if i in producer)) for n in g.node}
    succs: dict[str, list[str]] = {n: [] for n in order}
    for n in order:
        for p in preds[n]:
            succs[p].append(n)
    return Dag(order, preds, {k: tuple(v) for k, v in succs.items()})


def segments(dag: Dag, lanes: tuple[tuple[str, ...], ...]) -> list[tuple[int, list[str]]]:
    lane_of = {n: i for i, ln in enumerate(lanes) for n in ln}
    segs: list[tuple[int, list[str]]] = []
    for ln, nodes in enumerate(lanes):
        cur: list[str] = []
        for n in nodes:
            if cur and any(lane_of[p] != ln for p in dag.preds[n]):
                segs.append((ln, cur))
                cur = []
            cur.append(n)
            if any(lane_of[s] != ln for s in dag.succs[n]):
                segs.append((ln, cur))
                cur = []
        if cur:
            segs.append((ln, cur))
    pos = {n: i for i, n in enumerate(dag.nodes)}
    return sorted(segs, key=lambda s: pos[s[1][0]])


def sessions(model: onnx.ModelProto, segs: list[tuple[int, list[str]]]) -> list[tuple[int, list, list, Any]]:
    g = model.graph
    node_by = {n.name: n for n in g.node}
    producer = {o: n.name for n in g.node for o in n.output}
    inits, outputs = {i.name for i in g.initializer}, {o.name for o in g.output}
    seg_of = {n: i for i, (_, ns) in enumerate(segs) for n in ns}
    consumers: dict[str, list[str]] = {}
    for n in g.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n.name)
    ex, out = Extractor(model), []
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for i, (ln, ns) in enumerate(segs):
        mine = set(ns)
        ins = [
            t for n in ns for t in node_by[n].input if t and t not in inits and producer.get(t) not in mine
        ]  # fmt: skip
        outs = [
            o for n in ns for o in node_by[n].output
            if o in outputs or any(seg_of[c] != i for c in consumers.get(o, []))
        ]  # fmt: skip
        sub = ex.extract_model(list(dict.fromkeys(ins)), list(dict.fromkeys(outs)))
        so = options(1, level)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        out.append((ln, list(dict.fromkeys(ins)), list(dict.fromkeys(outs)), ort.InferenceSession(
            sub.SerializeToString(), so)))  # fmt: skip
    return out


def main(name: str, handoff: float) -> None:
    loaded = load_model(name)
    data = onnx_export(loaded.model, tuple(loaded.inputs)).data
    tmp = tempfile.mkdtemp()
    model = optimised(data, tmp)
    g = model.graph
    feeds = {i.name: t.numpy() for i, t in zip(g.input, loaded.inputs, strict=False)}
    times = profile(model, feeds, tmp)
    dag = onnx_dag(g)
    plan = plan_lanes(dag, lambda n: times.get(n, 0.0), 2, handoff=handoff)
    segs = segments(dag, plan.lanes)
    sess = sessions(model, segs)
    print(plan.summary(), f"; {len(segs)} segments")
    per_lane = [[s for s in sess if s[0] == ln] for ln in range(len(plan.lanes))]

    def run_lane(ln: int, env: dict, ready: dict) -> None:
        for _, ins, outs, s in per_lane[ln]:
            for t in ins:
                if t not in env:
                    ready[t].wait()
            for t, v in zip(outs, s.run(outs, {t: env[t] for t in ins}), strict=True):
                env[t] = v
                ready[t].set()

    def lanes() -> list:
        env, ready = dict(feeds), {t: threading.Event() for s in sess for t in s[2]}
        workers = [threading.Thread(target=run_lane, args=(ln, env, ready)) for ln in range(1, len(per_lane))]
        for w in workers:
            w.start()
        run_lane(0, env, ready)
        for w in workers:
            w.join()
        return [env[o.name] for o in g.output]

    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    ort2 = ort.InferenceSession(data, options(2, level))
    ort1 = ort.InferenceSession(data, options(1, level))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(lanes(), ort2.run(None, feeds), strict=True))
    fns = {"ort 2 threads": lambda: ort2.run(None, feeds), "ort 1 thread": lambda: ort1.run(None, feeds),
           "ort lanes": lanes}  # fmt: skip
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(15):
        for k, f in fns.items():
            time.sleep(0.05)
            f()
            t0 = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t0)
    print(f"max abs diff {diff:.1e};", {k: round(statistics.median(v) * 1e3, 2) for k, v in ts.items()})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "googlenet", float(sys.argv[2]) if len(sys.argv) > 2 else 50.0)
