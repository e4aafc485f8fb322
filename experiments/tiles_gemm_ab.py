"""Experiment (issue 21, item 6): our tile micro-kernels against kernel libraries called per tile.

Not part of the package. Per layer class of ResNet-50 and BERT-base, the product of one tile as the
strategy "tiles" cuts it at batch 1 on 2 workers (the first tile of a representative layer; shapes as
``pathweave tiles`` plans them), timed single-threaded on one core:

- ours: the kernel the tile runs (``pw_gemm_packed`` for 1x1 and im2col'd 3x3 convolutions,
  ``pw_gemm_packed_t`` for the "narrow" path of few positions, ``pw_gemm_rows`` for linears), weights
  packed once as the program builds them; a linear's tokens at AVX2 are packed into panels and run
  ``pw_gemm_packed`` (``tile_kernels_seq.c``'s ``matmul_packed``), that packing not timed (cached per
  worker across the tiles of a row band);
- openblas: ``cblas_sgemm`` of the scipy-openblas32 wheel the tiles already call (packs both operands on
  every call), kernel family forced (``PATHWEAVE_OPENBLAS_CORETYPE``): Haswell at avx2;
- onednn: ``torch.ops.mkldnn._linear_pointwise`` on the same product in its own layout (positions or
  tokens as rows, C transposed for a convolution tile), weights plain, ``ONEDNN_MAX_CPU_ISA`` at avx2;
- mkl: ``torch.mm`` (ATen's fp32 matmul goes to MKL);
- blis: ``blis.py.gemm`` (pip install blis, the BLIS of spaCy's cython-blis; no torch), ``BLIS_ARCH_TYPE``
  at avx2.

The 3x3 class times only the product over an im2col'd input; the Winograd path the plans pick for
most 3x3 layers at AVX-512 is a different algorithm (fewer FLOPs) and is not compared here. Each level
runs in a subprocess of its own (the libraries read their ISA variables once, at load). Every call
from Python pays dispatch (ctypes ~1 us, a torch op ~3-5 us): the ``call`` row times each path on a
1x8x8 product and the table reports GFLOP/s with that cost taken off (a library called per tile from
the C runtime would not pay it); raw times are in the JSON.

Run: ``flock /tmp/pw-bench.lock python experiments/tiles_gemm_ab.py [--out /tmp/pw-gemm-ab]``.
Writes ``OUT/tiles_gemm_ab.md`` and ``OUT/tiles_gemm_ab.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's pathweave

#: (class, model, layer, M output channels or tokens, N positions or features, K, kernel of ours).
#: Shapes are the first tile of the layer in ``pathweave tiles resnet50`` / ``bert_base`` (2 workers).
#: Convolutions: C[M][N] = W[M][K] B[K][N] (N positions); linears: C[M][N] = A[M][K] W^T (M tokens).
CASES: list[tuple[str, str, str, int, int, int, str]] = [
    ("1x1 conv", "resnet50", "56x56 64->64", 64, 336, 64, "packed"),
    ("1x1 conv", "resnet50", "56x56 64->256", 128, 168, 64, "packed"),
    ("1x1 conv", "resnet50", "28x28 128->512", 88, 140, 128, "packed"),
    ("1x1 conv", "resnet50", "28x28 512->128", 64, 140, 512, "packed"),
    ("1x1 conv narrow", "resnet50", "14x14 256->1024", 64, 196, 256, "packed_t"),
    ("1x1 conv narrow", "resnet50", "14x14 1024->256", 64, 196, 1024, "packed_t"),
    ("1x1 conv narrow", "resnet50", "7x7 2048->512", 64, 49, 2048, "packed_t"),
    ("3x3 conv (im2col)", "resnet50", "56x56 64->64", 64, 112, 576, "packed"),
    ("3x3 conv (im2col)", "resnet50", "28x28 128->128", 64, 140, 1152, "packed"),
    ("3x3 conv (im2col)", "resnet50", "14x14 256->256", 64, 196, 2304, "packed"),
    ("3x3 conv (im2col)", "resnet50", "7x7 512->512", 64, 49, 4608, "packed"),
    ("linear 128 tokens", "bert_base", "qkv/out 768->768", 128, 128, 768, "rows"),
    ("linear 128 tokens", "bert_base", "ffn down 3072->768", 128, 128, 3072, "rows"),
    ("linear batch 1", "bert_base", "pooler 768->768", 1, 768, 768, "rows"),
    ("linear batch 1", "resnet50", "fc 2048->1000 (half)", 1, 496, 2048, "rows"),
]

LEVELS = {
    "avx512": {"PATHWEAVE_ISA": "avx512", "BLIS_ARCH_TYPE": "0"},
    "avx2": {"PATHWEAVE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "PATHWEAVE_OPENBLAS_CORETYPE": "Haswell", "BLIS_ARCH_TYPE": "3"},
}  # fmt: skip
PATHS = ("ours", "openblas", "onednn", "mkl", "blis")
#: rows of a panel of pw_gemm_packed (PW_MR) and of pw_gemm_packed_t / pw_gemm_rows (PW_TR)
MR, TR = 8, 16
F32P = ctypes.POINTER(ctypes.c_float)
I64 = ctypes.c_int64


def _ptr(a: np.ndarray) -> ctypes._Pointer:
    return a.ctypes.data_as(F32P)


def pack_rows(w: np.ndarray, width: int) -> np.ndarray:
    """W [M][K] as panels of ``width`` rows, k-major ([M/width][K][width], zero rows past M)."""
    m, k = w.shape
    padded = np.zeros((-(-m // width) * width, k), np.float32)
    padded[:m] = w
    return np.ascontiguousarray(padded.reshape(-1, width, k).transpose(0, 2, 1))


def _ours(lib: ctypes.CDLL, case: tuple, isa: str, w: np.ndarray, b: np.ndarray, c: np.ndarray) -> Callable:
    """Our kernel on the tile, operands laid out as the program lays them out."""
    kind, (m, n, k) = case[6], case[3:6]
    mnk = (I64(m), I64(n), I64(k))
    if kind == "packed_t":
        wp, t = pack_rows(w, TR), np.zeros(n * -(-m // TR) * TR + 64, np.float32)
        args = (*mnk, _ptr(wp), I64(0), _ptr(b), I64(n), _ptr(c), I64(n), None, None, 0, _ptr(t))
        return lambda: lib.pw_gemm_packed_t(*args)
    if kind == "rows" and isa == "avx2" and m >= MR:  # bind_transformer's rows_kernel is AVX-512 only
        a_packed = pack_rows(w, MR)  # w is A (tokens) here, b the weight [K][N]
        args = (*mnk, _ptr(a_packed), I64(0), _ptr(b), I64(n), _ptr(c), I64(n), None, None, 0)
        return lambda: lib.pw_gemm_packed(*args)
    if kind == "rows":  # A read in place, the weight [K][N] in panels of TR columns
        bp = pack_rows(np.ascontiguousarray(b.T), TR)
        args = (*mnk, _ptr(w), I64(k), _ptr(bp), _ptr(c), I64(n))
        return lambda: lib.pw_gemm_rows(*args)
    wp = pack_rows(w, MR)
    args = (*mnk, _ptr(wp), I64(0), _ptr(b), I64(n), _ptr(c), I64(n), None, None, 0)
    return lambda: lib.pw_gemm_packed(*args)


def candidates(lib: ctypes.CDLL, sgemm: Callable, case: tuple, isa: str) -> dict[str, Callable[[], object]]:
    """One callable per path computing the tile's product into its own output."""
    import blis.py
    import torch

    m, n, k = case[3:6]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)  # weights (conv) or tokens (linear)
    b = rng.standard_normal((k, n), dtype=np.float32)  # input positions (conv) or weight^T (linear)
    c = {p: np.zeros((m, n), np.float32) for p in PATHS}
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    # oneDNN's linear: rows are the positions of a conv tile (C transposed) or the tokens of a linear
    x, wt = (tb.T.contiguous(), ta) if case[6] != "rows" else (ta, tb.T.contiguous())
    s_args = (101, 111, 111, m, n, k, 1.0, _ptr(a), k, _ptr(b), n, 0.0, _ptr(c["openblas"]), n)
    fns = {
        "ours": _ours(lib, case, isa, a, b, c["ours"]),
        "openblas": lambda: sgemm(*s_args),
        "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, wt, None, "none", [], ""),
        "mkl": lambda: torch.mm(ta, tb, out=torch.from_numpy(c["mkl"])),
        "blis": lambda: blis.py.gemm(a, b, out=c["blis"], beta=0.0),
    }
    for f in fns.values():
        f()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = {"ours": c["ours"], "openblas": c["openblas"], "blis": c["blis"], "mkl": c["mkl"]}
    got["onednn"] = fns["onednn"]().numpy().T if case[6] != "rows" else fns["onednn"]().numpy()
    for p, out in got.items():
        err = float(np.abs(out - ref).max() / (np.abs(ref).max() + 1e-30))
        if err > 1e-4:
            raise RuntimeError(f"{p} on {case[:3]} at {isa}: relative error {err:.2e}")
    return fns


def best_us(fn: Callable[[], object], budget_s: float = 0.15, repeats: int = 7) -> float:
    """Microseconds per call: the fastest of ``repeats`` loops of as many calls as fill ``budget_s``, in
    this thread's CPU time (every path runs on the calling thread; the 2 cores are shared with other
    work, and CPU time leaves out the slices other processes take, wall time would not)."""
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-6)
    calls = max(1, int(budget_s / repeats / once))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t0) / calls)
    return best * 1e6


def _sgemm() -> Callable:
    from pathweave.tiles.runtime import sgemm_address

    proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_int, ctypes.c_float, F32P, ctypes.c_int, F32P, ctypes.c_int,
                             ctypes.c_float, F32P, ctypes.c_int)  # fmt: skip
    return proto(sgemm_address())


def measure_level(isa: str) -> dict:
    """All cases at the level this process was started under (``LEVELS[isa]`` in its environment)."""
    import torch

    from pathweave.tiles.runtime import _library, blas_core

    torch.set_num_threads(1)
    lib, sgemm = _library(), _sgemm()
    lib.pw_gemm_isa.restype = ctypes.c_char_p
    rows = []
    tiny = ("call", "", "1x8x8", 1, 8, 8, "rows")
    call = {p: best_us(f) for p, f in candidates(lib, sgemm, tiny, isa).items()}
    for case in CASES:
        fns = candidates(lib, sgemm, case, isa)
        us = {p: best_us(f) for p, f in fns.items()}
        rows.append({"case": case[:3], "mnk": case[3:6], "kernel": case[6], "us": us})
    aten = torch.backends.cpu.get_cpu_capability()
    return {"isa": isa, "ours_isa": lib.pw_gemm_isa().decode(), "aten": aten, "openblas": blas_core(),
            "call_us": call, "rows": rows}  # fmt: skip


def table(levels: list[dict]) -> str:
    """Markdown: GFLOP/s per path and level, the call cost taken off; the best marked."""
    head = "| class | layer (tile M x N x K) | level | " + " | ".join(PATHS) + " | best / ours |"
    lines = [head, "|" + "---|" * (len(PATHS) + 4)]
    for i, case in enumerate(CASES):
        for lv in levels:
            m, n, k = case[3:6]
            net = {p: max(lv["rows"][i]["us"][p] - lv["call_us"][p], 0.05) for p in PATHS}
            gf = {p: 2 * m * n * k / net[p] / 1e3 for p in PATHS}
            top = max(gf, key=gf.get)
            cells = [f"**{gf[p]:.0f}**" if p == top else f"{gf[p]:.0f}" for p in PATHS]
            lines.append(f"| {case[0]} | {case[1]} {case[2]} ({m}x{n}x{k}) | {lv['isa']} | "
                         + " | ".join(cells) + f" | {top} {gf[top] / gf['ours']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/pw-gemm-ab"))
    ap.add_argument("--level", choices=list(LEVELS), help=argparse.SUPPRESS)  # the per-level subprocess
    args = ap.parse_args()
    if args.level:
        print(json.dumps(measure_level(args.level)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    levels = []
    load0 = os.getloadavg()
    from pathweave.machine import ISA_LEVELS, cpu_isa

    runnable = ISA_LEVELS[ISA_LEVELS.index(cpu_isa()) :]  # the CPU's level and those below it
    for isa, env in LEVELS.items():
        if isa not in runnable:
            continue
        run = subprocess.run([sys.executable, __file__, "--level", isa], env={**os.environ, **env},
                             capture_output=True, text=True, check=True)  # fmt: skip
        levels.append(json.loads(run.stdout.strip().splitlines()[-1]))
    cpu = Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(": \t")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": [load0, os.getloadavg()],
            "cpu": cpu}  # fmt: skip
    text = table(levels)
    (args.out / "tiles_gemm_ab.json").write_text(json.dumps({"meta": meta, "levels": levels}, indent=1))
    (args.out / "tiles_gemm_ab.md").write_text(f"{meta}\n\n{text}\n")
    print(meta)
    for lv in levels:
        print(lv["isa"], "ours:", lv["ours_isa"], "aten:", lv["aten"], "openblas:", lv["openblas"],
              "call us:", {p: round(v, 2) for p, v in lv["call_us"].items()})  # fmt: skip
    print(text)


if __name__ == "__main__":
    main()
