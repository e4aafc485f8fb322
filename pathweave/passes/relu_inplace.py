"""A ReLU right after a oneDNN convolution or linear runs in place on that kernel's fresh output.

oneDNN's ReLU post-op maps NaN to 0 where ``torch.relu`` keeps it, so ``fuse_conv`` and ``fuse_linear``
leave ReLU out of the epilogue. As a separate ``aten.relu`` it allocated a new tensor and cost the
sequential path up to 7% on GoogLeNet (A/B, 2 threads); ``relu_`` on the kernel's output, which
nothing else reads, costs what the fused ReLU did and keeps eager's NaN. The write is private (the
mutated value has no other reader), so lanes may still run the graph (``analysis.ops.shared_mutation``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import aten

#: kernels whose output is a freshly allocated tensor (not a view of an input)
FRESH = (torch.ops.mkldnn._convolution_pointwise.default, torch.ops.mkldnn._convolution_pointwise.binary,
         torch.ops.mkldnn._linear_pointwise.default)  # fmt: skip


@dataclass(frozen=True)
class InplaceRelu:
    relu: str


def propose(gm: torch.fx.GraphModule) -> list[InplaceRelu]:
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target != aten.relu.default:
            continue
        src = node.args[0]
        if isinstance(src, torch.fx.Node) and src.target in FRESH and list(src.users) == [node]:
            found.append(InplaceRelu(node.name))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[InplaceRelu]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        nodes[m.relu].target = aten.relu_.default
