"""Generated Triton kernels for BrainSlug's stacks on GPU (issue 6): one kernel per sequence.

A program takes one (sample, channel) plane and computes it through every step of the sequence, depth
first: each step reads the previous step's plane and writes its own into the program's two scratch
planes (ping-pong), with a barrier between steps, so a plane's intermediates stay in the SM's L1 and
the GPU's L2 (a 56x56 plane is 12.5 KB) instead of passing through memory once per layer. A plane is
the block, so no halo is recomputed. Within a step the plane is walked in chunks of rows
(``_chunk_rows``) as 2-D blocks; pooling windows are unrolled (``tl.static_range``), with masks for
padding; avg pooling multiplies by per-row and per-column reciprocal divisors (separable, as in
PyTorch, and as ``Pool.divisors`` computes them); max pooling and clamps propagate NaN.

The source is generated per sequence, written to the cache folder under a hash of its text and
imported from there (Triton's JIT reads a kernel's source from its file). Identical sequences share
one module. With ``TRITON_INTERPRET=1`` (set before Triton is imported) the same kernels run on CPU
tensors through Triton's interpreter: that is how the tests check them where there is no GPU.
Nothing here runs at import; Triton is imported at first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import threading
from types import ModuleType
from typing import Any

import torch

from pathweave.errors import UnsupportedError, require
from pathweave.machine import cache_dir
from pathweave.stacks.model import Elementwise, Pool, Sequence

_LOCK = threading.Lock()
_MODULES: dict[str, ModuleType] = {}
#: elements of one 2-D block a program computes at a time (rows x padded columns)
BLOCK_ELEMENTS = 4096


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _chunk_rows(width: int) -> int:
    """Rows per block for a plane ``width`` wide: a power of two, at least 1."""
    return max(1, BLOCK_ELEMENTS // _pow2(width))


def _literal(v: float) -> str:
    if math.isnan(v):
        return "float('nan')"
    return "float('inf')" if v == math.inf else "float('-inf')" if v == -math.inf else repr(float(v))


class _Params:
    """Per-channel constants (scale, shift) and avg pooling's divisors, packed into one float tensor;
    the generated code reads them at fixed offsets."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, values: list[float] | tuple[float, ...]) -> int:
        at = len(self.values)
        self.values.extend(float(v) for v in values)
        return at


def _value(p: _Params, values: tuple[float, ...], channels: int) -> str:
    """The expression of a per-channel (or single) constant inside the kernel (``c``: the channel)."""
    if len(values) == 1:
        return _literal(values[0])
    if len(values) != channels:
        raise UnsupportedError(f"a stack constant of {len(values)} values for {channels} channels")
    return f"tl.load(params + {p.add(values)} + c)"


def _ops(ops: tuple[Elementwise, ...], p: _Params, channels: int) -> list[str]:
    lines = []
    for op in ops:
        if op.kind == "affine":
            lines.append(f"v = v * {_value(p, op.scale, channels)} + {_value(p, op.shift, channels)}")
        elif op.kind == "clamp":
            clamped = f"tl.minimum(tl.maximum(v, {_literal(op.lo)}), {_literal(op.hi)})"
            lines.append(f"v = tl.where(v != v, v, {clamped})")  # NaN passes, as in eager
        else:
            raise UnsupportedError(f"no Triton code for the element-wise op {op.kind!r}")
    return lines


def _pool(pool: Pool, hw_in: tuple[int, int], hw_out: tuple[int, int], p: _Params, block: str) -> list[str]:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = pool.kernel, pool.stride, pool.pad, pool.dilation
    hin, win = hw_in
    first = "float('-inf')" if pool.kind == "max" else "0.0"
    lines = [f"v = tl.full({block}, {first}, tl.float32)"]
    for i in range(kh):
        for j in range(kw):
            lines += [
                f"ih = oh * {sh} - {ph} + {i * dh}",
                f"iw = ow * {sw} - {pw} + {j * dw}",
                f"m = inside & (ih >= 0) & (ih < {hin}) & (iw >= 0) & (iw < {win})",
                f"x = tl.load(src + ih * {win} + iw, mask=m, other={first})",
                "v = tl.where((x > v) | (x != x), x, v)" if pool.kind == "max" else "v = v + x",
            ]
    if pool.kind == "avg":
        if pool.divisor:
            lines.append(f"v = v * {_literal(1.0 / pool.divisor)}")
        else:
            inv_h = p.add([1.0 / d for d in pool.divisors(hin, hw_out[0], 0)])
            inv_w = p.add([1.0 / d for d in pool.divisors(win, hw_out[1], 1)])
            lines += [
                f"v = v * tl.load(params + {inv_h} + oh, mask=oh < {hw_out[0]}, other=0.0)",
                f"v = v * tl.load(params + {inv_w} + ow, mask=ow < {hw_out[1]}, other=0.0)",
            ]
    return lines


def triton_source(seq: Sequence) -> tuple[str, list[float], int]:
    """The kernel's Python source, its constants, and the floats of one program's scratch (two planes, one
    for a sequence of two steps, none for one)."""
    p = _Params()
    plane = max([h * w for h, w in seq.shapes[1:-1]] or [0])
    kept = min(2, len(seq.steps) - 1)  # intermediate planes a program holds at once
    body = [
        "pid = tl.program_id(0).to(tl.int64)  # offsets past 2**31 floats (an 8 GiB batch) stay right",
        f"c = pid % {seq.channels}",
        f"scratch = scratch + pid * {kept * plane}",
    ]
    last = len(seq.steps) - 1
    for i, step in enumerate(seq.steps):
        (hin, win), (hout, wout) = seq.shapes[i], seq.shapes[i + 1]
        src = f"x_ptr + pid * {hin * win}" if i == 0 else f"scratch + {((i - 1) % 2) * plane}"
        dst = f"y_ptr + pid * {hout * wout}" if i == last else f"scratch + {(i % 2) * plane}"
        rows = _chunk_rows(wout)
        inner = [f"oh = r0 + tl.arange(0, {rows})[:, None]",
                 f"ow = tl.arange(0, {_pow2(wout)})[None, :]",
                 f"inside = (oh < {hout}) & (ow < {wout})"]  # fmt: skip
        if step.pool is not None:
            inner += _pool(step.pool, (hin, win), (hout, wout), p, f"({rows}, {_pow2(wout)})")
        else:
            inner.append(f"v = tl.load(src + oh * {win} + ow, mask=inside, other=0.0)")
        inner += _ops(step.ops, p, seq.channels)
        inner.append(f"tl.store(dst + oh * {wout} + ow, v, mask=inside)")
        body += [f"# step {i}: {hin}x{win} -> {hout}x{wout}", f"src = {src}", f"dst = {dst}",
                 f"for r0 in range(0, {hout}, {rows}):"] + ["    " + line for line in inner]  # fmt: skip
        if i != last:
            body.append("tl.debug_barrier()  # the next step reads what every thread wrote")
    src = (
        '"""Generated by pathweave.stacks.triton_kernels: one stack sequence, a program per plane."""\n'
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def stack_seq(x_ptr, y_ptr, scratch, params):\n" + "".join(f"    {line}\n" for line in body)
    )
    return src, p.values, kept * plane


def _module(src: str) -> ModuleType:
    key = hashlib.sha256(src.encode()).hexdigest()[:20]
    with _LOCK:
        if key not in _MODULES:
            folder = cache_dir() / "stacks_triton"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"stack_{key}.py"
            if not path.exists() or path.read_text() != src:
                tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_text(src)
                tmp.replace(path)
            spec = importlib.util.spec_from_file_location(f"pathweave_stack_{key}", path)
            if spec is None or spec.loader is None:
                raise UnsupportedError(f"could not load the generated stack kernel {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _MODULES[key] = module
    return _MODULES[key]


class TritonSequence:
    """One sequence as a Triton kernel: ``run(x)`` takes an NCHW float32 tensor (any memory format) of the
    sequence's input shape and returns its output, NCHW contiguous, on the same device."""

    def __init__(self, seq: Sequence) -> None:
        require("triton", "gpu")
        self.seq = seq
        self.source, params, self.scratch_floats = triton_source(seq)
        self._params = torch.tensor(params or [0.0], dtype=torch.float32)
        self._kernel: Any = _module(self.source).stack_seq
        self._scratch: dict[tuple[torch.device, int], torch.Tensor] = {}

    def run(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.seq
        want = (seq.batch, seq.channels, *seq.shapes[0])
        if tuple(x.shape) != want or x.dtype != torch.float32:
            raise UnsupportedError(f"a stack sequence for {want} float32 got {tuple(x.shape)} {x.dtype}")
        x = x.contiguous()
        planes = seq.batch * seq.channels
        y = torch.empty((seq.batch, seq.channels, *seq.shapes[-1]), dtype=torch.float32, device=x.device)
        # scratch per device and stream: calls on two streams must not share it
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0
        scratch = self._scratch.get((x.device, stream))
        if scratch is None:
            scratch = torch.empty(max(1, planes * self.scratch_floats), device=x.device)
            self._scratch[(x.device, stream)] = scratch
        if self._params.device != x.device:
            self._params = self._params.to(x.device)
        if x.is_cuda:
            with torch.cuda.device(x.device):  # Triton launches on the current device
                self._kernel[(planes,)](x, y, scratch, self._params)
        else:  # Triton's interpreter (TRITON_INTERPRET=1): the tests' CPU tensors
            self._kernel[(planes,)](x, y, scratch, self._params)
        return y


def run_sequences(kernels: list[TritonSequence], x: torch.Tensor) -> torch.Tensor:
    """A stack's sequences one after another (each one kernel launch)."""
    for k in kernels:
        x = k.run(x)
    return x
