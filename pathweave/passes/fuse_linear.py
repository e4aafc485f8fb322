"""Linear layers as oneDNN kernels with fused activations.

On x86 oneDNN's fp32 linear runs its own AVX-512/AVX2 kernels; ``aten.linear`` goes to MKL, which on
the AMD EPYC machines we measure on ran a 128x768x3072 linear at 7.5 ms against oneDNN's 3.4 ms
(one thread). The activation that follows (gelu, tanh, ...) runs in oneDNN's epilogue; ReLU does not,
as oneDNN's ReLU maps NaN to 0 (see ``fuse_conv``).

That margin is the CPU's, not oneDNN's: forced to AVX2 on the same Zen 5 (MKL runs its AVX2 code
there at either level) it fell from 1.77x to 1.06x on a Llama-style decoder, and on an AVX2-only Zen 3
the sequential path ran such a decoder slower than eager (47.8 vs 40.8 ms). So each linear shape is
timed both ways once per process, at the thread count and vector level the graph is built under, and
rewritten only where oneDNN is the faster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.fx

from pathweave.passes.util import aten, constant

_mkldnn = torch.ops.mkldnn
#: activations oneDNN fuses into a linear with eager's NaN and inf, by its attr name
_UNARY = {aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh", aten.silu.default: "swish",
          aten.gelu.default: "gelu"}  # fmt: skip
#: timed calls per kernel when a linear shape is measured (interleaved, the fastest counts)
TIMED_CALLS = 5
#: per process: (input shape, weight shape, threads, vector level) -> oneDNN faster than ATen
_ONEDNN_FASTER: dict[tuple, bool] = {}


@dataclass(frozen=True)
class FuseLinear:
    linear: str
    unary: str | None
    attr: str
    algorithm: str  # gelu's approximation ("none" = erf, "tanh"); "" otherwise


def _activation(node: torch.fx.Node) -> tuple[torch.fx.Node | None, str, str]:
    user = next(iter(node.users)) if len(node.users) == 1 else None
    if user is None or user.target not in _UNARY:
        return None, "none", ""
    if user.target == aten.gelu.default:
        return user, "gelu", str(user.kwargs.get("approximate", "none"))
    return user, _UNARY[user.target], ""


def _measure(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether oneDNN's linear runs ``x @ weight.T`` faster than ``aten.linear`` (MKL) here: the fastest
    of ``TIMED_CALLS`` interleaved calls each, after one untimed call of each."""
    kernels = (
        lambda: aten.linear.default(x, weight),
        lambda: _mkldnn._linear_pointwise.default(x, weight, None, "none", [], ""),
    )
    best = [float("inf")] * len(kernels)
    with torch.no_grad():
        for k in kernels:
            k()
        for _ in range(TIMED_CALLS):
            for i, k in enumerate(kernels):
                t0 = time.perf_counter()
                k()
                best[i] = min(best[i], time.perf_counter() - t0)
    return best[1] < best[0]


def onednn_faster(val: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a linear of input ``val`` (its shape) and ``weight`` runs faster on oneDNN, measured once
    per process for each shape, thread count and vector level (a model's 56 linears have 4 shapes).
    A symbolic shape (a dynamic dim) is not measured: oneDNN, as before the measurement."""
    if not all(isinstance(d, int) for d in val.shape):
        return True
    key = (
        tuple(val.shape),
        tuple(weight.shape),
        torch.get_num_threads(),
        torch.backends.cpu.get_cpu_capability(),
    )
    if key not in _ONEDNN_FASTER:
        x = torch.randn(val.shape, generator=torch.Generator().manual_seed(0))
        _ONEDNN_FASTER[key] = _measure(x, weight.detach().contiguous())
    return _ONEDNN_FASTER[key]


def propose(gm: torch.fx.GraphModule) -> list[FuseLinear]:
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target != aten.linear.default:
            continue
        x, w = node.args[0], node.args[1]
        b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        weight = constant(gm, w)
        if val is None or val.dtype != torch.float32 or weight is None or weight.dim() != 2:
            continue
        if b is not None and constant(gm, b) is None:
            continue
        if not onednn_faster(val, weight):
            continue
        act, attr, algorithm = _activation(node)
        found.append(FuseLinear(node.name, act.name if act else None, attr, algorithm))
    return found


def apply(gm: torch.fx.GraphModule, matches: list[FuseLinear]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for m in matches:
        lin = nodes[m.linear]
        x, w = lin.args[0], lin.args[1]
        b = lin.args[2] if len(lin.args) > 2 else lin.kwargs.get("bias")
        last = nodes[m.unary] if m.unary else lin
        with gm.graph.inserting_before(last):
            args = (x, w, b, m.attr, [], m.algorithm)
            new = gm.graph.call_function(_mkldnn._linear_pointwise.default, args)
        new.meta["val"] = last.meta.get("val")
        last.replace_all_uses_with(new)
        if m.unary:
            gm.graph.erase_node(last)
        gm.graph.erase_node(lin)
