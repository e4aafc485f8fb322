"""Kernels per node from a profiler trace (matched by correlation id), their demand and boundedness.

The trace is written by hand in the profiler's Chrome-trace form, so this runs without a GPU; the
profiled run itself is tested on CUDA in tests/streams/test_strategy.py.
"""

from __future__ import annotations

import pytest

from pathweave.analysis import kernels
from pathweave.analysis.kernels import GpuLimits, boundedness, kernel_demand, node_demand, parse_trace
from pathweave.meta import Kernel, NodeCost, NodeKernels


def _range(name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1}


def _launch(
    corr: int, ts: float, tid: int = 1, cat: str = "cuda_runtime", name: str = "cudaLaunchKernel"
) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": 1,
        "tid": tid,
        "args": {"correlation": corr},
    }


def _device(corr: int, ts: float, name: str, dur: float, cat: str = "kernel", **args: object) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "tid": 7,
        "args": {"correlation": corr, **args},
    }


TRACE = {
    "traceEvents": [
        _range("pw::conv", 0, 10),
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 1, "dur": 8, "tid": 1},
        _range("pw::relu", 20, 5),
        _launch(7, 2),
        _launch(8, 4, cat="cuda_driver", name="cuLaunchKernel"),  # cuBLAS launches through the driver API
        _launch(9, 5, name="cudaMemsetAsync"),
        _launch(10, 15),  # between the two nodes' ranges: nobody's
        _launch(11, 21),
        _launch(12, 3, tid=2),  # another thread, with no node range on it
        # device events arrive in any order; the relu's kernel is named after a conv on purpose
        _device(
            11, 40, "conv_kernel", 3.0, grid=[64, 1, 1], block=[256, 1, 1], **{"registers per thread": 16}
        ),
        _device(
            8,
            31,
            "gemm",
            6.0,
            grid=[4, 2, 1],
            block=[128, 1, 1],
            **{"registers per thread": 90, "shared memory": 4096},
        ),  # fmt: skip
        _device(7, 30, "im2col", 2.0, grid=[16, 1, 1], block=[256, 1, 1], **{"registers per thread": 32}),
        _device(9, 29, "Memset (Device)", 1.0, cat="gpu_memset"),
        _device(10, 35, "orphan", 1.0, grid=[1, 1, 1], block=[32, 1, 1]),
        _device(12, 36, "other_thread", 1.0, grid=[1, 1, 1], block=[32, 1, 1]),
        _range("pw::conv", 29, 8, tid=7, cat="gpu_user_annotation"),  # device-side copy of a range: ignored
    ]
}

IM2COL = Kernel("im2col", (16, 1, 1), (256, 1, 1), 32, 0, 2.0)
GEMM = Kernel("gemm", (4, 2, 1), (128, 1, 1), 90, 4096, 6.0)
MEMSET = Kernel("Memset (Device)", (0, 0, 0), (0, 0, 0), 0, 0, 1.0)
RELU = Kernel("conv_kernel", (64, 1, 1), (256, 1, 1), 16, 0, 3.0)
LIMITS = GpuLimits("test", sms=2, threads_per_sm=1024, registers_per_sm=65536, shared_memory_per_sm=65536,
                   ridge_flop_per_byte=15.0)  # fmt: skip


def test_kernels_matched_by_correlation_in_device_order() -> None:
    got = parse_trace(TRACE)
    assert got == {"conv": NodeKernels((MEMSET, IM2COL, GEMM)), "relu": NodeKernels((RELU,))}
    assert got["conv"].time_us == 9.0


def test_kernel_demand_is_the_scarcest_resource() -> None:
    # gemm: 8 blocks x 128 threads = 1024 of 2048 threads (0.5); x 90 registers = 92160 of 131072 (0.703);
    # 8 x 4096 B = 32768 of 131072 B shared memory (0.25)
    assert kernel_demand(GEMM, LIMITS) == pytest.approx(92160 / 131072)
    assert kernel_demand(IM2COL, LIMITS) == 1.0  # 4096 threads do not fit at once: capped
    assert kernel_demand(MEMSET, LIMITS) == 0.0
    assert node_demand(NodeKernels((MEMSET, GEMM)), LIMITS) == pytest.approx(92160 / 131072)
    assert node_demand(NodeKernels(()), LIMITS) == 0.0


def test_boundedness_by_kind_and_intensity() -> None:
    assert boundedness(NodeCost(flops=1000, bytes=10, weight=1.0, kind="conv"), 15.0) == "compute"
    assert boundedness(NodeCost(flops=1000, bytes=100, weight=1.0, kind="matmul"), 15.0) == "memory"
    assert boundedness(NodeCost(flops=10**9, bytes=10, weight=1.0, kind="elementwise"), 15.0) == "memory"


def test_saved_kernels_load_back(tmp_path) -> None:
    found = parse_trace(TRACE)
    kernels._save(tmp_path / "k.json", found)
    assert kernels._load(tmp_path / "k.json") == found
    (tmp_path / "bad.json").write_text("{not json")
    assert kernels._load(tmp_path / "bad.json") is None
