"""Comparing outputs, one rule everywhere: shapes equal, NaN where the reference has NaN, values close."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def mismatch(
    got: Sequence[torch.Tensor],
    want: Sequence[torch.Tensor],
    rtol: float,
    atol: float,
    scale_atol: bool = False,
) -> str | None:
    """Why ``got`` differs from ``want`` beyond ``rtol``/``atol``, or None when it does not.

    With ``scale_atol``, ``atol`` is relative to each output's largest magnitude (when above 1): a value
    computed as a difference of large ones (a batch norm's shift after values grew to 1e6) carries an
    absolute rounding error of that size, however it is computed."""
    if len(got) != len(want):
        return f"{len(got)} outputs where {len(want)} are expected"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if tuple(g.shape) != tuple(w.shape):
            return f"output {i} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        tol = atol
        if scale_atol and w.numel() and w.is_floating_point():
            tol = atol * max(1.0, w.float().abs().nan_to_num(0.0, 0.0, 0.0).max().item())
        if not torch.allclose(g.float(), w.float(), rtol=rtol, atol=tol, equal_nan=True):
            diff = (g.float() - w.float()).abs().nan_to_num(float("inf")).max().item()
            return f"output {i} differs by up to {diff:.3g}"
    return None
