"""The torch module a stack becomes: runs its sequences as the generated C kernels or Triton kernels."""

from __future__ import annotations

import ctypes
import threading

import torch

from pathweave.stacks.c_kernels import compile_source, source
from pathweave.stacks.model import Sequence
from pathweave.stacks.plan import gpu_sequences
from pathweave.stacks.triton_kernels import TritonSequence, run_sequences


class StackModule(torch.nn.Module):
    """Runs a stack's sequences; input and output are NCHW float32 tensors, stored channels_last on CPU.
    On CPU the generated C kernels run (compiled here when ``device`` is the CPU, so that a missing
    compiler fails the pass); on other devices the Triton kernels of ``triton_kernels``, built at first
    use, over sequences regrouped for them (``gpu_sequences``: ``max_steps`` steps each)."""

    def __init__(self, sequences: list[Sequence], max_steps: int | None = None, device: str = "cpu") -> None:
        super().__init__()
        self.sequences = sequences
        self.max_steps = max_steps
        self.sources = [source(s, "stack_seq") for s in sequences]
        self._fns: list[ctypes._CFuncPtr] = []
        if torch.device(device).type == "cpu":
            self._compile()
        self._local = threading.local()
        self._triton: list[TritonSequence] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return self._on_device(x)
        if not self._fns:
            self._compile()
        x = x.contiguous(memory_format=torch.channels_last)
        last = len(self.sequences) - 1
        for i, (seq, fn) in enumerate(zip(self.sequences, self._fns, strict=True)):
            h, w = seq.shapes[-1]
            shape = (seq.batch, seq.channels, h, w)
            out = (
                torch.empty(shape, memory_format=torch.channels_last)
                if i == last
                else self._scratch(i, shape)
            )
            fn(x.data_ptr(), out.data_ptr(), 0, seq.batch * seq.blocks)
            x = out
        return x

    def _compile(self) -> None:
        self._fns = [compile_source(src, "stack_seq") for src in self.sources]

    def _on_device(self, x: torch.Tensor) -> torch.Tensor:
        if self._triton is None:
            self._triton = [TritonSequence(s) for s in gpu_sequences(self.sequences, self.max_steps)]
        return run_sequences(self._triton, x)

    def _scratch(self, i: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Intermediates between sequences, kept per calling thread (fresh pages fault on every call)."""
        bufs = self._local.__dict__.setdefault("bufs", {})
        if i not in bufs:
            bufs[i] = torch.empty(shape, memory_format=torch.channels_last)
        return bufs[i]

    def extra_repr(self) -> str:
        steps = sum(len(s.steps) for s in self.sequences)
        return f"{steps} steps in {len(self.sequences)} sequences"
