"""Run image tensors in channels_last (NHWC) layout, where oneDNN and PyTorch's pooling are fastest.

Image inputs that feed convolutions are converted once at the start; oneDNN convolutions keep the
layout of their input, and pooling, concatenation and element-wise ops preserve it. ``view`` cannot
flatten a channels_last tensor, so every ``view`` in such a graph becomes ``reshape`` (which copies
only where the layout needs it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import aten

_VIEWS = (aten.view.default, aten._unsafe_view.default)


@dataclass(frozen=True)
class ToChannelsLast:
    input: str


def _feeds_conv(node: torch.fx.Node, depth: int = 4) -> bool:
    """Whether a convolution reads this node within a few element-wise steps."""
    if depth == 0:
        return False
    for user in node.users:
        name = getattr(user.target, "__name__", str(user.target))
        if "conv" in name or _feeds_conv(user, depth - 1):
            return True
    return False


def propose(gm: torch.fx.GraphModule) -> list[ToChannelsLast]:
    found = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and val is not None and getattr(val, "dim", lambda: 0)() == 4:
            if val.dtype.is_floating_point and _feeds_conv(node):
                found.append(ToChannelsLast(node.name))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[ToChannelsLast]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        inp = nodes[m.input]
        users = list(inp.users)
        with gm.graph.inserting_after(inp):
            cl = gm.graph.call_function(aten.clone.default, (inp,), {"memory_format": torch.channels_last})
        cl.meta["val"] = inp.meta["val"]
        for u in users:
            u.replace_input_with(inp, cl)
    if matches:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in _VIEWS:
                node.target = aten.reshape.default
