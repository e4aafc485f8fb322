"""ONNX RNN, GRU and LSTM -> torch, unrolled over the (static) sequence length.

Gate order is ONNX's: GRU z, r, h; LSTM i, o, f, c with peepholes i, o, f. Directions forward,
reverse and bidirectional; ``layout`` 1 puts the batch first. The default activations only (sigmoid
and tanh), no ``clip``, no ``input_forget``, and ``sequence_lens`` only where every sequence is full:
anything else is refused.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.frontend.onnx_ops import OnnxNode, _str, op

_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
         "input_forget", "layout", "linear_before_reset")  # fmt: skip


def _cell(kind: str, x, h, c, w, r, b, p, linear_before_reset: bool):
    """One time step: new hidden state (and cell state for LSTM)."""
    size = h.shape[-1]
    gx = x @ w.t() + (b[: w.shape[0]] if b is not None else 0)
    rb = b[w.shape[0] :] if b is not None else torch.zeros(r.shape[0], dtype=x.dtype)
    if kind == "RNN":
        return torch.tanh(gx + h @ r.t() + rb), None
    if kind == "GRU":
        gh = h @ r.t()
        z = torch.sigmoid(gx[..., :size] + gh[..., :size] + rb[:size])
        rr = torch.sigmoid(gx[..., size : 2 * size] + gh[..., size : 2 * size] + rb[size : 2 * size])
        if linear_before_reset:
            hh = torch.tanh(gx[..., 2 * size :] + rr * (gh[..., 2 * size :] + rb[2 * size :]))
        else:
            hh = torch.tanh(gx[..., 2 * size :] + (rr * h) @ r[2 * size :].t() + rb[2 * size :])
        return (1 - z) * hh + z * h, None
    gates = gx + h @ r.t() + rb
    i, o, f, g = gates.split(size, -1)
    pi, po, pf = p.split(size) if p is not None else (0, 0, 0)
    i = torch.sigmoid(i + pi * c)
    f = torch.sigmoid(f + pf * c)
    c = f * c + i * torch.tanh(g)
    o = torch.sigmoid(o + po * c)
    return o * torch.tanh(c), c


def recurrence(kind: str, x, w, r, b, h0, c0, p, directions: int, layout: int, linear_before_reset: bool):
    """Y (seq, directions, batch, hidden), Y_h and Y_c (directions, batch, hidden); batch first with
    ``layout`` 1."""
    if layout:
        x = x.transpose(0, 1)
        h0 = h0.transpose(0, 1) if h0 is not None else None
        c0 = c0.transpose(0, 1) if c0 is not None else None
    size = r.shape[-1]
    ys, hs, cs = [], [], []
    for d in range(abs(directions)):
        h = h0[d] if h0 is not None else torch.zeros(x.shape[1], size, dtype=x.dtype)
        c = c0[d] if c0 is not None else torch.zeros(x.shape[1], size, dtype=x.dtype)
        steps = range(x.shape[0] - 1, -1, -1) if d == 1 or directions == -1 else range(x.shape[0])
        out = [None] * x.shape[0]
        for t in steps:
            h, c_new = _cell(kind, x[t], h, c, w[d], r[d], b[d] if b is not None else None,
                             p[d] if p is not None else None, linear_before_reset)  # fmt: skip
            c = c_new if c_new is not None else c
            out[t] = h
        ys.append(torch.stack(out, 0))
        hs.append(h)
        cs.append(c)
    y, yh, yc = torch.stack(ys, 1), torch.stack(hs, 0), torch.stack(cs, 0)
    if layout:
        return y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
    return y, yh, yc


def _check(n: OnnxNode) -> None:
    n.floats_only()
    acts = [a.decode() if isinstance(a, bytes) else a for a in n.at.get("activations", _DEFAULTS[n.op_type])]
    defaults = _DEFAULTS[n.op_type] * (2 if _str(n.at, "direction", "forward") == "bidirectional" else 1)
    if acts != defaults[: len(acts)] or len(acts) not in (len(defaults), len(_DEFAULTS[n.op_type])):
        raise UnsupportedError(f"{n.op_type} activations {acts} (only the defaults {_DEFAULTS[n.op_type]})")
    if "clip" in n.at or n.at.get("input_forget", 0):
        raise UnsupportedError(f"{n.op_type} with clip or input_forget is not supported")
    if n.has(4):  # sequence_lens: only where every sequence runs the whole length
        lens = n.ints(4, "sequence_lens")
        length = n.val(0).shape[1 if n.at.get("layout", 0) else 0]
        if any(v != length for v in lens):
            raise UnsupportedError(f"{n.op_type} with sequence_lens {lens} shorter than {length}")


@op("RNN", "GRU", "LSTM", attrs=ATTRS)
def rnn(n: OnnxNode) -> Any:
    _check(n)
    direction = _str(n.at, "direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise UnsupportedError(f"direction {direction!r}")
    directions = {"forward": 1, "reverse": -1, "bidirectional": 2}[direction]
    lstm = n.op_type == "LSTM"
    ins = [n.ins[i] if n.has(i) else None for i in (3, 5, 6, 7)]
    b, h0, c0, p = ins[0], ins[1], ins[2] if lstm else None, ins[3] if lstm else None
    out = n.call(recurrence, n.op_type, n.x(0), n.x(1), n.x(2), b, h0, c0, p, directions,
                 int(n.at.get("layout", 0)), bool(n.at.get("linear_before_reset", 0)))  # fmt: skip
    return tuple(n.call(operator.getitem, out, i) for i in range(3 if lstm else 2))
