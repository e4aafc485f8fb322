"""Hyperclustering's graph (Ramiel, batch > 1): the sub-batch graph copied once per sub-batch.

A batch of B samples is split along dimension 0 into ``copies`` groups of B / copies; each group runs
its own copy of the graph captured at the sub-batch size, and the outputs are concatenated back. The
copies share weights (one ``get_attr`` per weight) and are independent of each other, so the lanes
planner can interleave them. Every copied node carries ``meta[REPLICA]`` naming its group and the
sub-batch node it copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.errors import UnsupportedError
from pathweave.meta import REPLICA, Replica

aten = torch.ops.aten


@dataclass(frozen=True)
class Split:
    """How the batch is split: ``copies`` groups of ``sub_batch`` samples along dimension 0."""

    batch: int
    copies: int

    @property
    def sub_batch(self) -> int:
        return self.batch // self.copies

    def slices(self, inputs: tuple[torch.Tensor, ...] | list[torch.Tensor], group: int) -> tuple:
        lo = group * self.sub_batch
        return tuple(t[lo : lo + self.sub_batch] for t in inputs)


def propose(inputs: tuple[torch.Tensor, ...] | list[torch.Tensor], copies: int) -> Split | None:
    """A split of the batch into at most ``copies`` equal groups (the most that divide it), or None when
    the inputs have no common batch dimension larger than 1."""
    sizes = {t.shape[0] if isinstance(t, torch.Tensor) and t.dim() > 0 else None for t in inputs}
    if len(sizes) != 1 or None in sizes:
        return None
    batch = int(next(iter(sizes)))
    k = max((k for k in range(1, min(copies, batch) + 1) if batch % k == 0), default=1)
    return Split(batch, k) if k > 1 else None


def apply(sub: torch.fx.GraphModule, full: torch.fx.GraphModule, split: Split) -> torch.fx.GraphModule:
    """One graph running ``sub`` (the graph at the sub-batch size) on every group of ``full``'s inputs.

    The placeholders and their metadata come from ``full`` (the graph at the whole batch); outputs are
    concatenated along dimension 0, so each output of ``sub`` must have the sub-batch as dimension 0.
    """
    g = torch.fx.Graph()
    inputs = []
    for ph in (n for n in full.graph.nodes if n.op == "placeholder"):
        node = g.placeholder(ph.name)
        node.meta.update(ph.meta)
        inputs.append(node)
    attrs: dict[str, torch.fx.Node] = {}
    outs: list[list[torch.fx.Node]] = []
    for group in range(split.copies):
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        phs = iter(inputs)
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                lo = group * split.sub_batch
                env[n] = g.call_function(aten.slice.Tensor, (next(phs), 0, lo, lo + split.sub_batch))
                env[n].meta.update(n.meta)
                env[n].meta[REPLICA] = Replica(group, "")
            elif n.op == "get_attr":
                if str(n.target) not in attrs:
                    attrs[str(n.target)] = g.node_copy(n)
                env[n] = attrs[str(n.target)]
            elif n.op == "output":
                outs.append([env[a] for a in n.args[0]])
            else:
                env[n] = g.node_copy(n, lambda a, env=env: env[a])
                env[n].meta[REPLICA] = Replica(group, n.name)
    results = [_join(g, list(per_output), split) for per_output in zip(*outs, strict=True)]
    g.output(tuple(results))
    gm = torch.fx.GraphModule(sub, g)
    gm.graph.lint()
    return gm


def _join(g: torch.fx.Graph, parts: list[torch.fx.Node], split: Split) -> torch.fx.Node:
    val = parts[0].meta.get("val")  # rewritten nodes may have none: the strategy checks the outputs
    if isinstance(val, torch.Tensor) and (val.dim() == 0 or val.shape[0] != split.sub_batch):
        raise UnsupportedError(
            f"hyperclustering: output {parts[0].format_node()} has no sub-batch dimension first "
            f"(shape {getattr(val, 'shape', None)}), so the groups' outputs cannot be concatenated",
            ops=[],
        )
    return g.call_function(aten.cat.default, (parts, 0))
