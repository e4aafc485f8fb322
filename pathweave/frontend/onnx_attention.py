"""ONNX Attention (opsets 23 to 25) -> torch, as the spec computes it.

Q, K, V come as (batch, heads, seq, head_size), or as (batch, seq, hidden) with ``q_num_heads`` and
``kv_num_heads``. Q and K are each scaled by the square root of ``scale`` (default 1/sqrt(head_size))
before their product, the way the spec's reference rounds; grouped-query K and V heads are repeated to
Q's; the bias adds the mask (bool: -inf where false; float: added), the causal frontier (aligned to the
end of the cache: past length, or ``nonpad_kv_seqlen`` minus the query length), the sliding window
and the key padding. Rows masked everywhere give zeros, not NaN. Outputs: Y, the key and value caches
with the new keys appended, and the QK product at the stage ``qk_matmul_output_mode`` names (0 and 1:
after softcap, 2: with the bias, 3: after softmax).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, op, torch_dtype

ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
         "softmax_precision", "left_window_size", "right_window_size")  # fmt: skip


@dataclass(frozen=True)
class Settings:
    root: float  # the square root of the scale, rounded to Q's dtype as the spec's reference rounds it
    causal: bool
    q_heads: int | None
    kv_heads: int | None
    softcap: float
    qk_mode: int
    left: int
    right: int
    softmax_dtype: torch.dtype | None


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, seq, hidden) -> (batch, heads, seq, hidden / heads)."""
    return x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads).transpose(1, 2)


def _frontier(length_q: int, length_kv: int, offset: Any, allowed: Any, dtype: torch.dtype) -> torch.Tensor:
    """0 where ``allowed(i + offset, j)`` (query i, key j), -inf elsewhere: (L, S), or (B, 1, L, S)
    for a per-batch ``offset`` tensor."""
    i = torch.arange(length_q).reshape(length_q, 1)
    j = torch.arange(length_kv).reshape(1, length_kv)
    pos = i + offset.reshape(-1, 1, 1, 1) if isinstance(offset, torch.Tensor) else i + offset
    zero, minus = torch.zeros((), dtype=dtype), torch.full((), -math.inf, dtype=dtype)
    return torch.where(allowed(pos, j), zero, minus)


def _as_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return torch.where(mask, torch.zeros((), dtype=dtype), torch.full((), -math.inf, dtype=dtype))
    return mask.to(dtype)


def _bias(q: torch.Tensor, k: torch.Tensor, mask: Any, past: int, nonpad: Any, s: Settings) -> torch.Tensor:
    length_q, length_kv = q.shape[2], k.shape[2]
    dtype = q.dtype
    bias = torch.zeros((length_q, length_kv), dtype=dtype)
    if mask is not None and mask.shape[-1] < length_kv:  # a mask shorter than the cache: the rest is masked
        fill = False if mask.dtype == torch.bool else -math.inf
        mask = torch.nn.functional.pad(mask, (0, length_kv - mask.shape[-1]), value=fill)
    offset = nonpad.reshape(-1) - length_q if (nonpad is not None and past == 0) else past
    if mask is not None:
        bias = bias + _as_bias(mask, dtype)
    if s.causal:
        bias = bias + _frontier(length_q, length_kv, offset, lambda i, j: j <= i, dtype)
    if s.left >= 0 or s.right >= 0:
        left, right = s.left, s.right

        def inside(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            ok = torch.ones_like(i - j, dtype=torch.bool)
            ok = ok & (i - j <= left) if left >= 0 else ok
            return ok & (j - i <= right) if right >= 0 else ok

        bias = bias + _frontier(length_q, length_kv, offset, inside, dtype)
    if nonpad is not None:
        keep = torch.arange(length_kv).reshape(1, -1) < nonpad.reshape(-1, 1)
        bias = bias + _as_bias(keep.reshape(keep.shape[0], 1, 1, length_kv), dtype)
    return bias


def attention(q, k, v, mask, past_k, past_v, nonpad, *settings: Any) -> tuple[torch.Tensor, ...]:
    """Attention's four outputs; ``settings`` are a ``Settings``' fields (plain values, which fx's
    generated code can spell)."""
    s = Settings(*settings)
    three_d = q.dim() == 3
    if three_d:
        q, k, v = _heads(q, s.q_heads), _heads(k, s.kv_heads), _heads(v, s.kv_heads)
    root = s.root
    past = past_k.shape[2] if past_k is not None else 0
    present_k = torch.cat([past_k, k], 2) if past_k is not None else k
    present_v = torch.cat([past_v, v], 2) if past_v is not None else v
    bias = _bias(q, present_k, mask, past, nonpad, s)
    kk, vv = present_k, present_v
    if q.shape[1] != kk.shape[1]:  # grouped-query attention: each K, V head serves several Q heads
        kk = kk.repeat_interleave(q.shape[1] // kk.shape[1], 1)
        vv = vv.repeat_interleave(q.shape[1] // vv.shape[1], 1)
    qk = torch.matmul(q * root, (kk * root).transpose(2, 3))
    if s.softcap > 0:
        qk = torch.tanh(qk / s.softcap) * s.softcap
    biased = qk + bias
    qk_out = biased if s.qk_mode == 2 else qk
    scores = biased.to(s.softmax_dtype) if s.softmax_dtype is not None else biased
    peak = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isneginf(peak), torch.zeros_like(peak), peak))
    total = e.sum(-1, keepdim=True)
    probs = e / torch.where(total == 0, torch.ones_like(total), total)
    probs = torch.where(torch.isneginf(bias.amax(-1, keepdim=True)), torch.zeros_like(probs), probs)
    if s.qk_mode == 3:
        qk_out = probs
    y = torch.matmul(probs.to(q.dtype), vv)
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    return y, present_k, present_v, qk_out.to(q.dtype)


def _settings(n: OnnxNode) -> Settings:
    at = n.at
    three_d = n.rank(0) == 3
    if three_d and ("q_num_heads" not in at or "kv_num_heads" not in at):
        raise UnsupportedError("Attention on 3-d inputs needs q_num_heads and kv_num_heads")
    mode = int(at.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise UnsupportedError(f"qk_matmul_output_mode {mode} is not supported")
    precision = at.get("softmax_precision")
    q = n.val(0)
    head_size = q.shape[2] // at["q_num_heads"] if three_d else q.shape[3]
    scale = float(at["scale"]) if "scale" in at else 1 / math.sqrt(head_size)
    root = float(torch.tensor(math.sqrt(scale), dtype=q.dtype))  # here: a tensor in the graph would be lifted
    return Settings(
        root, bool(at.get("is_causal", 0)),
        at.get("q_num_heads") if three_d else None, at.get("kv_num_heads") if three_d else None,
        float(at.get("softcap", 0.0)), mode, int(at.get("left_window_size", -1)),
        int(at.get("right_window_size", -1)),
        None if precision is None else torch_dtype(precision, "softmax_precision"),
    )  # fmt: skip


@op("Attention", attrs=ATTRS)
def attention_op(n: OnnxNode) -> Any:
    n.floats_only()
    s = _settings(n)
    if n.has(4) != n.has(5):
        raise UnsupportedError("Attention needs past_key and past_value together")
    if n.has(6) and n.has(4):
        raise UnsupportedError("Attention takes nonpad_kv_seqlen or a past cache, not both")
    heads_q = s.q_heads or n.val(0).shape[1]
    heads_kv = s.kv_heads or n.val(1).shape[1]
    if heads_q % heads_kv:
        raise UnsupportedError(f"{heads_q} query heads do not group over {heads_kv} key/value heads")
    ins = [n.ins[i] if n.has(i) else None for i in range(3, 7)]
    out = n.call(attention, n.x(0), n.x(1), n.x(2), *ins, *dataclasses.astuple(s))
    return tuple(n.call(operator.getitem, out, i) for i in range(4))
