"""What the harness times: one built candidate, pathweave strategy or peer, bound to its inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Kind = Literal["peer", "pathweave"]


class Skip(Exception):
    """A candidate that cannot run here (an optional peer not installed, no CUDA); the message says why."""


@dataclass
class Candidate:
    """``run()`` performs one inference on the inputs the candidate was built with and returns its outputs.

    ``threads`` is the intra-op thread count the harness sets (``torch.set_num_threads``) before each
    call, outside the timed region; ``sync`` is called after each timed call where the work is
    asynchronous (CUDA). ``cuda_events``: time the call with CUDA events on the current stream (the GPU's
    own clock, from the first launch to the last kernel) instead of the host clock around a synchronize.
    ``quiesce``, where given, is called after each timed call, outside the timed region: pathweave's tile
    workers spin for the next inference, which would slow the candidate timed next. ``isa`` and
    ``can_limit``: see ``bench.isa`` (a bench at a level below the CPU's limits every peer it can).
    """

    name: str
    kind: Kind
    run: Callable[[], Any]
    threads: int
    sync: Callable[[], None] | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    cuda_events: bool = False
    quiesce: Callable[[], None] | None = None  # after each timed call: stop spinning threads
    isa: str | None = None  # the vector level it ran at, read back from its library where it tells
    can_limit: bool = True  # False for a peer with no knob to lower its level (ONNX Runtime's MLAS)


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """Outputs of any candidate (tensor, numpy array, tuple, list, dict, HF ModelOutput) as CPU tensors."""
    import numpy as np

    if isinstance(out, torch.Tensor):
        return [out.detach().to("cpu")]
    if isinstance(out, np.ndarray):
        return [torch.from_numpy(out)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in flatten_outputs(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in flatten_outputs(v)]
    if hasattr(out, "to_tuple"):
        return flatten_outputs(out.to_tuple())
    return []
