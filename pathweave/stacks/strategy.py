"""The stacks strategy: the fast sequential path with BrainSlug's stacks collapsed into generated kernels."""

from __future__ import annotations

import warnings

import torch

from pathweave.frontend.graph import Captured
from pathweave.passes.pipeline import FAST_CPU
from pathweave.sequential import SequentialExecutor
from pathweave.stacks.collapse import Policy
from pathweave.stacks.module import StackModule


class StacksStrategy(SequentialExecutor):
    """``SequentialExecutor`` whose pipeline ends with the stacks pass (``max_steps`` per sequence; None:
    unrestricted). On CPU the fast path's rewrites come first and the stacks run generated C; on CUDA
    the stacks pass is the only rewrite and they run generated Triton kernels (``triton_kernels``). Where
    the stacks cannot be built (no C compiler, no Triton) or do not match, it runs without them, with a
    warning."""

    strategy = "stacks"

    def __init__(
        self,
        captured: Captured,
        threads: int | None = None,
        max_steps: int | None = None,
        device: str = "cpu",
    ) -> None:
        cpu = torch.device(device).type == "cpu"
        pipeline = (*FAST_CPU, Policy(max_steps)) if cpu else (Policy(max_steps, device),)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            super().__init__(captured, device=device, threads=threads, pipeline=pipeline)
        if not self.passes:  # the pipeline fell back to the plain graph: try again without the stacks
            why = "; ".join(str(w.message) for w in caught)
            warnings.warn(f"{captured.name}: stacks not used ({why})", stacklevel=2)
            super().__init__(captured, device=device, threads=threads)
        else:
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    @property
    def stacks(self) -> list[StackModule]:
        return [m for m in self.gm.modules() if isinstance(m, StackModule)]

    def summary(self) -> str:
        layers = sum(len(s.steps) for m in self.stacks for s in m.sequences)
        seqs = sum(len(m.sequences) for m in self.stacks)
        return f"{len(self.stacks)} stacks, {layers} steps in {seqs} sequences; " + ", ".join(
            f"{p.name}:{p.rewrites}" for p in self.passes
        )


__all__ = ["StacksStrategy"]
