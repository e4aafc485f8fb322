"""The CUDA kernels of every node, from one profiled run: launch resources, durations, boundedness.

Each fx node runs inside a ``record_function("pw::<node>")`` range. In the profiler's trace a kernel
event carries a correlation id; the host-side launch call (``cudaLaunchKernel``, ``cuLaunchKernel``,
...) carries the same id and lies inside the range of the node that issued it. Kernels are matched to
nodes that way, never by kernel or node names (Opara's prototype matched the i-th launch to the i-th
kernel and classified ops by substrings of node names).

What a node needs from the GPU, ``node_demand``, is the largest share of the SMs' threads, registers
or shared memory that any of its kernels occupies when all its blocks are resident. Whether a node is
memory- or compute-bound, ``boundedness``, comes from its op kind and its arithmetic intensity against
the GPU's ridge point.
"""

from __future__ import annotations

import bisect
import json
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx

from pathweave.machine import cache_dir, read_cache, write_cache
from pathweave.meta import COST, KERNELS, Kernel, NodeCost, NodeKernels

RANGE_PREFIX = "pw::"
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@dataclass(frozen=True)
class GpuLimits:
    """Per-GPU capacities for the demand of a kernel, and the ridge point (FLOP per byte)."""

    name: str
    sms: int
    threads_per_sm: int
    registers_per_sm: int
    shared_memory_per_sm: int
    ridge_flop_per_byte: float

    @classmethod
    def of_device(cls, device: int = 0) -> GpuLimits:
        p = torch.cuda.get_device_properties(device)
        return cls(
            p.name,
            p.multi_processor_count,
            getattr(p, "max_threads_per_multi_processor", 2048),
            getattr(p, "regs_per_multiprocessor", 65536),
            getattr(p, "shared_memory_per_multiprocessor", 228 * 1024),
            _ridge(p.name),
        )


#: H100 SXM: ~67 TFLOP/s fp32 (non-tensor) over ~3.35 TB/s; H200 the same SMs over ~4.8 TB/s
_RIDGES = {"H100": 67e12 / 3.35e12, "H200": 67e12 / 4.8e12}
DEFAULT_RIDGE = 15.0


def _ridge(name: str) -> float:
    return next((r for key, r in _RIDGES.items() if key in name), DEFAULT_RIDGE)


def kernel_demand(k: Kernel, limits: GpuLimits) -> float:
    """Share (0..1) of the GPU the kernel's blocks take of the scarcest resource: threads, registers or
    shared memory."""
    blocks, threads = math.prod(k.grid), math.prod(k.block)
    if not blocks or not threads:
        return 0.0  # a copy or memset: no SM resources
    shares = (
        blocks * threads / (limits.sms * limits.threads_per_sm),
        blocks * threads * k.registers / (limits.sms * limits.registers_per_sm),
        blocks * k.shared_memory / (limits.sms * limits.shared_memory_per_sm),
    )
    return min(1.0, max(shares))


def node_demand(nk: NodeKernels, limits: GpuLimits) -> float:
    return max((kernel_demand(k, limits) for k in nk.kernels), default=0.0)


def boundedness(cost: NodeCost, ridge_flop_per_byte: float) -> str:
    """Compute-bound for convolutions and matmuls above the ridge point, memory-bound for the rest."""
    if cost.kind in ("conv", "matmul") and cost.flops >= ridge_flop_per_byte * max(cost.bytes, 1):
        return "compute"
    return "memory"


def node_bounds(gm: torch.fx.GraphModule, names: list[str], ridge: float) -> dict[str, str]:
    """Boundedness of the named nodes from their ``COST`` (``analysis.cost.annotate`` must have run)."""
    by_name = {n.name: n for n in gm.graph.nodes}
    return {n: boundedness(by_name[n].meta[COST], ridge) for n in names if COST in by_name[n].meta}


# ---------------------------------------------------------------------------------------- trace parsing


def parse_trace(trace: Mapping[str, Any], prefix: str = RANGE_PREFIX) -> dict[str, NodeKernels]:
    """Kernels per node from a Chrome trace of the profiler, matched by correlation id (see module doc)."""
    events = trace.get("traceEvents", [])
    ranges: dict[Any, list[tuple[float, float, str]]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") == "X" and name.startswith(prefix) and e.get("cat") != "gpu_user_annotation":
            span = (e["ts"], e["ts"] + e.get("dur", 0), name[len(prefix) :])
            ranges.setdefault(e.get("tid"), []).append(span)
    starts = {tid: sorted(rs) for tid, rs in ranges.items()}
    owner: dict[Any, str] = {}  # correlation id -> node
    for e in events:
        if e.get("cat") in _LAUNCH_CATS and "correlation" in e.get("args", {}):
            node = _enclosing(starts.get(e.get("tid"), []), e["ts"])
            if node is not None:
                owner[e["args"]["correlation"]] = node
    found: dict[str, list[tuple[float, Kernel]]] = {}
    for e in events:
        if e.get("cat") not in _DEVICE_CATS:
            continue
        node = owner.get(e.get("args", {}).get("correlation"))
        if node is not None:
            found.setdefault(node, []).append((e["ts"], _kernel(e)))
    return {n: NodeKernels(tuple(k for _, k in sorted(ks, key=lambda t: t[0]))) for n, ks in found.items()}


def _enclosing(ranges: list[tuple[float, float, str]], ts: float) -> str | None:
    """The range that contains ``ts``: node ranges of one thread follow each other without nesting."""
    i = bisect.bisect_right(ranges, (ts, math.inf, "")) - 1
    if i >= 0 and ranges[i][0] <= ts <= ranges[i][1]:
        return ranges[i][2]
    return None


def _kernel(e: Mapping[str, Any]) -> Kernel:
    args = e.get("args", {})
    grid = tuple(int(v) for v in args.get("grid", (0, 0, 0)))
    block = tuple(int(v) for v in args.get("block", (0, 0, 0)))
    return Kernel(
        str(e.get("name", "")),
        (grid + (1, 1, 1))[:3] if grid else (0, 0, 0),  # type: ignore[arg-type]
        (block + (1, 1, 1))[:3] if block else (0, 0, 0),  # type: ignore[arg-type]
        int(args.get("registers per thread", 0)),
        int(args.get("shared memory", 0)),
        float(e.get("dur", 0.0)),
    )


# ------------------------------------------------------------------------------------------- profiling


class _RangeInterpreter(torch.fx.Interpreter):
    def run_node(self, n: torch.fx.Node) -> Any:
        with torch.profiler.record_function(RANGE_PREFIX + n.name):
            return super().run_node(n)


def profile_kernels(
    gm: torch.fx.GraphModule, inputs: list[torch.Tensor], key: str, warmup: int = 3, use_cache: bool = True
) -> dict[str, NodeKernels]:
    """One profiled run of ``gm`` (on CUDA) after ``warmup`` runs; writes ``node.meta[KERNELS]``.
    ``key`` names the cache entry (graph hash + GPU model)."""
    from torch.profiler import ProfilerActivity, profile

    path = cache_dir() / "kernels" / f"{key}.json"
    found = _load(path) if use_cache else None
    if found is None:
        interp = _RangeInterpreter(gm)
        with torch.no_grad():
            for _ in range(warmup):
                interp.run(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                interp.run(*inputs)
                torch.cuda.synchronize()
        found = parse_trace(chrome_trace(prof))
        if use_cache:
            _save(path, found)
    for node in gm.graph.nodes:
        if node.name in found:
            node.meta[KERNELS] = found[node.name]
    return found


def chrome_trace(prof: Any) -> dict[str, Any]:
    """A finished ``torch.profiler.profile`` as its Chrome trace (the profiler writes it only to a file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def _save(path: Path, found: dict[str, NodeKernels]) -> None:
    write_cache(path, {n: [k.__dict__ for k in nk.kernels] for n, nk in found.items()})


def _load(path: Path) -> dict[str, NodeKernels] | None:
    try:
        return {
            n: NodeKernels(tuple(Kernel(k["name"], tuple(k["grid"]), tuple(k["block"]), int(k["registers"]),
                                        int(k["shared_memory"]), float(k["duration_us"])) for k in ks))
            for n, ks in read_cache(path).items()
        }  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
