"""The ``node.meta`` keys pathweave writes, each defined once with its value type.

torch's own keys (``val``, ``tensor_meta``, ``stack_trace``, ``nn_module_stack``) are read, never written.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``NodeCost``: FLOPs, bytes moved and the static Ramiel weight of one node.
COST = "pathweave.cost"
#: ``float``: measured time of one node in microseconds (from one profiling run).
TIME_US = "pathweave.time_us"
#: ``Replica``: the sub-batch a node of a hyperclustered graph computes, and the node it copies.
REPLICA = "pathweave.replica"


@dataclass(frozen=True)
class NodeCost:
    """Static cost of one fx node, computed from its input and output shapes."""

    flops: int
    bytes: int
    weight: float
    kind: str  # "conv", "matmul", "pool", "elementwise", "reduction", "view", "other"


@dataclass(frozen=True)
class Replica:
    """A node of a graph replicated per sub-batch: ``group`` is the sub-batch (0..copies-1); ``of`` names
    the node of the sub-batch graph it copies ("" for the slice that feeds the group its inputs)."""

    group: int
    of: str


#: ``Packed`` on a weight node: the weights laid out for the tile micro-kernels, so that every program
#: built from one graph shares one copy.
PACKED_WEIGHTS = "pathweave.packed_weights"


@dataclass(frozen=True)
class Packed:
    """A weight laid out for the tile micro-kernels: ``how`` says which layout (a convolution's groups,
    or a matmul's column blocks with the shape and strides they were read with); ``data`` is a numpy
    array, or None where the layout does not apply (depthwise)."""

    how: object
    data: object


#: ``NodeKernels``: the CUDA kernels one node launched in a profiled run, with their launch resources.
KERNELS = "pathweave.kernels"


@dataclass(frozen=True)
class Kernel:
    """One kernel (or memcpy/memset, with empty grid) as the CUDA profiler saw it."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int  # per thread
    shared_memory: int  # bytes per block, static + dynamic
    duration_us: float


@dataclass(frozen=True)
class NodeKernels:
    """Every kernel a node launched, in launch order; ``time_us`` is their summed GPU time."""

    kernels: tuple[Kernel, ...]

    @property
    def time_us(self) -> float:
        return sum(k.duration_us for k in self.kernels)
