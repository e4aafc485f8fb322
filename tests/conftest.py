"""Shared fixtures: every zoo model is built and captured at most once per test session."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from pathweave import zoo
from pathweave.frontend.capture import capture
from pathweave.frontend.graph import Captured
from pathweave.passes import fuse_linear


@pytest.fixture(autouse=True)
def _linears_on_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fuse_linear`` times oneDNN against ATen per shape; tests build what it built before it measured
    (every linear on oneDNN), so that what they check never depends on a noisy timing
    (tests/passes/test_fuse_linear.py stubs both answers and runs the real measurement)."""
    monkeypatch.setattr(fuse_linear, "_measure", lambda x, w: True)
    monkeypatch.setattr(fuse_linear, "_ONEDNN_FASTER", {})


class ZooCache:
    """Models, small example inputs and captured graphs, built lazily and kept for the session."""

    def __init__(self) -> None:
        self._models: dict[str, torch.nn.Module] = {}
        self._captured: dict[tuple[str, int], Captured] = {}
        self._eager: dict[tuple[str, int], list[torch.Tensor]] = {}

    def model(self, name: str) -> torch.nn.Module:
        if name not in self._models:
            self._models[name] = zoo.get(name).build()
        return self._models[name]

    def inputs(self, name: str, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return zoo.get(name).example_inputs(batch, small=True)

    def eager(self, name: str, batch: int = 1) -> list[torch.Tensor]:
        """The eager model's outputs as a flat list of tensors."""
        if (name, batch) not in self._eager:
            with torch.no_grad():
                self._eager[(name, batch)] = flat_tensors(self.model(name)(*self.inputs(name, batch)))
        return self._eager[(name, batch)]

    def captured(self, name: str, batch: int = 1) -> Captured:
        if (name, batch) not in self._captured:
            self._captured[(name, batch)] = capture(self.model(name), *self.inputs(name, batch), name=name)
        return self._captured[(name, batch)]


def flat_tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def assert_outputs_close(got: Any, want: Any, rtol: float, atol_scale: float) -> None:
    """Same structure, shapes and dtypes; values within rtol * |want| + atol_scale * max|want|."""
    got_flat, got_spec = pytree.tree_flatten(got)
    want_flat, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"output structure {got_spec} != {want_spec}"
    for i, (g, w) in enumerate(zip(got_flat, want_flat, strict=True)):
        assert isinstance(g, torch.Tensor), f"output {i} is a {type(g).__name__}"
        assert (g.shape, g.dtype) == (w.shape, w.dtype), (
            f"output {i}: {g.shape} {g.dtype}, want {w.shape} {w.dtype}"
        )
        scale = w.abs().max().item() if w.is_floating_point() and w.numel() else 1.0
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol_scale * max(scale, 1e-6), msg=f"output {i}")


def nonfinite_input(
    shape: tuple[int, ...], seed: int, where: tuple[tuple[int, int], ...] = ((0, 0), (0, 0), (0, 0))
) -> torch.Tensor:
    """A seeded random NCHW input with a NaN at the first row's last column, a +inf at the last row's first
    column and a -inf at the centre, each in the (batch, channel) ``where`` names in that order."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    (nb, nc), (pb, pc), (mb, mc) = where
    x[nb, nc, 0, -1] = float("nan")
    x[pb, pc, -1, 0] = float("inf")
    x[mb, mc, shape[2] // 2, shape[3] // 2] = float("-inf")
    return x


def assert_nonfinite_close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    """NaN and +-inf exactly where ``want`` has them; the finite values within rtol and atol."""
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    torch.testing.assert_close(got[finite], want[finite], rtol=rtol, atol=atol)


class TinyCNN(torch.nn.Module):
    """Conv, ReLU, max pool, linear on 3x8x8 inputs: a model small enough to export, tile and report on
    in a second."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).flatten(1))


@pytest.fixture(scope="session")
def tiny_cnn() -> type[TinyCNN]:
    return TinyCNN


@pytest.fixture(scope="session")
def zoo_cache() -> ZooCache:
    return ZooCache()


@pytest.fixture(scope="session")
def outputs_close():
    return assert_outputs_close


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` are skipped where CUDA is not available (CI has no GPU); tests marked ``soak``
    (the issues' full bars: minutes each) run only with ``PATHWEAVE_SOAK=1``."""
    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs CUDA")
    if os.environ.get("PATHWEAVE_SOAK") != "1":
        skips["soak"] = pytest.mark.skip(reason="a soak test: run with PATHWEAVE_SOAK=1")
    for item in items:
        for mark, skip in skips.items():
            if mark in item.keywords:
                item.add_marker(skip)
