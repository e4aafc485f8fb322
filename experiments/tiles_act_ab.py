"""Experiment (issue 20, item 2): the element-wise kernel's activations and maths inside small models,
tiles against pathweave's sequential path (ATen), in one process.

Not part of the package. Per op: a CNN (conv 3x3 16->32 -> op -> conv 3x3 32->32 -> op, 1x16x56x56) and
an MLP (linear 256->512 -> op -> linear 512->256 -> op, 64 rows), each built with ``strategy="tiles"``
and ``"sequential"``, timed in interleaved rounds (rotating order), medians quoted. The same models with
ReLU (a kernel that existed before) give the baseline: an op's marginal cost is its model's time minus
the ReLU model's, per strategy.

Run: ``python experiments/tiles_act_ab.py [--rounds 30] [--isa avx2]`` (``--isa`` sets the convolution
micro-kernels; run with ``ATEN_CPU_CAPABILITY=avx2`` for ATen's side. The element-wise kernels follow the
CPU: GCC's target clones pick the AVX-512 code on an AVX-512 CPU whatever the setting).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles.runtime import use_gemm_isa

OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu (baseline)": torch.relu,
    "silu": F.silu,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "relu6 (hardtanh)": F.relu6,
    "leaky_relu": F.leaky_relu,
    "elu": F.elu,
    "clamp": lambda x: x.clamp(-1.0, 1.0),
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal (of clamp_min)": lambda x: x.clamp_min(0.5).reciprocal(),  # 1/conv: too ill-conditioned
    "square": torch.square,
    "pow 1.7": lambda x: x**1.7,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "sign": torch.sign,
    "maximum": lambda x: torch.maximum(x, -0.5 * x),
}


class Cnn(torch.nn.Module):
    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op
        self.a, self.b = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.b(self.op(self.a(x))))


class Mlp(torch.nn.Module):
    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op
        self.a, self.b = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.b(self.op(self.a(x))))


def _medians(
    fns: dict[str, Callable[[], object]], rest: dict[str, Callable[[], None]], rounds: int
) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for fn in fns.values():
        fn()
    for r in range(rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
            rest[k]()  # the tile workers park instead of spinning beside ATen's threads
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--isa", default=None)
    args = parser.parse_args()
    if args.isa:
        use_gemm_isa(args.isa)
    torch.manual_seed(0)
    print(f"{'op':26s} {'model':5s} {'tiles ms':>9s} {'seq ms':>8s} {'ratio':>6s}")
    for name, op in OPS.items():
        for model, x in ((Cnn(op), torch.randn(1, 16, 56, 56)), (Mlp(op), torch.randn(64, 256))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fns = {s: pathweave.optimize(model.eval(), x, strategy=s) for s in ("tiles", "sequential")}
            with torch.no_grad():
                calls = {k: (lambda f=f, x=x: f(x)) for k, f in fns.items()}
                m = _medians(calls, {k: f.quiesce for k, f in fns.items()}, args.rounds)
            kind, ratio = type(model).__name__.lower(), m["tiles"] / m["sequential"]
            print(f"{name:26s} {kind:5s} {m['tiles']:9.3f} {m['sequential']:8.3f} {ratio:6.2f}")


def kernels(rounds: int, n: int = 32 * 56 * 56) -> None:
    """Each code of native/tile_act.c (``pw_act_row``, one thread) against its ATen op on the same
    ``n`` floats (``torch.set_num_threads(1)``), interleaved, medians: the kernels alone, without the
    runtimes' scheduling."""
    import ctypes

    import numpy as np

    from pathweave.tiles import abi
    from pathweave.tiles.runtime import _library

    lib = _library()
    lib.pw_act_row.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
    torch.set_num_threads(1)
    base = torch.randn(n) * 3
    buf, params = np.empty(n, np.float32), np.array([-1.0, 1.0, 1.0], np.float32)
    codes = {"silu": abi.ACT_SILU, "hardswish": abi.ACT_HARDSWISH, "hardsigmoid": abi.ACT_HARDSIGMOID,
             "relu6 (hardtanh)": abi.ACT_RELU6, "leaky_relu": abi.ACT_LEAKY_RELU, "elu": abi.ACT_ELU,
             "clamp": abi.ACT_CLAMP, **{k: v for k, v in abi.MATHS.items()}}  # fmt: skip
    aten = {**OPS, "reciprocal": torch.reciprocal, "leaky_relu": lambda t: F.leaky_relu(t, -1.0)}
    print(f"{'code':18s} {'tile us':>8s} {'aten us':>8s} {'ratio':>6s}   ({n} floats, 1 thread)")
    for name, code in codes.items():
        p = params if name != "leaky_relu" else params[:1].copy()
        # sqrt of negatives is slow in hardware (both sides): that family gets positive inputs
        x = (base.abs() + 1e-3) if name in ("sqrt", "rsqrt", "log") else base

        def tile(code: int = code, p: np.ndarray = p, x: torch.Tensor = x) -> None:
            buf[:] = x.numpy()  # the element-wise kernel's in-place row, as binary_row leaves it
            lib.pw_act_row(buf.ctypes.data, n, code, p.ctypes.data)

        def eager(op: Callable[[torch.Tensor], torch.Tensor] = aten[name], x: torch.Tensor = x) -> None:
            torch.from_numpy(buf)[:] = x  # the same copy on both sides
            op(x)

        m = _medians({"tile": tile, "aten": eager}, {"tile": lambda: None, "aten": lambda: None}, rounds)
        print(f"{name:18s} {m['tile'] * 1e3:8.1f} {m['aten'] * 1e3:8.1f} {m['tile'] / m['aten']:6.2f}")


if __name__ == "__main__":
    import sys

    if "--kernels" in sys.argv:
        kernels(rounds=int(sys.argv[sys.argv.index("--kernels") + 1]))
    else:
        main()
