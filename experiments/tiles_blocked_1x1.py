"""Experiment (issue 21): how much a channel-blocked layout would buy the 1x1 convolutions on AVX2.

Not part of the package. Compiles ``tiles_blocked_1x1.c`` (gcc, into a temporary directory) and times,
interleaved on one thread, ResNet-50-shaped 1x1 products (O outputs, K inputs, P positions, as a whole
layer and as the tiles cut it):

- ``tiles``: the package's kernel (``pw_gemm_packed``: vectors along positions, the input rows of NCHW
  read in place, NCHW out, bias + ReLU);
- ``blocked``: input already blocked [K/8][P][8], output blocked [O/8][P][8] (a layout kept blocked
  between layers);
- ``blocked_nchw``: the same input, output transposed into NCHW rows (what the tiles' buffers need);
- ``reorder``: the NCHW -> blocked copy of the input alone (numpy; a native copy is ~3x faster).

Both blocked kernels compute O rounded down to 24 rows (their figures are scaled to the same O).
On an AVX2 Zen 3 (2026-11-28, a quiet minute): blocked and blocked_nchw 1.0-1.5x the tiles' kernel
(56-74 GFLOP/s against 36-70), the NCHW store costing little here. Built into the tiles twice (a blocked
copy of each tile's input kept for the layer's other channel tiles, the NCHW store with bias, residual
and ReLU, weights packed per channel range in groups of 24; the second time also prefetching the
residual and C lines ahead): per layer at 1 worker 1x1 layers without a residual 1.1-1.25x faster, those
with one 0.9-0.97x (their cold residual and output rows), 14x14/7x7 layers 0.97x; whole models, paired
A/B at 2 workers: ResNet-50 1.003x, GoogLeNet 0.967x. Not kept: the gain needs activations kept
blocked across layers.

Run: ``python experiments/tiles_blocked_1x1.py [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from pathweave.tiles import runtime as rt

I64, VP = ctypes.c_int64, ctypes.c_void_p
SHAPES = [(256, 64, 3136), (64, 256, 3136), (512, 128, 784), (128, 512, 784), (1024, 256, 196),
          (128, 64, 224), (64, 256, 224)]  # fmt: skip


def _compile(tmp: Path) -> ctypes.CDLL:
    src = Path(__file__).with_suffix(".c")
    out = tmp / "blocked_1x1.so"
    subprocess.run(["gcc", "-O3", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.blocked_1x1.argtypes = [I64, I64, I64, VP, VP, VP, I64, ctypes.c_int]
    return lib


def _panels(w: np.ndarray, rows: int) -> np.ndarray:
    o, k = w.shape
    return np.ascontiguousarray(w[: o // rows * rows].reshape(o // rows, rows, k).transpose(0, 2, 1))


def case(blk: ctypes.CDLL, o: int, k: int, p: int, rounds: int) -> str:
    tiles = rt._library()
    tiles.pw_gemm_packed.argtypes = [I64, I64, I64, VP, I64, VP, I64, VP, I64, VP, VP, ctypes.c_int]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((o, k), dtype=np.float32) / np.float32(np.sqrt(k))
    b = rng.standard_normal((k, p), dtype=np.float32)
    bias = np.zeros(o, np.float32)
    xb = np.ascontiguousarray(b.reshape(k // 8, 8, p).transpose(0, 2, 1))
    w8, w24 = _panels(w, 8), _panels(w, 24)
    o24 = o // 24 * 24
    c, yn = np.zeros((o, p), np.float32), np.zeros((o, p), np.float32)
    yb = np.zeros((o24 // 8, p, 8), np.float32)
    xa, wa, ya, yna = xb.ctypes.data, w24.ctypes.data, yb.ctypes.data, yn.ctypes.data
    runs = {
        "tiles": lambda: tiles.pw_gemm_packed(o, p, k, w8.ctypes.data, 0, b.ctypes.data, p, c.ctypes.data, p,
                                              bias.ctypes.data, None, 1),
        "blocked": lambda: blk.blocked_1x1(o24, p, k, xa, wa, ya, 0, 0),
        "blocked_nchw": lambda: blk.blocked_1x1(o24, p, k, xa, wa, yna, p, 1),
        "reorder": lambda: np.copyto(xb, b.reshape(k // 8, 8, p).transpose(0, 2, 1)),
    }  # fmt: skip
    for f in runs.values():
        f()
    ref = np.maximum(w @ b, 0)
    assert np.allclose(c, ref, atol=1e-3) and np.allclose(
        yn[:o24, : p // 4 * 4], (w @ b)[:o24, : p // 4 * 4], atol=1e-3
    )
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, f in runs.items():
            t = time.perf_counter_ns()
            for _ in range(5):
                f()
            times[name].append((time.perf_counter_ns() - t) / 5)
    scale = {"blocked": o / o24, "blocked_nchw": o / o24}
    med = {name: statistics.median(v) * scale.get(name, 1.0) for name, v in times.items()}
    flops = 2 * o * k * p
    cells = [
        f"{name} {med[name] / 1e3:.0f} us ({flops / med[name]:.0f} GFLOP/s)"
        for name in runs
        if name != "reorder"
    ]
    return f"O {o} K {k} P {p}: " + ", ".join(cells) + f", reorder {med['reorder'] / 1e3:.0f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        blk = _compile(Path(tmp))
        for o, k, p in SHAPES:
            print(case(blk, o, k, p, args.rounds), flush=True)


if __name__ == "__main__":
    main()
