# ruff: noqa: E501  (lines of generated C are kept whole, so the template reads like the C it emits)
"""Generated depth-first kernels for BrainSlug's stacks, in C, compiled by the system compiler.

A sequence of steps runs as one C function over tasks (sample, block of output rows). A task walks
backwards from its block to the rows every earlier step must produce (the halo that overlapping
pooling needs), then computes those rows step by step into small per-thread buffers, so that a
block's intermediates stay in cache from the first step to the last. Rows of the halo are computed by
both neighbouring blocks; block sizes are chosen so the working set fits half the core's L2 cache,
and the recomputation that small blocks cost is what limits how many steps join one sequence.

Tensors are NHWC (channels_last) float32; the innermost loops run over channels with the per-channel
parameters as constant arrays, which the compiler vectorises (-O3 -march=native). Tasks are spread
over threads by OpenMP: the library links libgomp.so.1, which resolves to the copy torch has already
loaded, so the kernels share torch's thread team and thread count (``torch.set_num_threads``) instead
of waking threads of their own (Python worker threads woke slowly enough here to double the time).
ctypes releases the GIL during the call. Identical sequences share one compiled library (cached by a
hash of the source under the user cache dir).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

import torch

from pathweave.errors import UnsupportedError
from pathweave.machine import cache_dir, l2_bytes

#: fraction of the per-core L2 cache one task's working set may use
L2_SHARE = 0.5
#: the most halo recomputation a sequence may cost (rows computed / rows needed)
MAX_RECOMPUTE = 1.25


@dataclass(frozen=True)
class Pool:
    kind: str  # "max" or "avg"
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dilation: tuple[int, int]
    ceil: bool
    include_pad: bool
    divisor: int | None
    out_hw: tuple[int, int]


@dataclass(frozen=True)
class Elementwise:
    kind: str  # "affine": x * scale + shift (per channel or one value); "clamp": to [lo, hi]
    scale: tuple[float, ...] = ()
    shift: tuple[float, ...] = ()
    lo: float = -math.inf
    hi: float = math.inf


@dataclass(frozen=True)
class Step:
    """At most one pooling op, then element-wise ops (BrainSlug's step)."""

    pool: Pool | None
    ops: tuple[Elementwise, ...]


@dataclass(frozen=True)
class Sequence:
    """Steps computed depth first in blocks of ``block_rows`` output rows; ``shapes[i]`` is (H, W) before
    step i (``shapes[-1]`` the output)."""

    steps: tuple[Step, ...]
    channels: int
    batch: int
    shapes: tuple[tuple[int, int], ...]
    block_rows: int

    @property
    def blocks(self) -> int:
        return -(-self.shapes[-1][0] // self.block_rows)


def gpu_sequences(sequences: list[Sequence], max_steps: int | None = None) -> list[Sequence]:
    """The steps of ``sequences`` regrouped for the Triton kernels: a program computes a whole plane, so
    no cache budget or halo splits them, only ``max_steps`` per sequence (None: all in one)."""
    steps = [st for seq in sequences for st in seq.steps]
    shapes = [sequences[0].shapes[0], *[hw for seq in sequences for hw in seq.shapes[1:]]]
    n = max_steps or len(steps)
    first = sequences[0]
    return [
        Sequence(
            tuple(steps[i : i + n]),
            first.channels,
            first.batch,
            tuple(shapes[i : i + n + 1]),
            shapes[min(i + n, len(steps))][0],
        )  # fmt: skip
        for i in range(0, len(steps), n)
    ]


def _rows_in(step: Step, rows: int) -> int:
    if step.pool is None:
        return rows
    p = step.pool
    return (rows - 1) * p.stride[0] + (p.kernel[0] - 1) * p.dilation[0] + 1


def working_set(steps: tuple[Step, ...], shapes: list[tuple[int, int]], channels: int, rows: int) -> int:
    """Bytes a task keeps hot at once for ``rows`` output rows: the largest input + output rows of one
    step (a step's input is dead once the step is done; its output feeds the next step)."""
    most, r = 0, rows
    for i in range(len(steps) - 1, -1, -1):
        r_in = _rows_in(steps[i], r)
        most = max(most, r * shapes[i + 1][1] + r_in * shapes[i][1])
        r = r_in
    return most * channels * 4


def recompute(steps: tuple[Step, ...], shapes: list[tuple[int, int]], rows: int) -> float:
    """Rows a block computes over all its steps (halos included), per row the steps need at least."""
    done, need, r = 0.0, 0.0, rows
    for i in range(len(steps) - 1, -1, -1):
        done += min(r, shapes[i + 1][0]) * shapes[i + 1][1]
        need += rows * shapes[i + 1][0] / shapes[-1][0] * shapes[i + 1][1]
        r = _rows_in(steps[i], r)
    return done / need


def _block_rows(steps: tuple[Step, ...], shapes: list[tuple[int, int]], c: int, cap: int, budget: int) -> int:
    rows = 1
    while rows < cap and working_set(steps, shapes, c, rows + 1) <= budget:
        rows += 1
    return rows


def plan_sequences(
    steps: tuple[Step, ...],
    in_shape: tuple[int, int, int, int],
    max_steps: int | None = None,
    budget: int | None = None,
    threads: int | None = None,
) -> list[Sequence]:
    """Greedy: a sequence takes the next step while, at the largest block that fits ``budget`` (capped so
    that every thread gets two tasks), the halo recomputation stays under MAX_RECOMPUTE, and while it
    has fewer than ``max_steps`` steps (BrainSlug's step policies; None: unrestricted)."""
    budget = budget or int(l2_bytes() * L2_SHARE)
    threads = threads or torch.get_num_threads()
    n, c, h, w = in_shape
    seqs: list[Sequence] = []
    start, hw = 0, (h, w)
    while start < len(steps):
        shapes, rows = [hw], 1
        end = start
        while end < len(steps) and (max_steps is None or end - start < max_steps):
            out = steps[end].pool.out_hw if steps[end].pool else shapes[-1]
            trial, trial_shapes = steps[start : end + 1], [*shapes, out]
            cap = max(1, min(out[0], -(-out[0] * n // (2 * threads))))
            trial_rows = _block_rows(trial, trial_shapes, c, cap, budget)
            fits = working_set(trial, trial_shapes, c, trial_rows) <= budget
            if end > start and not (fits and recompute(trial, trial_shapes, trial_rows) <= MAX_RECOMPUTE):
                break
            shapes, rows, end = trial_shapes, trial_rows, end + 1
        seqs.append(Sequence(steps[start:end], c, n, tuple(shapes), rows))
        start, hw = end, shapes[-1]
    return seqs


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


def _divisors(p: Pool, size_in: int, size_out: int, axis: int) -> list[float]:
    """Avg pooling's divisor along one axis for every output position (separable, as in PyTorch)."""
    k, s, pad, d = p.kernel[axis], p.stride[axis], p.pad[axis], p.dilation[axis]
    out = []
    for o in range(size_out):
        start = o * s - pad
        if p.include_pad:
            out.append(float(min(start + k, size_in + pad) - start))
        else:
            out.append(float(sum(1 for j in range(k) if 0 <= start + j * d < size_in)))
    return out


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
        inv_x = [1.0 / d for d in _divisors(p, win, wout, 1)] if not p.divisor else [1.0] * wout
        consts.append(_floats(f"ix{i}", tuple(inv_x)))
        hdiv = [1.0 / d for d in _divisors(p, hin, seq.shapes[i + 1][0], 0)] if not p.divisor else (
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
        rows.append(_rows_in(s, rows[-1]))
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


class StackModule(torch.nn.Module):
    """Runs a stack's sequences; input and output are NCHW float32 tensors, stored channels_last on CPU.
    On CPU the generated C kernels run (compiled here when ``device`` is the CPU, so that a missing
    compiler fails the pass); on other devices the Triton kernels of ``stack_triton``, built at first
    use, over sequences regrouped for them (``gpu_sequences``: ``max_steps`` steps each)."""

    def __init__(self, sequences: list[Sequence], max_steps: int | None = None, device: str = "cpu") -> None:
        super().__init__()
        self.sequences = sequences
        self.max_steps = max_steps
        self.sources = [source(s, "stack_seq") for s in sequences]
        self._fns: list[ctypes._CFuncPtr] = []
        if torch.device(device).type == "cpu":
            self._compile()
        self._local = threading.local()
        self._triton: list[Any] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return self._on_device(x)
        if not self._fns:
            self._compile()
        x = x.contiguous(memory_format=torch.channels_last)
        last = len(self.sequences) - 1
        for i, (seq, fn) in enumerate(zip(self.sequences, self._fns, strict=True)):
            h, w = seq.shapes[-1]
            shape = (seq.batch, seq.channels, h, w)
            out = (
                torch.empty(shape, memory_format=torch.channels_last)
                if i == last
                else self._scratch(i, shape)
            )
            fn(x.data_ptr(), out.data_ptr(), 0, seq.batch * seq.blocks)
            x = out
        return x

    def _compile(self) -> None:
        self._fns = [compile_source(src, "stack_seq") for src in self.sources]

    def _on_device(self, x: torch.Tensor) -> torch.Tensor:
        from pathweave.stacks.triton_kernels import TritonSequence, run_sequences

        if self._triton is None:
            self._triton = [TritonSequence(s) for s in gpu_sequences(self.sequences, self.max_steps)]
        return run_sequences(self._triton, x)

    def _scratch(self, i: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Intermediates between sequences, kept per calling thread (fresh pages fault on every call)."""
        bufs = self._local.__dict__.setdefault("bufs", {})
        if i not in bufs:
            bufs[i] = torch.empty(shape, memory_format=torch.channels_last)
        return bufs[i]

    def extra_repr(self) -> str:
        steps = sum(len(s.steps) for s in self.sequences)
        return f"{steps} steps in {len(self.sequences)} sequences"
