"""What a stack is: its pooling and element-wise ops, grouped into steps and into sequences of steps."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    kind: str  # "max" or "avg"
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dilation: tuple[int, int]
    ceil: bool
    include_pad: bool
    divisor: int | None
    out_hw: tuple[int, int]

    def divisors(self, size_in: int, size_out: int, axis: int) -> list[float]:
        """Avg pooling's divisor along one axis for every output position (separable, as in PyTorch)."""
        k, s, pad, d = self.kernel[axis], self.stride[axis], self.pad[axis], self.dilation[axis]
        out = []
        for o in range(size_out):
            start = o * s - pad
            if self.include_pad:
                out.append(float(min(start + k, size_in + pad) - start))
            else:
                out.append(float(sum(1 for j in range(k) if 0 <= start + j * d < size_in)))
        return out


@dataclass(frozen=True)
class Elementwise:
    kind: str  # "affine": x * scale + shift (per channel or one value); "clamp": to [lo, hi]
    scale: tuple[float, ...] = ()
    shift: tuple[float, ...] = ()
    lo: float = -math.inf
    hi: float = math.inf


@dataclass(frozen=True)
class Step:
    """At most one pooling op, then element-wise ops (BrainSlug's step)."""

    pool: Pool | None
    ops: tuple[Elementwise, ...]

    def rows_in(self, rows: int) -> int:
        """Input rows the step reads to produce ``rows`` consecutive output rows (its halo included)."""
        if self.pool is None:
            return rows
        p = self.pool
        return (rows - 1) * p.stride[0] + (p.kernel[0] - 1) * p.dilation[0] + 1


@dataclass(frozen=True)
class Sequence:
    """Steps computed depth first in blocks of ``block_rows`` output rows; ``shapes[i]`` is (H, W) before
    step i (``shapes[-1]`` the output)."""

    steps: tuple[Step, ...]
    channels: int
    batch: int
    shapes: tuple[tuple[int, int], ...]
    block_rows: int

    @property
    def blocks(self) -> int:
        return -(-self.shapes[-1][0] // self.block_rows)
