"""Experiment (issue 21): each layer of a zoo model in the tiles against ONNX Runtime's same node, paired.

Not part of the package. Builds strategy "tiles" and an ONNX Runtime session (its per-node profiling on)
on the same model, then alternates one tiles inference with the kernels timing themselves
(``profile_layers``) and one ONNX Runtime inference, ``--runs`` times, so that both see the same moments
of a host whose speed drifts (unpaired per-layer profiles minutes apart differed by 1.5x on a 2-core VM).
Layers are matched to ONNX Runtime's nodes by output shape and weight shape, in order; prints both
totals, every layer's median against its node's (ms) and ONNX Runtime's unmatched nodes, and writes the
rows as JSON.

Run: ``python experiments/tiles_vs_ort_layers.py resnet50 [--runs 20] [--threads 1] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections import defaultdict
from typing import Any

import onnxruntime as ort
import torch.fx

import pathweave
from pathweave.bench.peers import onnx_export, ort_options
from pathweave.tiles.profile import profile_layers
from pathweave.tiles.program import kernel_names
from pathweave.tiles.strategy import TilesStrategy
from pathweave.zoo.load import load_model

Key = tuple[tuple[int, ...], tuple[int, ...]]  # output shape, weight shape


def layer_key(node: torch.fx.Node) -> Key:
    """A layer's output shape and its first 4-D constant input's (a convolution's weight) shape."""
    val = node.meta.get("val")
    out = tuple(val.shape) if hasattr(val, "shape") else ()
    for a in node.all_input_nodes:
        v = a.meta.get("val")
        if a.op == "get_attr" and v is not None and v.dim() == 4:
            return out, tuple(v.shape)
    return out, ()


def ort_node_times(profile: list[dict[str, Any]], skip: int) -> dict[tuple[str, str, Key], float]:
    """Median ms per node of an ONNX Runtime profile (its first ``skip`` runs left out), in node order."""
    times: dict[tuple[str, str, Key], list[float]] = defaultdict(list)
    for e in profile:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        a = e["args"]
        outs = a.get("output_type_shape", [{}])
        out = tuple(next(iter(outs[0].values()))) if outs else ()
        ins = a.get("input_type_shape", [])
        weight = tuple(next(iter(ins[1].values()))) if len(ins) > 1 and a["op_name"] == "Conv" else ()
        times[(e["name"][: -len("_kernel_time")], a["op_name"], (out, weight))].append(e["dur"] / 1e3)
    return {k: statistics.median(v[skip:] or v) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    lm = load_model(args.model)
    inputs = list(lm.inputs)
    exported = onnx_export(lm.model, lm.inputs)
    opts = ort_options(ort, args.threads, False)
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ort_layers_{args.model}")
    session = ort.InferenceSession(exported.data, opts, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: inputs[0].numpy()}
    strat = TilesStrategy(pathweave.capture(lm.model, *lm.inputs), threads=args.threads)
    names = [str(n) for n in strat.graph.layer_names]
    paths = kernel_names(strat.program.layers)
    nodes = {n.name: n for n in strat.gm.graph.nodes}
    warmup = 5
    for _ in range(warmup):
        session.run(None, feed)
        strat.run_flat(inputs)
    ours = []
    for _ in range(args.runs):  # in turns: both see the same moments of the host
        ours.append(profile_layers(strat.program, names, lambda: strat.run_flat(inputs), runs=1))
        session.run(None, feed)
        strat.quiesce()
    profile = session.end_profiling()
    with open(profile) as f:
        theirs = ort_node_times(json.load(f), warmup)
    os.remove(profile)
    strat.close()
    queue: dict[Key, list[tuple[str, str, Key]]] = defaultdict(list)
    for k in theirs:
        queue[k[2]].append(k)
    rows = []
    for i, name in enumerate(names):
        key = layer_key(nodes[name])
        match = queue[key].pop(0) if queue.get(key) else None
        mine = statistics.median(r[i].ms for r in ours)
        row = {"layer": name, "kernel": paths[i], "out": key[0], "weight": key[1], "ms": mine}
        row.update({"ort_node": match[0] if match else None, "ort_ms": theirs[match] if match else None})
        rows.append(row)
    total = sum(r["ms"] for r in rows)
    print(f"# {args.model}, {args.threads} thread(s), {args.runs} runs in turns: tiles kernels "
          f"{total:.2f} ms, ONNX Runtime nodes {sum(theirs.values()):.2f} ms")  # fmt: skip
    for r in rows:
        theirs_ms = f"{r['ort_ms']:.3f}" if r["ort_ms"] is not None else "-"
        shapes = f"{r['out']!s:20s} {r['weight']!s:18s}"
        print(f"{r['layer']:24s} {r['kernel'] or '-':14s} {shapes} {r['ms']:.3f} {theirs_ms}")
    left = [(k[0], k[1], round(theirs[k], 3)) for v in queue.values() for k in v]
    print("ONNX Runtime nodes unmatched:", left)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
