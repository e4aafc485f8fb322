# ruff: noqa: E501  (lines of generated C are kept whole, so the template reads like the C it emits)
"""The C source of a sequence's depth-first kernel, and its compilation by the system compiler.

One C function runs a sequence over tasks (sample, block of output rows, as ``plan`` cut them): a task
computes the rows its block needs step by step into small per-thread buffers. Tensors are NHWC
(channels_last) float32; the innermost loops run over channels with the per-channel parameters as
constant arrays, which the compiler vectorises (-O3 -march=native). Tasks are spread over threads by
OpenMP: the library links libgomp.so.1, which resolves to the copy torch has already loaded, so the
kernels share torch's thread team and thread count (``torch.set_num_threads``) instead of waking
threads of their own (Python worker threads woke slowly enough here to double the time). ctypes
releases the GIL during the call. Identical sequences share one compiled library (cached by a hash of
the source under the user cache dir).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import threading

from pathweave.errors import UnsupportedError
from pathweave.machine import cache_dir
from pathweave.stacks.model import Elementwise, Pool, Sequence, Step


def _floats(name: str, values: tuple[float, ...]) -> str:
    body = ", ".join(
        f"{v!r}f" if math.isfinite(v) else ("INFINITY" if v > 0 else "-INFINITY") for v in values
    )
    return f"static const float {name}[{len(values)}] = {{{body}}};\n"


def _ops_code(ops: tuple[Elementwise, ...], prefix: str, consts: list[str]) -> str:
    """Statements turning ``v`` (channel ``c``) into the step's output value."""
    lines = []
    for j, op in enumerate(ops):
        if op.kind == "affine":
            if len(op.scale) == 1:
                lines.append(f"v = v * {op.scale[0]!r}f + {op.shift[0]!r}f;")
            else:
                consts.append(_floats(f"{prefix}_s{j}", op.scale) + _floats(f"{prefix}_b{j}", op.shift))
                lines.append(f"v = v * {prefix}_s{j}[c] + {prefix}_b{j}[c];")
        else:
            if math.isfinite(op.lo):
                lines.append(f"v = v < {op.lo!r}f ? {op.lo!r}f : v;")
            if math.isfinite(op.hi):
                lines.append(f"v = v > {op.hi!r}f ? {op.hi!r}f : v;")
    return " ".join(lines)


def _ops_loop(ops: str, dst: str, width: int) -> str:
    """Element-wise ops applied in place to one output row."""
    if not ops:
        return ""
    return (f"      for (int x = 0; x < {width}; ++x) {{ float* ov = {dst} + (long)x * C;\n"
            f"        for (int c = 0; c < C; ++c) {{ float v = ov[c]; {ops} ov[c] = v; }} }}\n")  # fmt: skip


def _step_code(i: int, step: Step, seq: Sequence, consts: list[str]) -> str:
    """C for step ``i``: rows lo[i+1]..hi[i+1] of its output from rows lo[i].. of its input.

    Pooling is separable: a horizontal pass over every input row the block needs (into ``h{i}``), then
    a vertical pass per output row; both run over whole rows of W x C contiguous floats, so each loop
    is one long vectorised stream. Element-wise ops then run over the output row while it is in L1.
    """
    (_, win), (_, wout) = seq.shapes[i], seq.shapes[i + 1]
    src = "in_n" if i == 0 else f"buf{i - 1}"
    dst = "out_n" if i == len(seq.steps) - 1 else f"buf{i}"
    src_off = f"(long)lo[{i}] * {win} * C" if i == 0 else "0"
    dst_off = f"(long)lo[{i + 1}] * {wout} * C" if i == len(seq.steps) - 1 else "0"
    ops = _ops_code(step.ops, f"k{i}", consts)
    head = (f"  {{ const float* s = {src} + {src_off}; float* d = {dst} + {dst_off};\n")  # fmt: skip
    row = f"d + (long)(r - lo[{i + 1}]) * {wout} * C"
    if step.pool is None:
        return (head + f"    for (int r = lo[{i + 1}]; r < hi[{i + 1}]; ++r) {{ float* o = {row};\n"
                f"      const float* a = s + (long)(r - lo[{i}]) * {win} * C;\n"
                f"      for (long k = 0; k < (long){wout} * C; ++k) o[k] = a[k];\n"
                + _ops_loop(ops, "o", wout) + "    }\n  }\n")  # fmt: skip
    return head + _pool_code(i, step.pool, seq, ops, row, consts) + "  }\n"


def _pool_code(i: int, p: Pool, seq: Sequence, ops: str, row: str, consts: list[str]) -> str:
    """Separable pooling: a horizontal pass over every input row the block needs (into ``h{i}``), with
    the columns whose window lies inside the row as one branch-free loop; then one fused loop per output
    row over the rows of ``h{i}`` its window covers (a row outside the input is replaced by a valid one
    for max, by zeros for avg, so the loop has no branch), with the divisor and the element-wise ops."""
    (hin, win), (_, wout) = seq.shapes[i], seq.shapes[i + 1]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p.kernel, p.stride, p.pad, p.dilation
    is_max = p.kind == "max"
    comb = "PW_MAX" if is_max else "PW_ADD"
    inside = [x for x in range(wout) if x * sw - pw >= 0 and x * sw - pw + (kw - 1) * dw < win]
    xa, xb = (inside[0], inside[-1] + 1) if inside else (0, 0)
    terms = "a[c]"
    for j in range(1, kw):
        terms = f"{comb}({terms}, a[c + {j * dw} * C])"
    border = [x for x in range(wout) if not xa <= x < xb]
    border_code = ""
    if border:
        consts.append(f"static const int bx{i}[{len(border)}] = {{{', '.join(map(str, border))}}};\n")
        init = "-INFINITY" if is_max else "0.0f"
        border_code = (
            f"      for (int q = 0; q < {len(border)}; ++q) {{ int x = bx{i}[q]; float* hp = hr + (long)x * C;\n"
            f"        for (int c = 0; c < C; ++c) hp[c] = {init};\n"
            f"        for (int j = 0; j < {kw}; ++j) {{ int jx = x * {sw} - {pw} + j * {dw}; if (jx < 0 || jx >= {win}) continue;\n"
            f"          const float* a = a_row + (long)jx * C; for (int c = 0; c < C; ++c) hp[c] = {comb}(hp[c], a[c]); }} }}\n"
        )  # fmt: skip
    horizontal = (
        f"    for (int ir = lo[{i}]; ir < hi[{i}]; ++ir) {{\n"
        f"      const float* a_row = s + (long)(ir - lo[{i}]) * {win} * C; float* hr = h{i} + (long)(ir - lo[{i}]) * {wout} * C;\n"
        f"      for (int x = {xa}; x < {xb}; ++x) {{ const float* a = a_row + (long)(x * {sw} - {pw}) * C; float* hp = hr + (long)x * C;\n"
        f"        for (int c = 0; c < C; ++c) hp[c] = {terms}; }}\n" + border_code + "    }\n"
    )  # fmt: skip
    vterms = "p0[k]"
    for q in range(1, kh):
        vterms = f"{comb}({vterms}, p{q}[k])"
    scale = ""
    if not is_max:
        inv_x = [1.0 / d for d in p.divisors(win, wout, 1)] if not p.divisor else [1.0] * wout
        consts.append(_floats(f"ix{i}", tuple(inv_x)))
        hdiv = [1.0 / d for d in p.divisors(hin, seq.shapes[i + 1][0], 0)] if not p.divisor else (
            [1.0 / p.divisor] * seq.shapes[i + 1][0])  # fmt: skip
        consts.append(_floats(f"ir{i}", tuple(hdiv)))
        scale = f"v *= ir{i}[r] * ix{i}[x]; "
    fill = f"ok ? h{i} + (long)(ir - lo[{i}]) * {wout} * C : " + ("valid" if is_max else "pw_zero")
    ptrs = "".join(
        f"      {{ int ir = r0 + {q * dh}; int ok = ir >= 0 && ir < {hin}; p{q} = {fill}; }}\n"
        for q in range(kh)
    )
    valid = (f"      const float* valid = 0; for (int q = 0; q < {kh}; ++q) {{ int ir = r0 + q * {dh}; "
             f"if (ir >= 0 && ir < {hin}) {{ valid = h{i} + (long)(ir - lo[{i}]) * {wout} * C; break; }} }}\n")  # fmt: skip
    decl = "      const float " + ", ".join(f"*p{q}" for q in range(kh)) + ";\n"
    vertical = (
        f"    for (int r = lo[{i + 1}]; r < hi[{i + 1}]; ++r) {{ float* o = {row}; int r0 = r * {sh} - {ph};\n"
        + valid + decl + ptrs +
        f"      for (int x = 0; x < {wout}; ++x) for (int c = 0; c < C; ++c) {{ long k = (long)x * C + c;\n"
        f"        float v = {vterms}; {scale}{ops} o[k] = v; }}\n    }}\n"
    )  # fmt: skip
    return horizontal + vertical


def source(seq: Sequence, name: str) -> str:
    """The C source of one sequence: ``void NAME(const float* in, float* out, long t0, long t1)``."""
    consts: list[str] = []
    steps = "".join(_step_code(i, s, seq, consts) for i, s in enumerate(seq.steps))
    n_steps = len(seq.steps)
    (h0, w0), (hf, wf) = seq.shapes[0], seq.shapes[-1]
    rows = [seq.block_rows]
    for s in reversed(seq.steps):
        rows.append(s.rows_in(rows[-1]))
    rows.reverse()  # rows[i]: most rows of step i's input one task needs
    bufs = "".join(
        f"  float* buf{i} = (float*)malloc(sizeof(float) * {rows[i + 1]} * {seq.shapes[i + 1][1]} * C);\n"
        for i in range(n_steps - 1)
    )
    bufs += "".join(
        f"  float* h{i} = (float*)malloc(sizeof(float) * {rows[i]} * {seq.shapes[i + 1][1]} * C);\n"
        for i, st in enumerate(seq.steps)
        if st.pool is not None
    )
    frees = "".join(f"  free(buf{i});\n" for i in range(n_steps - 1))
    widest = max(w for _, w in seq.shapes)
    zero = f"static const float pw_zero[{widest} * C];\n"
    frees += "".join(f"  free(h{i});\n" for i, st in enumerate(seq.steps) if st.pool is not None)
    back = []
    for i in range(n_steps - 1, -1, -1):
        p = seq.steps[i].pool
        hin = seq.shapes[i][0]
        if p is None:
            back.append(f"    lo[{i}] = lo[{i + 1}]; hi[{i}] = hi[{i + 1}];")
        else:
            ext = (p.kernel[0] - 1) * p.dilation[0] + 1
            back.append(f"    lo[{i}] = lo[{i + 1}] * {p.stride[0]} - {p.pad[0]}; if (lo[{i}] < 0) lo[{i}] = 0;\n"
                        f"    hi[{i}] = (hi[{i + 1}] - 1) * {p.stride[0]} - {p.pad[0]} + {ext}; "
                        f"if (hi[{i}] > {hin}) hi[{i}] = {hin};")  # fmt: skip
    return (
        "#include <math.h>\n#include <stdlib.h>\n"
        "#define PW_MAX(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))\n#define PW_ADD(a, b) ((a) + (b))\n"
        f"#define C {seq.channels}\n" + "".join(consts) + zero +
        f"void {name}(const float* restrict in, float* restrict out, long t0, long t1) {{\n"
        "#pragma omp parallel\n  {\n" + bufs +
        "#pragma omp for schedule(static)\n  for (long t = t0; t < t1; ++t) {\n"
        f"    long n = t / {seq.blocks}; int b = (int)(t % {seq.blocks}); int lo[{n_steps + 1}], hi[{n_steps + 1}];\n"
        f"    lo[{n_steps}] = b * {seq.block_rows}; hi[{n_steps}] = lo[{n_steps}] + {seq.block_rows};\n"
        f"    if (hi[{n_steps}] > {hf}) hi[{n_steps}] = {hf};\n" + "\n".join(back) + "\n"
        f"    const float* in_n = in + n * {h0 * w0} * C; float* out_n = out + n * {hf * wf} * C;\n"
        + steps + "  }\n" + frees + "  }\n}\n"
    )  # fmt: skip


_LOCK = threading.Lock()


def compile_source(src: str, name: str) -> ctypes._CFuncPtr:
    """Compile (or take from the cache) and load; raise UnsupportedError when no C compiler exists."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise UnsupportedError(f"stacks need a C compiler, and {cc!r} was not found (set CC, or install gcc)")
    key = hashlib.sha256((src + cc).encode()).hexdigest()[:20]
    folder = cache_dir() / "stacks"
    lib_path = folder / f"{key}.so"
    with _LOCK:
        if not lib_path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            c_path = folder / f"{key}.c"
            c_path.write_text(src)
            tmp = folder / f"{key}.{os.getpid()}.so"
            cmd = [
                cc,
                "-O3",
                "-march=native",
                "-fopenmp",
                "-fPIC",
                "-shared",
                "-o",
                str(tmp),
                str(c_path),
                "-lm",
            ]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise UnsupportedError(f"compiling a stack kernel failed ({cc}): {done.stderr.strip()[:400]}")
            tmp.replace(lib_path)
    fn = getattr(ctypes.CDLL(str(lib_path)), name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
    fn.restype = None
    return fn
