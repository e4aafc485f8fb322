"""A bench at a vector level below the CPU's: every peer that can be limited runs at the same level.

Forcing pathweave's kernels to AVX2 on an AVX-512 CPU while the peers keep AVX-512 compares unlike with
unlike (measured on Zen 5, ResNet-50 batch 1: OpenVINO 19.2 ms with AVX-512, 34.2 ms limited to AVX2).
PyTorch reads ``ATEN_CPU_CAPABILITY`` (ATen's and inductor's vector code) and ``ONEDNN_MAX_CPU_ISA``
(its oneDNN convolutions); OpenVINO's CPU plugin reads ``ONEDNN_MAX_CPU_ISA`` too. Each library reads
them once, on first use, so they are set in the process before the bench loads a model; whether they
took effect is then read back from each library (ATen's capability, oneDNN's verbose ISA line,
OpenVINO's executed primitives), and every row reports the level it really ran at. ONNX Runtime's MLAS
picks its kernels from CPUID with no knob: it is reported as not limited, unless it runs from the copy
``experiments/ort_mlas_avx2.py`` makes, whose MLAS skips its AVX-512 branch (read back from the binary).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from functools import cache
from typing import Any

import torch

from pathweave.errors import InputError, UnsupportedError
from pathweave.machine import ISA_LEVELS, cpu_isa

#: what limits the peers to each level below avx512; "generic" is no AVX at all (oneDNN's lowest x86
#: level is SSE4.1, ATen's "default" build is SSE2-level)
PEER_ENV: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "generic": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
ISA_ENV = "PATHWEAVE_ISA"
#: ATen's capability names and oneDNN's ISA names (verbose line, primitive names) -> our levels
_ATEN = {"AVX512": "avx512", "AVX2": "avx2", "DEFAULT": "generic", "NO AVX": "generic"}
_ONEDNN_TOKENS = (("avx512", "avx512"), ("avx-512", "avx512"), ("avx2", "avx2"), ("avx", "avx2"),
                  ("sse", "generic"))  # fmt: skip


def bench_isa(asked: str | None = None) -> str:
    """The level a bench runs pathweave's kernels at: ``asked`` (``--isa``), else ``$PATHWEAVE_ISA``, else
    the CPU's own; a level the CPU lacks is refused before anything is built."""
    level = (asked or os.environ.get(ISA_ENV, "")).strip() or cpu_isa()
    if level not in ISA_LEVELS:
        raise InputError(f"{level!r} is not an instruction set level; use one of {', '.join(ISA_LEVELS)}")
    if ISA_LEVELS.index(level) < ISA_LEVELS.index(cpu_isa()):
        raise UnsupportedError(f"this CPU ({cpu_isa()}) cannot run the {level} kernels")
    return level


def limit_env(level: str) -> dict[str, str]:
    """The environment that runs pathweave and the limitable peers at ``level`` (empty at the CPU's own)."""
    if level == cpu_isa():
        return {}
    return {ISA_ENV: level, **PEER_ENV[level]}


def apply_limits(level: str) -> dict[str, str]:
    """Set ``limit_env(level)`` in this process (before the peers' libraries first run, or they keep their
    own choice: ``torch_isa`` and ``openvino_isa`` tell) and force the tile kernels to ``level``."""
    env = limit_env(level)
    os.environ.update(env)
    if env:
        from pathweave.tiles.runtime import use_gemm_isa

        use_gemm_isa(level)
    return env


def limited(level: str) -> bool:
    """Whether a bench at ``level`` limits its peers (a level below the CPU's)."""
    return level != cpu_isa()


def torch_isa() -> str:
    """The level PyTorch runs here: the wider of ATen's vector code and its oneDNN convolutions."""
    aten = _ATEN.get(torch.backends.cpu.get_cpu_capability().upper(), cpu_isa())
    onednn = onednn_isa() or aten
    return min(aten, onednn, key=ISA_LEVELS.index)


@cache
def onednn_isa() -> str | None:
    """The ISA PyTorch's oneDNN runs, read from its verbose output around one convolution (None where
    PyTorch has no oneDNN or it printed nothing). oneDNN fixes its ISA on first use, so once is enough."""
    if not torch.backends.mkldnn.is_available():
        return None
    text = _stdout_of(_one_conv)
    for line in text.splitlines():
        if ",info,cpu,isa:" in line or ",exec,cpu,convolution," in line:
            return _onednn_level(line.split("isa:", 1)[-1] if "isa:" in line else line.split(",")[5])
    return None


def _one_conv() -> None:
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), torch.no_grad():
        torch.nn.functional.conv2d(torch.ones(1, 64, 28, 28), torch.ones(64, 64, 3, 3), padding=1)


def _onednn_level(name: str) -> str:
    low = name.lower()
    return next((level for token, level in _ONEDNN_TOKENS if token in low), "generic")


def _stdout_of(fn: Any) -> str:
    """What ``fn`` writes to file descriptor 1 (C libraries print there, past ``sys.stdout``)."""
    sys.stdout.flush()
    with tempfile.TemporaryFile() as f:
        with _fd1_to(f.fileno()):
            fn()
        f.seek(0)
        return f.read().decode(errors="replace")


@contextlib.contextmanager
def _fd1_to(fd: int) -> Iterator[None]:
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


#: OpenVINO node types whose kernels hold nearly all of a CNN's or transformer's time
_OV_HEAVY = {"Convolution", "GroupConvolution", "FullyConnected", "MatMul", "Deconvolution"}


def openvino_isa(compiled: Any) -> tuple[str | None, str]:
    """The level of an OpenVINO compiled model's heavy primitives (``brgconv_avx2_f32``: the widest
    among convolutions and matrix products), and a note naming the other nodes that ran wider: some of
    OpenVINO's own JIT kernels ignore ``ONEDNN_MAX_CPU_ISA`` (measured: its Reduce stays AVX-512)."""
    heavy: set[str] = set()
    wider: dict[str, set[str]] = {}
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if "primitiveType" not in info:
            continue
        name = str(info["primitiveType"].astype(str)).lower()
        levels = {level for token, level in _ONEDNN_TOKENS if token in name and "uni" not in name}
        if not levels:
            continue
        level = min(levels, key=ISA_LEVELS.index)
        kind = str(info["layerType"].astype(str)) if "layerType" in info else "?"
        if kind in _OV_HEAVY:
            heavy.add(level)
        else:
            wider.setdefault(level, set()).add(kind)
    if not heavy:
        return None, ""
    ran = min(heavy, key=ISA_LEVELS.index)
    other = sorted(k for level, kinds in wider.items() if ISA_LEVELS.index(level) < ISA_LEVELS.index(ran)
                   for k in kinds)  # fmt: skip
    return ran, (f"{', '.join(other)} at {min(wider, key=ISA_LEVELS.index)}" if other else "")


#: MLAS's branch into its AVX-512F kernels in ORT's binary (ORT 1.32, x86-64: ``test $0x10000`` on
#: CPUID.7:EBX, then ``je`` past the branch, then the XCR0 test ``(xcr0 & 0xE0) == 0xE0``). Group 2 is
#: the jump: ``je`` (0x74) as built, ``jmp`` (0xeb) in experiments/ort_mlas_avx2.py's copy.
MLAS_AVX512F_BRANCH = re.compile(
    rb"(\x41?\xf7[\xc0-\xc7]\x00\x00\x01\x00)([\x74\xeb])(.)(\x4c\x89\xc0\x48\xf7\xd0\xa8\xe0)", re.S
)


@cache
def ort_isa() -> tuple[str, bool]:
    """ONNX Runtime's level on this CPU and whether it was limited: avx2 where its Python binding's MLAS
    skips the AVX-512F branch (the patched copy), else the CPU's level (no knob lowers it)."""
    cpu = cpu_isa()
    binding = sys.modules.get("onnxruntime.capi.onnxruntime_pybind11_state")
    path = getattr(binding, "__file__", None)
    if cpu != "avx512" or path is None:
        return cpu, False
    try:
        with open(path, "rb") as f:
            found = MLAS_AVX512F_BRANCH.search(f.read())
    except OSError:
        return cpu, False
    return ("avx2", True) if found is not None and found.group(2) == b"\xeb" else (cpu, False)


def label(ran: str | None, level: str, can_limit: bool = True) -> str:
    """A row's ISA as the table shows it: the level, and where the bench was limited, whether this
    candidate followed ("cannot be limited" for a peer with no knob, "not limited" where a knob failed)."""
    if ran is None:
        return "?"
    if not limited(level) or ran == level:
        return ran
    return f"{ran}, cannot be limited" if not can_limit else f"{ran}, not limited"
