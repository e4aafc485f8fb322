"""BrainSlug's stacks: chains of element-wise and pooling layers collapsed into depth-first kernels.

``propose(gm)`` finds maximal chains (each layer reads only the previous one, and nothing else reads
the previous one) of: inference batch norm, ReLU, ReLU6, hardtanh, add or multiply by a scalar (all
element-wise), and 2-d max or average pooling (overlapping or not, with padding, stride, dilation for
max, ceil mode). It maps them to operations, groups them into steps (at most one pooling op per step,
then its element-wise ops; BrainSlug Sec. 3.2) and steps into sequences that fit the cache budget
(``plan.plan_sequences``). ``apply`` replaces each chain with one module that runs its
generated kernels. Chains of one layer are left alone: there is no pass through memory to save.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from pathweave.errors import PlanError
from pathweave.frontend.graph import attr_value
from pathweave.passes.util import BN_PLAIN, BN_TUPLE, bn_args, bn_output, inference_bn
from pathweave.stacks.model import Elementwise, Pool, Step
from pathweave.stacks.module import StackModule
from pathweave.stacks.plan import plan_sequences

aten = torch.ops.aten
_POOLS = {aten.max_pool2d.default: "max", aten.avg_pool2d.default: "avg"}


@dataclass(frozen=True)
class Stack:
    """One chain: its fx nodes in order (tuple accesses included), its steps, input and output shape."""

    nodes: tuple[str, ...]
    steps: tuple[Step, ...]
    in_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]

    @property
    def layers(self) -> int:
        return sum((s.pool is not None) + len(s.ops) for s in self.steps)


def propose(gm: torch.fx.GraphModule) -> list[Stack]:
    """Every maximal chain of at least two stackable layers on a 4-d float32 tensor."""
    stacks, taken = [], set()
    for node in gm.graph.nodes:
        if node in taken:
            continue
        layer = _layer(node, gm)
        if layer is None:
            continue
        chain, layers = _chain_from(node, layer, gm)
        taken.update(chain)
        if len(layers) >= 2:
            stacks.append(_stack(chain, layers))
    return stacks


class Policy:
    """The stacks pass with a sequence policy (BrainSlug Fig. 10: 1 step, 5 steps, unrestricted), in the
    form ``run_pipeline`` takes."""

    __name__ = "pathweave.stacks.collapse"

    def __init__(self, max_steps: int | None = None, device: str = "cpu") -> None:
        self.max_steps = max_steps
        self.device = device

    def propose(self, gm: torch.fx.GraphModule) -> list[Stack]:
        return propose(gm)

    def apply(self, gm: torch.fx.GraphModule, stacks: list[Stack]) -> None:
        apply(gm, stacks, self.max_steps, self.device)


def apply(
    gm: torch.fx.GraphModule, stacks: list[Stack], max_steps: int | None = None, device: str = "cpu"
) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}  # stacks are disjoint: none reads an erased node
    for i, stack in enumerate(stacks):
        chain = [nodes[n] for n in stack.nodes]
        name = f"pathweave_stack_{i}"
        sequences = plan_sequences(stack.steps, stack.in_shape, max_steps)
        gm.add_submodule(name, StackModule(sequences, max_steps, device))
        with gm.graph.inserting_after(chain[-1]):
            new = gm.graph.call_module(name, (chain[0].args[0],))
        new.meta["val"] = chain[-1].meta.get("val")
        chain[-1].replace_all_uses_with(new)
        for n in reversed(chain):
            gm.graph.erase_node(n)


def _chain_from(
    first: torch.fx.Node, layer: Pool | Elementwise, gm: torch.fx.GraphModule
) -> tuple[list[torch.fx.Node], list[Pool | Elementwise]]:
    """The chain's nodes (tuple accesses included) and its layers, from ``first`` (whose layer is given)."""
    chain, layers, node = [], [], first
    while True:
        chain.append(node)
        layers.append(layer)
        out = _output(node)
        if out is not node:
            chain.append(out)
        users = list(out.users)
        if len(users) != 1 or users[0].args[0] is not out:
            return chain, layers
        node, layer = users[0], _layer(users[0], gm)
        if layer is None:
            return chain, layers


def _output(node: torch.fx.Node) -> torch.fx.Node:
    """The node carrying a layer's tensor: the layer itself, or its ``[0]`` for ops returning tuples."""
    out = bn_output(node)
    if out is None:  # _layer takes a batch norm only where its getitem 0 is its one reader
        raise PlanError(f"{node.format_node()}: a batch norm tuple read other than by one getitem 0")
    return out


def _chain_input(node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0] if node.args else None
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if isinstance(val, torch.Tensor) and val.dim() == 4 and val.dtype == torch.float32:
        return x
    return None


def _layer(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Pool | Elementwise | None:
    """The operation a node performs, or None when it cannot join a stack."""
    if node.op != "call_function" or _chain_input(node) is None:
        return None
    t, a = node.target, node.args
    if t in _POOLS:
        return _pool(node, _POOLS[t])
    if t in (BN_TUPLE, BN_PLAIN):
        return _batch_norm(node, gm) if inference_bn(node) and bn_output(node) is not None else None
    if t is aten.relu.default:
        return Elementwise("clamp", lo=0.0)
    if t is aten.relu6.default:
        return Elementwise("clamp", lo=0.0, hi=6.0)
    if t is aten.hardtanh.default:
        lo, hi = (float(a[1]) if len(a) > 1 else -1.0), (float(a[2]) if len(a) > 2 else 1.0)
        return Elementwise("clamp", lo=lo, hi=hi)
    if t in (aten.add.Tensor, aten.mul.Tensor) and len(a) == 2 and isinstance(a[1], (int, float)):
        alpha = float(node.kwargs.get("alpha", 1))
        if t is aten.add.Tensor:
            return Elementwise("affine", scale=(1.0,), shift=(float(a[1]) * alpha,))
        return Elementwise("affine", scale=(float(a[1]),), shift=(0.0,))
    return None


def _pool(node: torch.fx.Node, kind: str) -> Pool | None:
    a = list(node.args) + [None] * 7
    k = _pair(a[1])
    stride = _pair(a[2]) if a[2] else k
    pad = _pair(a[3] if a[3] is not None else 0)
    if kind == "max":
        dil, ceil, include_pad, divisor = _pair(a[4] if a[4] is not None else 1), bool(a[5]), True, None
    else:
        dil, ceil = (1, 1), bool(a[4])
        include_pad = True if a[5] is None else bool(a[5])
        divisor = a[6]
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    return Pool(kind, k, stride, pad, dil, ceil, include_pad, divisor, (val.shape[2], val.shape[3]))


def _batch_norm(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Elementwise | None:
    _, w, b, mean, var, eps = bn_args(node)
    vals = [attr_value(gm, n.target) if isinstance(n, torch.fx.Node) and n.op == "get_attr" else n
            for n in (w, b, mean, var)]  # fmt: skip
    if any(v is not None and not isinstance(v, torch.Tensor) for v in vals) or vals[2] is None:
        return None
    w_, b_, mean_, var_ = (v.detach().double() if v is not None else None for v in vals)
    scale = (w_ if w_ is not None else 1.0) / torch.sqrt(var_ + float(eps))
    shift = (b_ if b_ is not None else 0.0) - mean_ * scale
    return Elementwise("affine", scale=tuple(scale.tolist()), shift=tuple(shift.tolist()))


def _pair(v: object) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return (int(v), int(v))


def _stack(chain: list[torch.fx.Node], layers: list) -> Stack:
    steps: list[Step] = []
    for layer in layers:
        if isinstance(layer, Pool) or not steps:
            steps.append(Step(layer if isinstance(layer, Pool) else None, ()))
        if isinstance(layer, Elementwise):
            steps[-1] = Step(steps[-1].pool, (*steps[-1].ops, layer))
    x = chain[0].args[0].meta["val"]
    y = chain[-1].meta["val"]
    return Stack(tuple(n.name for n in chain), tuple(steps), tuple(x.shape), tuple(y.shape))
