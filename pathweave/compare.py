"""Comparing outputs, one rule everywhere: shapes equal, NaN where the reference has NaN, values close."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def mismatch(
    got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], rtol: float, atol: float
) -> str | None:
    """Why ``got`` differs from ``want`` beyond ``rtol``/``atol``, or None when it does not."""
    if len(got) != len(want):
        return f"{len(got)} outputs where {len(want)} are expected"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if tuple(g.shape) != tuple(w.shape):
            return f"output {i} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        if not torch.allclose(g.float(), w.float(), rtol=rtol, atol=atol, equal_nan=True):
            diff = (g.float() - w.float()).abs().nan_to_num(float("inf")).max().item()
            return f"output {i} differs by up to {diff:.3g}"
    return None
