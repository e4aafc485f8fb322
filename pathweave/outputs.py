"""Outputs that must not be handed out as they are."""

from __future__ import annotations

import torch
import torch.fx


def aliased_outputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """Positions of outputs that are a constant of the graph or one of its inputs, or a value an earlier
    output already is (``y, y.clone()`` once the clone is folded away): returned as they are, a caller
    writing into one would change the next call's result, their own input or another output."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    seen: set[torch.fx.Node] = set()
    positions = []
    for i, v in enumerate(values):
        if not isinstance(v, torch.fx.Node):
            continue
        if v.op in ("get_attr", "placeholder") or v in seen:
            positions.append(i)
        seen.add(v)
    return frozenset(positions)


def copy_aliased(outputs: tuple, positions: frozenset[int]) -> tuple:
    if not positions:
        return outputs
    return tuple(
        o.clone() if i in positions and isinstance(o, torch.Tensor) else o for i, o in enumerate(outputs)
    )
