"""Experiment (issue 6): BrainSlug's Table 2, the share of inference time in the layers the stacks replace.

Not part of the package. For each model it builds the fast sequential path (``pathweave:sequential``)
and the stacks strategy (``pathweave:stacks``, the same pipeline plus the stacks pass) from one capture,
then times every fx node of both graphs with a timing ``torch.fx.Interpreter`` (``time.perf_counter``
around each node, the executor's thread count, inference mode; the two graphs alternate, median per
node over ``--repeats`` runs after one warm-up).

- before: the nodes of the sequential graph that the stacks pass replaces (``transform.stacks.propose``
  on that graph: chains of >= 2 unfolded batch norms, ReLUs, scalar add/mul and max/avg pools), summed,
  over the sum of all its nodes.
- after: the ``StackModule`` nodes of the stacks graph (the generated kernels, including their
  channels_last conversion of the input, if any), over the sum of all its nodes.
- "all stackable": every node of the sequential graph of a stackable kind, also those left alone
  (single layers, chains the pass did not match), for context.
- plain graph: the captured graph before the fast path (batch norm not folded, ReLU not fused into the
  convolutions, NCHW), timed the same way; the share of its nodes in chains of >= 2 stackable layers.
  This is closer to BrainSlug's baseline (eager PyTorch) than the sequential path is.

The per-node sums include the interpreter's per-node overhead (some microseconds per node; both graphs
pay it), so the shares are of the summed node times, not of one ``executor(x)`` call. That call's
median (timed the same way, plain ``gm(*inputs)``) is printed beside them.

Run: ``python experiments/stacks_share.py [--batch 8] [--repeats 5] [--threads 2] MODEL ...``
(default models: vgg16_bn densenet121 resnet50 squeezenet1_0).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.fx

from pathweave.analysis.profile import NodeTimer
from pathweave.frontend.capture import capture
from pathweave.sequential import SequentialExecutor
from pathweave.stacks.collapse import _layer, propose
from pathweave.stacks.module import StackModule
from pathweave.stacks.strategy import StacksStrategy
from pathweave.zoo.load import load_model

MODELS = ("vgg16_bn", "densenet121", "resnet50", "squeezenet1_0")


def _run(gm: torch.fx.GraphModule, timer: NodeTimer, flat: list[torch.Tensor]) -> float:
    """One interpreted run (per-node times into ``timer``) and one plain call; returns the call's ms."""
    with torch.inference_mode():
        timer.run(*flat)
        t0 = time.perf_counter()
        gm(*flat)
        return (time.perf_counter() - t0) * 1e3


def share(spec: str, batch: int, repeats: int, threads: int) -> dict[str, Any]:
    loaded = load_model(spec, batch=batch)
    captured = capture(loaded.model, *loaded.inputs, name=loaded.name)
    flat = list(captured.example_inputs)
    seq = SequentialExecutor(captured, threads=threads)
    st = StacksStrategy(captured, threads=threads)
    chains = propose(seq.gm)  # what the stacks pass replaces in the sequential graph
    replaced = {name for c in chains for name in c.nodes}
    stackable = {n.name for n in seq.gm.graph.nodes if _layer(n, seq.gm) is not None}
    stack_nodes = {
        n.name for n in st.gm.graph.nodes
        if n.op == "call_module" and isinstance(st.gm.get_submodule(n.target), StackModule)
    }  # fmt: skip
    if len(stack_nodes) != len(chains):
        print(f"  note: {len(chains)} chains proposed on the sequential graph, {len(stack_nodes)} stacks")
    plain = {name for c in propose(captured.gm) for name in c.nodes}
    timers = {"seq": NodeTimer(seq.gm), "st": NodeTimer(st.gm), "plain": NodeTimer(captured.gm)}
    calls: dict[str, list[float]] = {"seq": [], "st": [], "plain": []}
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for i in range(repeats + 1):
            order = ["seq", "st", "plain"] if i % 2 == 0 else ["st", "seq", "plain"]
            for key in order:
                ms = _run({"seq": seq.gm, "st": st.gm, "plain": captured.gm}[key], timers[key], flat)
                if i:
                    calls[key].append(ms)
    finally:
        torch.set_num_threads(saved)
    med = {
        k: {n: statistics.median(ts[1:]) / 1e3 for n, ts in t.times.items()} for k, t in timers.items()
    }  # ms
    total_seq, total_st = sum(med["seq"].values()), sum(med["st"].values())
    before = sum(v for n, v in med["seq"].items() if n in replaced)
    after = sum(v for n, v in med["st"].items() if n in stack_nodes)
    every = sum(v for n, v in med["seq"].items() if n in stackable)
    total_plain = sum(med["plain"].values())
    plain_ms = sum(v for n, v in med["plain"].items() if n in plain)
    return {
        "model": spec, "batch": batch, "stacks": len(stack_nodes),
        "layers": sum(c.layers for c in chains), "stackable_nodes": len(stackable),
        "seq_call_ms": statistics.median(calls["seq"]), "st_call_ms": statistics.median(calls["st"]),
        "seq_nodes_ms": total_seq, "st_nodes_ms": total_st,
        "before_ms": before, "after_ms": after, "all_stackable_ms": every,
        "plain_call_ms": statistics.median(calls["plain"]), "plain_nodes_ms": total_plain,
        "plain_chains_ms": plain_ms,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=list(MODELS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = p.parse_args()
    rows = []
    for spec in a.models:
        r = share(spec, a.batch, a.repeats, a.threads)
        rows.append(r)
        print(f"  {spec}: {r}", flush=True)
    print(f"\nbatch {a.batch}, {a.threads} threads, median of {a.repeats} interpreted runs per node (ms)\n")
    print(
        "| model | stacks (layers) | sequential call | stacks call | stacked layers before | share before "
        "| stack kernels after | share after | all stackable-kind layers before (share) "
        "| plain graph call | plain graph: chains (share) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sb = r["before_ms"] / r["seq_nodes_ms"]
        sa = r["after_ms"] / r["st_nodes_ms"]
        sall = r["all_stackable_ms"] / r["seq_nodes_ms"]
        print(
            f"| {r['model']} | {r['stacks']} ({r['layers']}) | {r['seq_call_ms']:.1f} "
            f"| {r['st_call_ms']:.1f} "
            f"| {r['before_ms']:.1f} | {100 * sb:.1f}% | {r['after_ms']:.1f} | {100 * sa:.1f}% "
            f"| {r['all_stackable_ms']:.1f} ({100 * sall:.1f}%) | {r['plain_call_ms']:.1f} "
            f"| {r['plain_chains_ms']:.1f} ({100 * r['plain_chains_ms'] / r['plain_nodes_ms']:.1f}%) |"
        )


if __name__ == "__main__":
    main()
