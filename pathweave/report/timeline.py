"""Where the time goes on the GPU: the kernels of one CUDA Graph replay, by stream, over time.

``replay_spans(run)`` profiles one call of ``run`` (a graph replay) and returns its kernels as
``Span``s, read from the profiler's trace (kernel events carry their stream). ``plot_timelines`` draws
one panel per strategy, streams x time, on one time axis, so the single-stream graph and the
multi-stream one can be compared at a glance (``pathweave timeline MODEL``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pathweave.errors import ExecutionError, InputError, require


@dataclass(frozen=True)
class Span:
    stream: int
    start_us: float
    dur_us: float
    name: str


def kernel_spans(trace: Mapping[str, Any]) -> list[Span]:
    """The kernels of a Chrome trace, times relative to the first kernel's start."""
    found = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            stream = e.get("args", {}).get("stream", e.get("tid", 0))
            found.append((float(e["ts"]), float(e.get("dur", 0.0)), int(stream), str(e.get("name", ""))))
    if not found:
        return []
    t0 = min(ts for ts, *_ in found)
    return sorted((Span(s, ts - t0, d, n) for ts, d, s, n in found), key=lambda sp: sp.start_us)


def replay_spans(run: Callable[[], Any], warmup: int = 3) -> list[Span]:
    """Profile one call of ``run`` on CUDA (after ``warmup`` calls) and return its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pathweave.analysis.kernels import chrome_trace

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    spans = kernel_spans(chrome_trace(prof))
    if not spans:
        raise ExecutionError("the profiler recorded no kernels for the replay (CUPTI kernel tracing is off?)")
    return spans


def summary(spans: Sequence[Span]) -> dict[str, float]:
    """Makespan, summed kernel time, their ratio (the overlap achieved) and the number of streams."""
    if not spans:
        return {"makespan_us": 0.0, "kernel_us": 0.0, "overlap": 0.0, "streams": 0}
    makespan = max(s.start_us + s.dur_us for s in spans)
    busy = sum(s.dur_us for s in spans)
    return {"makespan_us": makespan, "kernel_us": busy, "overlap": busy / max(makespan, 1e-9),
            "streams": len({s.stream for s in spans})}  # fmt: skip


def plot_timelines(
    panels: Mapping[str, Sequence[Span]], path: Path, title: str, row: str = "stream", unit: str = "kernel"
) -> Path:
    """One panel per entry (label -> spans), rows = streams (or what ``row`` names: the tile runtime's
    workers) in order of first use, shared time axis; ``unit`` names what a span is."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"the timeline is written as .png or .svg, not {path.suffix or 'no suffix'}")
    require("matplotlib", "plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [_rows(spans) for spans in panels.values()]
    heights = [max(2.0, 0.18 * max(len(r), 1) + 1.0) for r in rows]
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, sum(heights)), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for ax, (label, spans), order in zip(axes[:, 0], panels.items(), rows, strict=True):
        for i, stream in enumerate(order):
            bars = [(s.start_us, s.dur_us) for s in spans if s.stream == stream]
            ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=f"C{i % 10}", edgecolor="none")
        st = summary(spans)
        ax.set_yticks(range(len(order)), [str(s) for s in order], fontsize=6)
        ax.set_ylabel(row)
        ax.set_ylim(len(order) - 0.5, -0.5)
        rows_used = f"{int(st['streams'])} {row}{'s' * (st['streams'] != 1)}"
        ax.set_title(f"{label}: {st['makespan_us']:.0f} us, {st['kernel_us']:.0f} us of {unit}s, "
                     f"{rows_used}, overlap {st['overlap']:.2f}x", fontsize=9)  # fmt: skip
    axes[-1, 0].set_xlabel(f"time since the first {unit} (us)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _rows(spans: Sequence[Span]) -> list[int]:
    first: dict[int, float] = {}
    for s in spans:
        first.setdefault(s.stream, s.start_us)
    return sorted(first, key=first.__getitem__)
