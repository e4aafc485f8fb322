"""Rewrite ``conv_transpose2d`` (no tile op) into ops the tiles run, so that a decoder's upsampling stays
inside the tile program instead of cutting it into islands around an ATen node.

The phase (sub-pixel) decomposition, per spatial dim: a transposed convolution with stride s writes
output position ``u = i s + k d - p`` from input ``i`` and tap ``k``. Split the padded positions ``u + p``
by their phase ``r = (u + p) mod s``: phase r gets the taps with ``k d = r (mod s)``, each reading input
``q - m`` at phase row ``q = (u + p) div s`` where ``m = (k d - r) / s``. Those taps are ``s / gcd(d, s)``
apart, so their ``m`` are ``d / gcd(d, s)`` apart: phase r is an ordinary convolution of the input, stride
1, with the phase's taps flipped (correlation), dilation ``d / gcd(d, s)`` and padding ``max(m)`` minus the
first phase row kept. All phases are computed over the same rows ``[q0, q0 + Q)``, interleaved (phase
row q, phase r -> position q s + r) and cropped to the output. Every product of the transposed
convolution is made once, none is added: exact up to the order of a sum. Where every phase has the
same taps count and padding (d = 1 and s divides k: U-Net's 2x2/2, a GAN's 4x4/2), the phases are one
convolution with s_h s_w times the output channels, interleaved by ``pixel_shuffle``; otherwise one
convolution per phase, concatenated, then shuffled. A phase with no tap (k < s) is the bias alone.

Only float32 with constant weights (and bias) is rewritten; anything else stays an ATen node (an island
boundary, ``tiles.mixed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pathweave.errors import PlanError
from pathweave.passes.util import add_constant, aten, constant, emit

_PARAMS = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding",
                "groups")  # fmt: skip


@dataclass(frozen=True)
class Axis:
    """One spatial dim of the decomposition: per phase its taps (ascending, empty: no tap), padding and
    first kept row of its convolution; the rows per phase, the taps' dilation in the input, and where the
    output starts in the interleaved rows."""

    taps: tuple[tuple[int, ...], ...]
    pads: tuple[int, ...]
    starts: tuple[int, ...]
    rows: int
    dilation: int
    crop: int
    size: int  # the output's
    kernel: int
    length: int  # the input's

    @property
    def stride(self) -> int:
        return len(self.taps)

    def conv_rows(self, r: int) -> int:
        """The rows phase r's convolution gives."""
        return self.length + 2 * self.pads[r] - self.dilation * (len(self.taps[r]) - 1)

    @property
    def uniform(self) -> bool:
        """Every phase has a tap, and the same count, padding and first row (one convolution for all)."""
        counts = {len(t) for t in self.taps}
        return 0 not in counts and len(counts) == 1 and len(set(self.pads)) == len(set(self.starts)) == 1

    def verify(self) -> None:
        """Raise PlanError unless each tap is in exactly one phase and every phase's convolution covers
        its rows and the interleaved rows cover the output."""
        seen = sorted(k for t in self.taps for k in t)
        if seen != list(range(self.kernel)):
            raise PlanError(f"transposed conv phases hold taps {seen}, not 0..{self.kernel - 1}")
        for r, t in enumerate(self.taps):
            if t and (self.starts[r] < 0 or self.starts[r] + self.rows > self.conv_rows(r)):
                raise PlanError(f"phase {r}: rows [{self.starts[r]}, +{self.rows}) outside its convolution")
        if self.crop < 0 or self.crop + self.size > self.rows * self.stride:
            raise PlanError(f"output [{self.crop}, +{self.size}) outside {self.rows * self.stride} rows")


def axis(length: int, kernel: int, stride: int, padding: int, output_padding: int, dilation: int) -> Axis:
    """The phases of one spatial dim (module docstring)."""
    size = (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    first = padding // stride
    rows = -(-(padding + size) // stride) - first
    step = dilation // math.gcd(dilation, stride)
    taps, pads, starts = [], [], []
    for r in range(stride):
        t = tuple(k for k in range(kernel) if (k * dilation) % stride == r)
        before = (t[-1] * dilation - r) // stride - first if t else 0
        after = rows - length + step * (len(t) - 1) - before
        pad = max(before, after, 0)
        taps.append(t)
        pads.append(pad)
        starts.append(pad - before)
    return Axis(tuple(taps), tuple(pads), tuple(starts), rows, step, padding - first * stride, size, kernel,
                length)  # fmt: skip


@dataclass(frozen=True)
class Decompose:
    node: str
    h: Axis
    w: Axis
    groups: int

    @property
    def uniform(self) -> bool:
        return self.h.uniform and self.w.uniform

    def verify(self) -> None:
        self.h.verify()
        self.w.verify()


def _val(x: Any) -> torch.Tensor | None:
    v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _pair(v: Any) -> list[int]:
    vals = [int(v)] if isinstance(v, int) else [int(e) for e in v]
    return vals * 2 if len(vals) == 1 else vals


def transposed_args(node: torch.fx.Node) -> dict[str, Any] | None:
    """A 2-D transposed convolution's arguments by ``conv_transpose2d``'s names (defaults filled), from
    ``conv_transpose2d.input`` or ``convolution`` with ``transposed``; None for any other node."""
    if node.op != "call_function":
        return None
    if node.target == aten.conv_transpose2d.input:
        names, defaults = _PARAMS, (None, None, None, 1, 0, 0, 1, 1)
    elif node.target == aten.convolution.default:
        names, defaults = _CONV_PARAMS, (None,) * 9
    else:
        return None
    args = dict(zip(names, defaults, strict=True))
    args.update(zip(names, node.args, strict=False))
    args.update(node.kwargs)
    if node.target == aten.convolution.default and not args["transposed"]:
        return None
    return args


def _plan(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Decompose | None:
    args = transposed_args(node)
    if args is None:
        return None
    x, w, out = _val(args["input"]), constant(gm, args["weight"]), _val(node)
    bias = args["bias"]
    if x is None or w is None or out is None or x.dim() != 4 or w.dim() != 4:
        return None
    if {x.dtype, w.dtype, out.dtype} != {torch.float32} or (bias is not None and constant(gm, bias) is None):
        return None
    stride, padding, extra, dilation = (_pair(args[k]) for k in ("stride", "padding", "output_padding",
                                                                 "dilation"))  # fmt: skip
    h, w_ = (
        axis(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], extra[i], dilation[i]) for i in (0, 1)
    )
    if (h.size, w_.size) != tuple(out.shape[2:]):
        return None  # not the shape eager gives: leave it to ATen
    plan = Decompose(node.name, h, w_, int(args["groups"]))
    plan.verify()
    return plan


def propose(gm: torch.fx.GraphModule) -> list[Decompose]:
    return [d for n in gm.graph.nodes if (d := _plan(gm, n)) is not None]


def phase_weight(
    w: torch.Tensor, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...]
) -> torch.Tensor:
    """The convolution weight [O, C/groups, Jh, Jw] of one phase from transposed weights [C, O/groups, kh,
    kw]: each group's in/out channels swapped, the phase's taps flipped."""
    c, o_g, kh, kw = w.shape
    w5 = w.reshape(groups, c // groups, o_g, kh, kw).transpose(1, 2)
    sub = w5[:, :, :, list(reversed(taps_h))][:, :, :, :, list(reversed(taps_w))]
    return sub.reshape(groups * o_g, c // groups, len(taps_h), len(taps_w))


class _Rewrite:
    """The nodes of one decomposition, inserted before the transposed convolution."""

    def __init__(self, gm: torch.fx.GraphModule, node: torch.fx.Node, d: Decompose) -> None:
        self.gm, self.node, self.d = gm, node, d
        self.args = transposed_args(node)
        self.w = constant(gm, self.args["weight"]).detach()
        b = self.args["bias"]
        self.b = constant(gm, b).detach() if b is not None else None
        self.x = self.args["input"]
        self.n = self.x.meta["val"].shape[0]
        self.out_c = self.w.shape[1] * d.groups

    def const(self, name: str, value: torch.Tensor) -> torch.fx.Node:
        return add_constant(self.gm, self.node, f"{self.node.name}_{name}", value.contiguous())

    def conv(
        self, weight: torch.Tensor, bias: torch.Tensor | None, pads: list[int], tag: str
    ) -> torch.fx.Node:
        d = self.d
        b = self.const(f"{tag}_b", bias) if bias is not None else None
        return emit(self.gm.graph, aten.conv2d.default, self.x, self.const(f"{tag}_w", weight), b, [1, 1],
                     pads, [d.h.dilation, d.w.dilation], d.groups)  # fmt: skip

    def uniform(self) -> torch.fx.Node:
        """All phases as one convolution, output channels o-major ([O, s_h, s_w])."""
        d = self.d
        phases = [phase_weight(self.w, d.groups, th, tw) for th in d.h.taps for tw in d.w.taps]
        o_g = self.out_c // d.groups
        stacked = torch.stack([p.reshape(d.groups, o_g, *p.shape[1:]) for p in phases], 2)
        weight = stacked.reshape(self.out_c * len(phases), *phases[0].shape[1:])
        bias = self.b.repeat_interleave(len(phases)) if self.b is not None else None
        return self.conv(weight, bias, [d.h.pads[0], d.w.pads[0]], "phases")

    def separate(self) -> torch.fx.Node:
        """One convolution per phase, each cut to the phase rows and viewed as [N O, 1, Qh, Qw], joined
        into [N, O s_h s_w, Qh, Qw] (o-major)."""
        d, graph = self.d, self.gm.graph
        pieces = []
        for rh, th in enumerate(d.h.taps):
            for rw, tw in enumerate(d.w.taps):
                pieces.append(self._phase(rh, rw, th, tw))
        joined = emit(graph, aten.cat.default, pieces, 1)
        return emit(graph, aten.reshape.default, joined, [self.n, -1, d.h.rows, d.w.rows])

    def _phase(self, rh: int, rw: int, th: tuple[int, ...], tw: tuple[int, ...]) -> torch.fx.Node:
        d, graph = self.d, self.gm.graph
        shape = [self.n * self.out_c, 1, d.h.rows, d.w.rows]
        if not th or not tw:  # no tap reaches this phase: the bias alone, as eager
            fill = self.b if self.b is not None else torch.zeros(self.out_c)
            c = self.const(f"phase{rh}_{rw}_fill", fill.repeat(self.n).reshape(-1, 1, 1, 1))
            return emit(graph, aten.expand.default, c, shape)
        y = self.conv(phase_weight(self.w, d.groups, th, tw), self.b, [d.h.pads[rh], d.w.pads[rw]],
                      f"phase{rh}_{rw}")  # fmt: skip
        y = emit(graph, aten.slice.Tensor, y, 2, d.h.starts[rh], d.h.starts[rh] + d.h.rows)
        y = emit(graph, aten.slice.Tensor, y, 3, d.w.starts[rw], d.w.starts[rw] + d.w.rows)
        return emit(graph, aten.reshape.default, y, shape)

    def interleave(self, y: torch.fx.Node) -> torch.fx.Node:
        """[N, O s_h s_w, A, B] (o-major) -> [N, O, A s_h, B s_w]: phase (rh, rw) of row a, column b lands
        at (a s_h + rh, b s_w + rw)."""
        sh, sw, graph = self.d.h.stride, self.d.w.stride, self.gm.graph
        if sh == sw == 1:
            return y
        if sh == sw:
            return emit(graph, aten.pixel_shuffle.default, y, sh)
        a, b = y.meta["val"].shape[2:]
        y = emit(graph, aten.reshape.default, y, [self.n, self.out_c, sh, sw, a, b])
        y = emit(graph, aten.permute.default, y, [0, 1, 4, 2, 5, 3])
        return emit(graph, aten.reshape.default, y, [self.n, self.out_c, a * sh, b * sw])

    def crop(self, y: torch.fx.Node, top: int, left: int) -> torch.fx.Node:
        """The output's rows and columns of the interleaved ``y`` (a copy: its consumers read it dense)."""
        rows, cols = y.meta["val"].shape[2:]
        h, w = self.d.h.size, self.d.w.size
        cut = [-left, -(cols - left - w), -top, -(rows - top - h)]
        return y if not any(cut) else emit(self.gm.graph, aten.constant_pad_nd.default, y, cut, 0.0)

    def build(self) -> torch.fx.Node:
        d = self.d
        if d.uniform:  # the convolution's extra rows before the phase rows, in each phase
            y = self.interleave(self.uniform())
            return self.crop(y, d.h.starts[0] * d.h.stride + d.h.crop, d.w.starts[0] * d.w.stride + d.w.crop)
        return self.crop(self.interleave(self.separate()), d.h.crop, d.w.crop)


def apply(gm: torch.fx.GraphModule, matches: list[Decompose]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for d in matches:
        node = nodes[d.node]
        with gm.graph.inserting_before(node):
            out = _Rewrite(gm, node, d).build()
        out.meta = {**node.meta, "val": out.meta["val"]}
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
