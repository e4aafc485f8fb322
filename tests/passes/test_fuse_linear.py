"""A linear becomes oneDNN's only where oneDNN measured faster on its shape, and the answer is eager's
either way (the timing itself is stubbed: no test depends on this machine's speed)."""

from __future__ import annotations

import pytest
import torch

from pathweave.frontend.capture import capture
from pathweave.passes import fuse_linear
from pathweave.passes.fuse_linear import _measure as measured  # the real one: conftest stubs it
from pathweave.passes.pipeline import FAST_CPU, run_pipeline

aten = torch.ops.aten


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(17, 33)
        self.b = torch.nn.Linear(33, 33)
        self.c = torch.nn.Linear(33, 33)
        self.d = torch.nn.Linear(33, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(torch.tanh(self.c(self.b(torch.nn.functional.gelu(self.a(x))))))


def _rewritten(monkeypatch: pytest.MonkeyPatch, faster: bool) -> tuple[int, int, list[tuple], torch.Tensor]:
    asked: list[tuple] = []

    def measure(x: torch.Tensor, w: torch.Tensor) -> bool:
        asked.append((tuple(x.shape), tuple(w.shape)))
        return faster

    monkeypatch.setattr(fuse_linear, "_measure", measure)
    monkeypatch.setattr(fuse_linear, "_ONEDNN_FASTER", {})
    torch.manual_seed(0)
    model, x = _Mlp().eval(), torch.randn(3, 17)
    gm = capture(model, x).gm
    run_pipeline(gm, FAST_CPU)
    targets = [n.target for n in gm.graph.nodes]
    onednn = targets.count(torch.ops.mkldnn._linear_pointwise.default)
    x[0, 1] = float("nan")
    x[2, 0] = float("inf")
    with torch.no_grad():
        torch.testing.assert_close(gm(x)[0], model(x), equal_nan=True, rtol=1e-4, atol=1e-5)
    return onednn, targets.count(aten.linear.default), asked, gm(x)[0]


def test_linear_goes_to_onednn_where_it_measured_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    onednn, linear, asked, _ = _rewritten(monkeypatch, faster=True)
    assert (onednn, linear) == (4, 0)
    assert asked == [((3, 17), (33, 17)), ((3, 33), (33, 33)), ((3, 33), (3, 33))]  # once per shape


def test_linear_stays_aten_where_onednn_measured_slower(monkeypatch: pytest.MonkeyPatch) -> None:
    onednn, linear, _, out = _rewritten(monkeypatch, faster=False)
    assert (onednn, linear) == (0, 4)
    assert torch.isnan(out[0]).all()


def test_measure_compares_both_kernels_on_the_shape() -> None:
    w = torch.randn(5, 7)
    got = measured(torch.randn(1, 3, 7), w)
    assert isinstance(got, bool)
