"""Move a captured graph to another device: its weights, and the devices written into its nodes.

``GraphModule.to(device)`` moves parameters and buffers, but a captured graph also names the capture
device in node arguments: ``arange(16, device=cpu)`` for GPT-2's positions, ``full(..., device=cpu)``
for masks, ``_assert_tensor_metadata(x, device=cpu)`` checks that torch.export leaves behind. Run on
CUDA, those make CPU tensors next to CUDA ones (or fail the check). This pass rewrites every
``device=`` keyword that names another device to the target, and ``verify`` proves none is left.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.fx

from pathweave.errors import PlanError


@dataclass(frozen=True)
class Retarget:
    node: str
    old: str  # the device the node named


def _named_device(node: torch.fx.Node) -> torch.device | None:
    dev = node.kwargs.get("device")
    if dev is None or isinstance(dev, torch.fx.Node):
        return None
    return torch.device(dev)


def _same(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def propose(gm: torch.fx.GraphModule, device: str | torch.device) -> list[Retarget]:
    target = torch.device(device)
    out = []
    for node in gm.graph.nodes:
        dev = _named_device(node)
        if dev is not None and not _same(dev, target):
            out.append(Retarget(node.name, str(dev)))
    return out


def apply(gm: torch.fx.GraphModule, matches: list[Retarget], device: str | torch.device) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        node = nodes[m.node]
        node.kwargs = {**node.kwargs, "device": torch.device(device)}
    gm.recompile()


def verify(gm: torch.fx.GraphModule, device: str | torch.device) -> None:
    """Every node-named device, parameter and buffer is on ``device``."""
    left = propose(gm, device)
    if left:
        raise PlanError(f"node {left[0].node} still names device {left[0].old} after moving to {device}")
    target = torch.device(device)
    for name, t in [*gm.named_parameters(), *gm.named_buffers()]:
        if not _same(t.device, target):
            raise PlanError(f"tensor {name} is on {t.device}, not on {device}")


def to_device(gm: torch.fx.GraphModule, device: str | torch.device) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose weights and node arguments are all on ``device``; ``gm`` is unchanged."""
    out = copy.deepcopy(gm).to(device)
    apply(out, propose(out, device), device)
    verify(out, device)
    return out
