"""Fallback capture: torch.fx symbolic tracing, with the failing module named on error."""

from __future__ import annotations

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.passes.shape_prop import ShapeProp

from pathweave.frontend.graph import Captured


class _NamingTracer(torch.fx.Tracer):
    """A tracer that remembers which module it is inside, so a failure can name it."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    def call_module(self, m, forward, args, kwargs):  # type: ignore[override]
        self.stack.append(f"{self.path_of_module(m) or '<root>'} ({type(m).__name__})")
        out = super().call_module(m, forward, args, kwargs)
        self.stack.pop()
        return out


class TraceFailure(Exception):
    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"in module {where}: {reason}")
        self.where = where


def trace_module(model: torch.nn.Module, args: tuple, name: str) -> Captured:
    """Symbolically trace positional tensor inputs; shapes come from one ShapeProp run."""
    tracer = _NamingTracer()
    try:
        graph = tracer.trace(model)
    except Exception as exc:
        where = tracer.stack[-1] if tracer.stack else f"<root> ({type(model).__name__})"
        raise TraceFailure(where, first_line(exc)) from exc
    gm = torch.fx.GraphModule(tracer.root, graph, class_name=f"{name}_graph")
    with torch.no_grad():
        ShapeProp(gm).propagate(*args)
        out = model(*args)
    flat_out, out_spec = pytree.tree_flatten(out)
    _flatten_output(gm, out_spec)
    _, in_spec = pytree.tree_flatten((tuple(args), {}))
    return Captured(gm, in_spec, out_spec, tuple(args), "fx", name)


def _flatten_output(gm: torch.fx.GraphModule, out_spec: pytree.TreeSpec) -> None:
    """Make the graph return a flat tuple like the export path does."""
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat, _ = pytree.tree_flatten(out_node.args[0])
    out_node.args = (tuple(flat),)
    gm.recompile()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
