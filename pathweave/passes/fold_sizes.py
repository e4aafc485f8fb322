"""Fold ops whose value follows from sizes alone into constants: ``arange(seq)`` (GPT-2's positions) and
``zeros_like(input_ids)`` (BERT's token types) read no element of any input, so on a graph specialised to
its example shapes they are constants. ``prune`` run after this folds what reads only them (the position
and token-type embeddings).

Run only where a graph's shapes are fixed (the tiles strategy): ``prune`` alone leaves these ops in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import add_constant, aten

#: creation ops with a deterministic value: a size, a fill value, or (``*_like``, ``new_*``) another
#: tensor's shape and type; ``empty*`` and the random ones are not constants
_SIZES = {
    aten.arange.default, aten.arange.start, aten.arange.start_step, aten.zeros.default, aten.ones.default,
    aten.full.default, aten.scalar_tensor.default, aten.zeros_like.default, aten.ones_like.default,
    aten.full_like.default, aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
}  # fmt: skip


@dataclass(frozen=True)
class FoldSizes:
    node: str


def propose(gm: torch.fx.GraphModule) -> list[FoldSizes]:
    return [FoldSizes(n.name) for n in gm.graph.nodes if n.op == "call_function" and n.target in _SIZES]


def _stand_in(node: torch.fx.Node) -> torch.Tensor:
    """A tensor of ``node``'s shape and type: all a creation op reads of it."""
    val = node.meta["val"]
    return torch.zeros(val.shape, dtype=val.dtype)


def apply(gm: torch.fx.GraphModule, matches: list[FoldSizes]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        node = nodes[m.node]
        args = torch.fx.node.map_arg(node.args, _stand_in)
        kwargs = {k: v for k, v in torch.fx.node.map_arg(node.kwargs, _stand_in).items() if k != "device"}
        with torch.no_grad():
            value = node.target(*args, **kwargs, device="cpu")
        node.replace_all_uses_with(add_constant(gm, node, f"{node.name}_folded", value))
        gm.graph.erase_node(node)
