"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss -> torch (see ``onnx_ops``).

Exporters write them for models that return their loss. Both pick ``-input[n, target[n, d...], d...]``
(input already log-probabilities for the first, ``log_softmax`` over axis 1 of the scores for the
second), weight each pick by ``weight[target]`` (0 where the target is ``ignore_index``), then reduce:
none, sum, or mean = sum / sum of the weights taken.
"""

from __future__ import annotations

from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, _str, op


def nll(
    logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str, ignore: int | None
) -> torch.Tensor:
    t = target.to(torch.int64)
    ignored = t == ignore if ignore is not None else torch.zeros_like(t, dtype=torch.bool)
    safe = torch.where(ignored, torch.zeros_like(t), t)  # an ignored target may lie outside [0, C)
    picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = weight[safe] if weight is not None else torch.ones_like(picked)
    w = torch.where(ignored, torch.zeros_like(w), w)
    loss = picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def _reduction(n: OnnxNode) -> tuple[str, int | None]:
    reduction = _str(n.at, "reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise UnsupportedError(f"reduction {reduction!r} is not supported")
    if n.rank(0) < 2 or n.val(1).dtype not in (torch.int32, torch.int64):
        raise UnsupportedError(f"{n.op_type} needs an input of rank 2 or more and integer targets")
    n.floats_only()
    ignore = n.at.get("ignore_index")
    return reduction, None if ignore is None else int(ignore)


@op("NegativeLogLikelihoodLoss", attrs=("ignore_index", "reduction"))
def nll_loss(n: OnnxNode) -> Any:
    reduction, ignore = _reduction(n)
    weight = n.x(2) if n.has(2) else None
    return n.call(nll, n.x(0), n.x(1), weight, reduction, ignore)


@op("SoftmaxCrossEntropyLoss", attrs=("ignore_index", "reduction"))
def softmax_cross_entropy(n: OnnxNode) -> Any:
    reduction, ignore = _reduction(n)
    logp = n.call(torch.log_softmax, n.x(0), 1)
    weight = n.x(2) if n.has(2) else None
    return n.call(nll, logp, n.x(1), weight, reduction, ignore), logp
