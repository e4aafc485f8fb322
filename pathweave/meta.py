"""The ``node.meta`` keys pathweave writes, each defined once with its value type.

torch's own keys (``val``, ``tensor_meta``, ``stack_trace``, ``nn_module_stack``) are read, never written.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``NodeCost``: FLOPs, bytes moved and the static Ramiel weight of one node.
COST = "pathweave.cost"
#: ``float``: measured time of one node in microseconds (from one profiling run).
TIME_US = "pathweave.time_us"


@dataclass(frozen=True)
class NodeCost:
    """Static cost of one fx node, computed from its input and output shapes."""

    flops: int
    bytes: int
    weight: float
    kind: str  # "conv", "matmul", "pool", "elementwise", "reduction", "view", "other"
