"""Straight-line Python for one lane: each fx node one line, hand-offs as queue puts and gets.

The generated function ``lane(inputs, queues)`` binds the graph inputs, runs its nodes in order,
puts every value another lane needs into that lane's queue right after computing it, and takes
values from other lanes where it first needs them. Constants and callables are bound as globals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from pathweave.errors import UnsupportedError
from pathweave.frontend.graph import attr_value

_LITERALS = (int, bool, str, type(None))


@dataclass
class LaneSource:
    """A lane's source, its globals, and which node each source line runs (for error messages)."""

    source: str
    globals: dict[str, Any]
    line_node: dict[int, str] = field(default_factory=dict)


class _Binder:
    def __init__(self) -> None:
        self.globals: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def bind(self, value: Any, prefix: str = "_k") -> str:
        key = id(value)
        if key not in self._ids:
            name = f"{prefix}{len(self._ids)}"
            self._ids[key] = name
            self.globals[name] = value
        return self._ids[key]

    def render(self, arg: Any) -> str:
        if isinstance(arg, torch.fx.Node):
            return f"v_{arg.name}"
        if isinstance(arg, (list, tuple)):
            inner = ", ".join(self.render(a) for a in arg)
            return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{k!r}: {self.render(v)}" for k, v in arg.items()) + "}"
        if isinstance(arg, _LITERALS) or (isinstance(arg, float) and math.isfinite(arg)):
            return repr(arg)
        return self.bind(arg)


def lane_source(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    sends: dict[str, list[int]],
    receives: set[str],
    outputs: list[torch.fx.Node] | None,
    queue_index: dict[tuple[str, int], int],
    lane: int,
) -> LaneSource:
    """Source of one lane. ``sends[name]`` lists the lanes that need the value; ``receives`` the
    values this lane takes from others; ``outputs`` (lane 0 only) the graph's outputs to return."""
    b = _Binder()
    lines = ["def lane(inputs, q):"]
    line_node: dict[int, str] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, p in enumerate(placeholders):
        lines.append(f"    v_{p.name} = inputs[{i}]")
    got: set[str] = set()
    last_use = _last_uses(nodes, outputs)
    for i, node in enumerate(nodes):
        for inp in node.all_input_nodes:
            if inp.name in receives and inp.name not in got:
                lines.append(f"    v_{inp.name} = _take(q[{queue_index[(inp.name, lane)]}])")
                got.add(inp.name)
        lines.append(f"    v_{node.name} = {_call(gm, node, b)}")
        line_node[len(lines)] = node.name
        for target in sends.get(node.name, []):
            lines.append(f"    q[{queue_index[(node.name, target)]}].put(v_{node.name})")
        # drop what this lane no longer reads, so the allocator reuses the memory on the next op
        dead = [
            n for n in [*node.all_input_nodes, node] if last_use.get(n.name, -1) == i and n.op != "get_attr"
        ]
        if dead:
            lines.append("    " + " = ".join(f"v_{n.name}" for n in dead) + " = None")
    if outputs is not None:
        for out in outputs:
            if out.name in receives and out.name not in got:
                lines.append(f"    v_{out.name} = _take(q[{queue_index[(out.name, lane)]}])")
                got.add(out.name)
        lines.append(f"    return ({''.join(f'v_{o.name}, ' for o in outputs)})")
    else:
        lines.append("    return None")
    _bind_attrs(gm, b, lines)
    return LaneSource("\n".join(lines) + "\n", b.globals, line_node)


def _last_uses(nodes: list[torch.fx.Node], outputs: list[torch.fx.Node] | None) -> dict[str, int]:
    """Index of the last node of this lane that reads each value (its producer's if none does);
    graph outputs stay alive to the end."""
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        last.setdefault(node.name, i)
        for inp in node.all_input_nodes:
            last[inp.name] = i
    for out in outputs or []:
        last.pop(out.name, None)
    return last


def _call(gm: torch.fx.GraphModule, node: torch.fx.Node, b: _Binder) -> str:
    args = ", ".join(
        [b.render(a) for a in node.args] + [f"{k}={b.render(v)}" for k, v in node.kwargs.items()]
    )
    if node.op == "call_function":
        return f"{b.bind(node.target, '_f')}({args})"
    if node.op == "call_module":
        return f"{b.bind(gm.get_submodule(str(node.target)), '_m')}({args})"
    if node.op == "call_method":
        self_arg, *rest = [b.render(a) for a in node.args]
        rest += [f"{k}={b.render(v)}" for k, v in node.kwargs.items()]
        return f"{self_arg}.{node.target}({', '.join(rest)})"
    raise UnsupportedError(f"cannot generate code for {node.format_node()}")


def _bind_attrs(gm: torch.fx.GraphModule, b: _Binder, lines: list[str]) -> None:
    """Constants (``get_attr`` nodes) read by this lane become globals named like their nodes."""
    source = "\n".join(lines)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and f"v_{node.name}" in source:
            b.globals[f"v_{node.name}"] = attr_value(gm, str(node.target))
