"""The GPU timeline: kernels by stream from a hand-written profiler trace, its summary and its picture."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathweave.errors import InputError
from pathweave.report.timeline import Span, kernel_spans, plot_timelines, summary


def _kernel(ts: float, dur: float, stream: int, name: str = "k") -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": stream,
            "args": {"stream": stream}}  # fmt: skip


TRACE = {
    "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 90.0, "dur": 5.0, "tid": 1},
        _kernel(100.0, 10.0, 7, "conv_a"),
        _kernel(104.0, 8.0, 13, "conv_b"),
        _kernel(112.0, 4.0, 7, "cat"),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 95.0, "dur": 1.0, "tid": 7},
    ]
}


def test_kernels_by_stream_relative_to_the_first() -> None:
    spans = kernel_spans(TRACE)
    assert spans == [Span(7, 0.0, 10.0, "conv_a"), Span(13, 4.0, 8.0, "conv_b"), Span(7, 12.0, 4.0, "cat")]
    st = summary(spans)
    assert st == {"makespan_us": 16.0, "kernel_us": 22.0, "overlap": 22.0 / 16.0, "streams": 2}
    assert kernel_spans({"traceEvents": []}) == [] and summary([])["streams"] == 0


def test_picture_has_one_panel_per_strategy(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    spans = kernel_spans(TRACE)
    out = plot_timelines({"single": [Span(1, 0.0, 22.0, "all")], "opara": spans}, tmp_path / "t.png", "x")
    assert out.stat().st_size > 1000
    with pytest.raises(InputError, match="png or .svg"):
        plot_timelines({"opara": spans}, tmp_path / "t.pdf", "x")
