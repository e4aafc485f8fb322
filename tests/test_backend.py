"""torch.compile(model, backend="pathweave"): registered by entry point, exact, never stale."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from pathweave.backend import BackendFallbackWarning, pathweave_backend


class Branchy(torch.nn.Module):
    """A conv net with a data-dependent branch: dynamo hands over two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x)).relu().mean((2, 3))
        if y.sum() > 0:
            y = y * 2
        return self.head(y)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Branchy().eval()


def test_registered_by_entry_point() -> None:
    assert "pathweave" in torch._dynamo.list_backends()


@pytest.mark.parametrize("strategy", ["sequential", "tiles"])
def test_matches_eager_across_a_graph_break(strategy: str) -> None:
    model, x = _model(), torch.randn(1, 3, 17, 17)
    compiled = torch.compile(model, backend="pathweave", options={"strategy": strategy}, dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(compiled(-x), model(-x), rtol=1e-4, atol=1e-5)  # the other branch


def test_weights_changed_in_place_rebuild() -> None:
    model, x = _model(), torch.randn(1, 3, 9, 9)
    compiled = torch.compile(model, backend="pathweave", options={"strategy": "sequential"}, dynamic=False)
    with torch.no_grad():
        compiled(x)
        model.head.weight.mul_(3)
        with pytest.warns(BackendFallbackWarning, match="weights changed"):
            out = compiled(x)
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)


def test_gradients_run_eagerly() -> None:
    model, x = _model(), torch.randn(1, 3, 9, 9)
    compiled = torch.compile(model, backend="pathweave", options={"strategy": "sequential"}, dynamic=False)
    with pytest.warns(BackendFallbackWarning, match="gradients"):
        out = compiled(x)
    out.sum().backward()
    assert model.conv.weight.grad is not None


def test_dynamic_shapes_fall_back_loudly() -> None:
    model = _model()
    options = {"strategy": "sequential", "fallback": "eager"}
    compiled = torch.compile(model, backend="pathweave", options=options, dynamic=True)
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad(), pytest.warns(BackendFallbackWarning, match="SymInt"):
        out = compiled(x)
    torch.testing.assert_close(out, model(x).detach(), rtol=1e-4, atol=1e-5)


def test_bad_options_name_the_setting() -> None:
    gm = torch.fx.symbolic_trace(_model().head)
    with pytest.raises(Exception, match="strategy='fastest'"):
        pathweave_backend(gm, [torch.randn(1, 8)], {"strategy": "fastest"})
    with pytest.raises(Exception, match="fallback='none'"):
        pathweave_backend(gm, [torch.randn(1, 8)], {"fallback": "none"})


def test_refused_graph_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathweave import backend
    from pathweave.errors import UnsupportedError

    def refuse(*args: object, **kwargs: object) -> None:
        raise UnsupportedError("no strategy takes node fft_rfft (aten.fft_rfft)")

    monkeypatch.setattr(backend, "optimize", refuse)
    gm = torch.fx.symbolic_trace(_model().head)
    x = torch.randn(4, 8)
    with pytest.warns(BackendFallbackWarning, match="UnsupportedError: no strategy takes node fft_rfft"):
        fn = pathweave_backend(gm, [x], {"fallback": "eager"})
    torch.testing.assert_close(fn(x), gm(x))


def test_many_threads_at_once() -> None:
    """Calls from many threads; a rebuild (weights changed) is not raced here: its capture patches torch
    globally, which breaks dynamo's frame evaluation in the other threads (a torch limitation)."""
    import threading

    model, x = _model(), torch.randn(1, 3, 9, 9)
    compiled = torch.compile(model, backend="pathweave", options={"strategy": "sequential"}, dynamic=False)
    errors: list[BaseException] = []
    with torch.no_grad():
        compiled(x)
        want = model(x)

    def call() -> None:
        try:
            with torch.no_grad():
                for _ in range(5):
                    torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
