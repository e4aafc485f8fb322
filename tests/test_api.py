"""The public API: names, lazy import, analyze/optimize on modules and zoo names, the exception tree."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings

import pytest
import torch
import torch.fx
from torch import nn

import pathweave
from pathweave import errors, zoo
from pathweave.analysis.analyze import Analysis, analyze_captured
from pathweave.frontend.capture import capture

RTOL = 1e-3

EXPECTED_ALL = [
    "STRATEGIES",
    "CaptureError",
    "ClosedError",
    "CoExecutor",
    "ExecutionError",
    "InputError",
    "MissingDependencyError",
    "PathweaveError",
    "PlanError",
    "UnknownModelError",
    "UnsupportedError",
    "__version__",
    "analyze",
    "capture",
    "load_model",
    "load",
    "optimize",
    "save",
]


class Nested(nn.Module):
    """Returns a dict with a tuple inside, from two inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> dict:
        feat = torch.relu(self.conv(x))
        pooled = feat.mean((2, 3))
        return {"logits": self.fc(pooled) * scale, "extra": (pooled, feat)}


def flip_if_negative(x: torch.Tensor) -> torch.Tensor:
    if x.sum() < 0:
        return -x
    return x


torch.fx.wrap("flip_if_negative")


class NeedsFx(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(flip_if_negative(x * 2))


@pytest.fixture(scope="module")
def nested() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Nested().eval(), (torch.randn(1, 3, 8, 8), torch.randn(1, 2))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=RTOL, atol=RTOL * want.abs().max().item())


def test_all_is_the_documented_list() -> None:
    assert pathweave.__all__ == EXPECTED_ALL
    assert sorted(dir(pathweave)) == sorted(EXPECTED_ALL)


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(pathweave, name) is not None


def test_lazy_names_are_the_real_objects() -> None:
    assert pathweave.InputError is errors.InputError
    assert pathweave.load_model is pathweave.zoo.load.load_model
    assert pathweave.STRATEGIES == ("auto", "sequential", "lanes", "stacks", "streams", "tiles")
    assert pathweave.__version__ == "0.1.0"
    assert inspect.isfunction(pathweave.analyze) and inspect.isfunction(pathweave.optimize)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        pathweave.nothing_here  # noqa: B018


def test_capture_name_stays_the_function() -> None:
    import pathweave.analysis.analyze  # noqa: F401  (modules named like the public functions)
    import pathweave.frontend.capture  # noqa: F401

    assert inspect.isfunction(pathweave.capture) and inspect.isfunction(pathweave.analyze)


def test_import_loads_no_submodule() -> None:
    code = (
        "import sys, pathweave\n"
        "print(sorted(m for m in sys.modules if m.startswith('pathweave')))\n"
        "print('torch.fx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['pathweave']", "False"]


def test_analyze_a_module(nested) -> None:
    model, inputs = nested
    analysis = pathweave.analyze(model, *inputs)
    assert isinstance(analysis, Analysis) and analysis.measured is None
    # conv 9, relu 1, mean 1, linear 1, mul 1
    assert analysis.static.total_work == 13.0
    assert analysis.model == "Nested"
    assert analysis.parallelism == analysis.static.parallelism > 0


def test_analyze_a_zoo_name_and_a_captured(zoo_cache) -> None:
    by_name = pathweave.analyze("squeezenet1_0")
    assert by_name.model == "squeezenet1_0"
    # full-size input through the name, small input through the cache: the same structure; only the
    # global pool's window (input / output: 13x13 at 224x224, 3x3 at 64x64) differs
    small = analyze_captured(zoo_cache.captured("squeezenet1_0"))
    assert (by_name.static.nodes, by_name.static.max_width) == (small.static.nodes, small.static.max_width)
    assert by_name.static.total_work == small.static.total_work - 9 + 169
    assert by_name.flops > small.flops > 0
    assert pathweave.analyze(zoo_cache.captured("squeezenet1_0")).static == small.static


def test_optimize_a_module_keeps_output_nesting(nested) -> None:
    model, inputs = nested
    fast = pathweave.optimize(model, *inputs)  # "auto": whichever measured fastest (tiles run it in islands)
    assert set(fast.auto_times_ms) == {"sequential", "lanes", "tiles"} and fast.strategy in fast.auto_times_ms
    got = fast(*inputs)
    with torch.no_grad():
        want = model(*inputs)
    assert type(got) is dict and list(got) == ["logits", "extra"]
    assert type(got["extra"]) is tuple and len(got["extra"]) == 2
    _close(got["logits"], want["logits"])
    _close(got["extra"][0], want["extra"][0])
    _close(got["extra"][1], want["extra"][1])


def test_optimize_tuple_outputs() -> None:
    model = nn.LSTM(4, 3, batch_first=True).eval()
    x = torch.randn(2, 5, 4)
    fast = pathweave.optimize(model, x, strategy="sequential")
    out, (h, c) = fast(x)
    with torch.no_grad():
        want_out, (want_h, want_c) = model(x)
    _close(out, want_out)
    _close(h, want_h)
    _close(c, want_c)


def test_auto_chooses_among_sequential_lanes_and_tiles(tiny_cnn) -> None:
    model, x = tiny_cnn().eval(), torch.randn(1, 3, 8, 8)
    fast = pathweave.optimize(model, x)
    assert set(fast.auto_times_ms) == {"sequential", "lanes", "tiles"}
    assert fast.auto_times_ms[fast.strategy] == min(fast.auto_times_ms.values())
    with torch.no_grad():
        _close(fast(x), model(x))


def test_auto_drops_a_strategy_that_fails_while_timed(tiny_cnn, monkeypatch) -> None:
    from pathweave import auto

    built = auto.build

    def broken_later(name: str, *args: object) -> object:
        strat = built(name, *args)  # built and checked; the tiles' runs fail from here on
        if name != "tiles":
            return strat

        def fail(flat: list) -> None:
            raise errors.ExecutionError("tile 3 failed")

        strat.run_flat = fail
        return strat

    closed: list[str] = []
    close_all = auto.close_all
    monkeypatch.setattr(auto, "build", broken_later)

    def recorded(fns: list) -> None:
        closed.extend(f.strategy for f in fns)
        close_all(fns)

    monkeypatch.setattr(auto, "close_all", recorded)
    model, x = tiny_cnn().eval(), torch.randn(1, 3, 8, 8)
    with pytest.warns(UserWarning, match="auto: tiles failed while timed, dropped .*tile 3 failed"):
        fast = pathweave.optimize(model, x)
    assert set(fast.auto_times_ms) == {"sequential", "lanes"}
    assert sorted(closed) == sorted({"sequential", "lanes", "tiles"} - {fast.strategy})  # the others closed


def test_optimize_a_zoo_name(zoo_cache) -> None:
    from pathweave import zoo

    fast = pathweave.optimize("squeezenet1_0")
    (x,) = zoo.get("squeezenet1_0").example_inputs(1)  # full size, as the name loads it
    with torch.no_grad():
        want = zoo_cache.model("squeezenet1_0")(x)
    _close(fast(x), want)


def test_optimize_unknown_strategy(nested) -> None:
    model, inputs = nested
    with pytest.raises(pathweave.InputError, match="unknown strategy 'nope'; choose one of auto, sequential"):
        pathweave.optimize(model, *inputs, strategy="nope")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_optimize_cuda_without_cuda(nested) -> None:
    model, inputs = nested
    with pytest.raises(pathweave.InputError, match="CUDA is not available"):
        pathweave.optimize(model, *inputs, device="cuda")


def test_optimize_warns_on_fx_capture() -> None:
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match="NeedsFx: captured by fx tracing"):
        fast = pathweave.optimize(NeedsFx(), x)
    _close(fast(x), NeedsFx()(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        pathweave.optimize(capture(NeedsFx(), x), strategy="sequential")  # asked for: no warning


def test_optimize_bad_model() -> None:
    with pytest.raises(pathweave.InputError, match="expected a torch.nn.Module"):
        pathweave.optimize(object(), torch.randn(2))
    with pytest.raises(pathweave.UnknownModelError, match="unknown zoo model 'nope'"):
        pathweave.optimize("nope")


def _error_classes() -> list[type]:
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]


def test_exception_tree() -> None:
    classes = _error_classes()
    assert {c.__name__ for c in classes} == {
        "PathweaveError", "InputError", "UnknownModelError", "CaptureError", "UnsupportedError",
        "PlanError", "ExecutionError", "ClosedError", "MissingDependencyError",
    }  # fmt: skip
    for cls in classes:
        assert issubclass(cls, errors.PathweaveError), cls
        assert getattr(pathweave, cls.__name__) is cls
    assert issubclass(errors.InputError, ValueError)
    assert issubclass(errors.UnknownModelError, errors.InputError)
    assert issubclass(errors.UnknownModelError, KeyError)
    assert issubclass(errors.MissingDependencyError, ImportError)
    assert issubclass(errors.ClosedError, errors.ExecutionError)
    for cls in (errors.CaptureError, errors.UnsupportedError, errors.PlanError, errors.ExecutionError):
        assert not issubclass(cls, errors.InputError)
    assert errors.ExecutionError("boom", node="add").node == "add"
    assert errors.UnsupportedError("no", ops=["aten.foo"]).ops == ["aten.foo"]


def test_require_gives_an_install_hint() -> None:
    with pytest.raises(errors.MissingDependencyError, match=r"pip install 'pathweave\[plot\]'"):
        errors.require("pathweave_no_such_module", "plot")
    assert errors.require("json", "none").dumps([1]) == "[1]"


def test_unknown_device_is_an_input_error() -> None:
    lin = torch.nn.Linear(8, 4).eval()
    for device in ("tpu", "meta"):
        with pytest.raises(errors.InputError, match="device"):
            pathweave.optimize(lin, torch.randn(2, 8), strategy="sequential", device=device)


def test_zoo_name_with_inputs_runs_on_them() -> None:
    """A zoo name with inputs is the zoo model on those inputs (it was taken for a missing file)."""
    x = zoo.get("deepfm").example_inputs(2, small=True)
    fn = pathweave.optimize("deepfm", *x, strategy="sequential")
    assert fn.captured.example_inputs[0].shape[0] == 2
    with pytest.raises(errors.UnknownModelError, match="known: googlenet"):
        pathweave.optimize("squeezenet", torch.randn(1, 3, 32, 32))
    with pytest.raises(errors.InputError, match="at least 1 block"):
        pathweave.optimize("poolstack:0")
