"""What capture accepts (modules, ExportedPrograms, .pt2 files), when it falls back to fx tracing, and
the errors it raises instead of ever returning a partial or wrong graph."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from torch import nn

import pathweave
from pathweave.errors import CaptureError, InputError, PathweaveError, UnknownModelError, UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.frontend.shapes import tensor_specs

RTOL, ATOL = 1e-4, 1e-5


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def flip_if_negative(x: torch.Tensor) -> torch.Tensor:
    """Branches on a tensor's value: torch.export rejects it, fx treats the wrapped call as a leaf."""
    if x.sum() < 0:
        return -x
    return x


torch.fx.wrap("flip_if_negative")


class WrappedBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(flip_if_negative(self.conv(x)))


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > 0:  # the line the error must point at
            return y * 2
        return y


class CallCounter(nn.Module):
    """Adds how often it has been called: capture bakes in one count, eager saw another."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x) + self.calls


@pytest.fixture(scope="module")
def small() -> tuple[nn.Module, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return SmallNet().eval(), torch.randn(2, 3, 8, 8)


def _eager(model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def test_module_capture_matches_eager(small) -> None:
    model, x = small
    captured = capture(model, x)
    assert captured.method == "export"
    assert captured.name == "SmallNet"
    torch.testing.assert_close(captured(x), _eager(model, x), rtol=RTOL, atol=ATOL)
    other = torch.randn_like(x)  # the graph computes, it does not replay the example
    torch.testing.assert_close(captured(other), _eager(model, other), rtol=RTOL, atol=ATOL)


def test_capture_restores_training_mode(small) -> None:
    model, x = small
    model.train()
    try:
        capture(model, x)
        assert model.training
    finally:
        model.eval()


def test_exported_program_capture(small) -> None:
    model, x = small
    ep = torch.export.export(model, (x,), strict=False)
    captured = capture(ep)  # example inputs come from the program
    assert captured.method == "export"
    assert captured.name == "exported_program"
    torch.testing.assert_close(captured(x), _eager(model, x), rtol=RTOL, atol=ATOL)


def test_pt2_file_capture(small, tmp_path) -> None:
    model, x = small
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(model, (x,), strict=False), path)
    for where in (path, str(path)):
        captured = capture(where, name="from_file")
        assert captured.method == "export" and captured.name == "from_file"
        torch.testing.assert_close(captured(x), _eager(model, x), rtol=RTOL, atol=ATOL)


def test_missing_and_bogus_pt2_files(tmp_path) -> None:
    with pytest.raises(InputError, match="no such file"):
        capture(tmp_path / "absent.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip archive")
    with pytest.raises(InputError, match="junk.pt2 is not a torch.export .pt2"):
        capture(junk)


def test_fx_fallback_when_export_fails() -> None:
    model = WrappedBranch().eval()
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(CaptureError, match="torch.export failed"):
        capture(model, x, method="export")
    captured = capture(model, x)
    assert captured.method == "fx"
    assert any(n.target is flip_if_negative for n in captured.gm.graph.nodes)
    torch.testing.assert_close(captured(x), _eager(model, x), rtol=RTOL, atol=ATOL)
    other = -10 * torch.rand(1, 3, 8, 8)  # the leaf keeps its branch at run time
    torch.testing.assert_close(captured(other), _eager(model, other), rtol=RTOL, atol=ATOL)


def test_fx_method_directly(small) -> None:
    model, x = small
    captured = capture(model, x, method="fx")
    assert captured.method == "fx"
    assert any(n.op == "call_module" for n in captured.gm.graph.nodes)
    torch.testing.assert_close(captured(x), _eager(model, x), rtol=RTOL, atol=ATOL)


def test_fx_capture_has_shapes(small) -> None:
    model, x = small
    captured = capture(model, x, method="fx")
    conv = next(n for n in captured.gm.graph.nodes if n.op == "call_module" and n.target == "conv")
    assert [s.shape for s in tensor_specs(conv)] == [(2, 4, 8, 8)]


def test_not_a_module() -> None:
    with pytest.raises(InputError, match="expected a torch.nn.Module.*got function"):
        capture(lambda x: x, torch.randn(2))
    with pytest.raises(InputError, match="got int"):
        capture(3, torch.randn(2))


def test_unknown_method(small) -> None:
    model, x = small
    with pytest.raises(InputError, match="unknown capture method 'jit'"):
        capture(model, x, method="jit")


def test_no_inputs(small) -> None:
    with pytest.raises(InputError, match="SmallNet: capture needs example inputs"):
        capture(small[0])


def test_non_tensor_input(small) -> None:
    with pytest.raises(InputError, match="example input 0 is a float; pass tensors"):
        capture(small[0], 1.5)


def test_wrong_input_shape_names_the_shape(small) -> None:
    match = r"SmallNet fails on the example inputs \(\(2, 3, 9, 9\) torch.float32\)"
    with pytest.raises(InputError, match=match):
        capture(small[0], torch.randn(2, 3, 9, 9))


def test_wrong_dtype_names_the_dtype(small) -> None:
    with pytest.raises(InputError, match=r"\(2, 3, 8, 8\) torch.float64"):
        capture(small[0], torch.randn(2, 3, 8, 8, dtype=torch.float64))


def test_data_dependent_control_flow_names_the_line() -> None:
    with pytest.raises(CaptureError) as info:
        capture(DataDependent().eval(), torch.randn(2, 4))
    message = str(info.value)
    assert "could not capture DataDependent as one whole graph" in message
    assert "test_capture_inputs.py:" in message and "if y.sum() > 0:" in message
    assert "fx symbolic tracing failed in module <root> (DataDependent)" in message


def test_fx_failure_names_the_module() -> None:
    model = nn.Sequential(nn.Linear(4, 4), DataDependent()).eval()
    with pytest.raises(CaptureError, match=r"in module 1 \(DataDependent\)"):
        capture(model, torch.randn(2, 4), method="fx")


def test_stateful_model_is_refused_not_returned_wrong() -> None:
    model = CallCounter().eval()
    with pytest.raises(CaptureError, match="differs from eager: output 0 differs by up to 1") as info:
        capture(model, torch.randn(2, 4))
    assert "may depend on state or Python values" in str(info.value)


def test_captured_checks_calls() -> None:
    model = nn.Linear(4, 3).eval()
    captured = capture(model, torch.randn(2, 4))
    with pytest.raises(InputError, match=r"input 0 has shape \(5, 4\).*captured for \(2, 4\)"):
        captured(torch.randn(5, 4))
    with pytest.raises(InputError, match="torch.float64"):
        captured(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(InputError, match="called with 2 input"):
        captured(torch.randn(2, 4), torch.randn(2, 4))
    with pytest.raises(InputError, match="inputs are structured as"):
        captured(x=torch.randn(2, 4))


def test_unknown_zoo_name() -> None:
    with pytest.raises(UnknownModelError, match="unknown zoo model 'no_such_net'; known: googlenet") as info:
        pathweave.load_model("no_such_net")
    assert isinstance(info.value, PathweaveError) and isinstance(info.value, KeyError)
    assert str(info.value).startswith("unknown")  # not quoted like a KeyError


def test_empty_and_meta_example_inputs_are_refused(small) -> None:
    model, x = small
    with pytest.raises(InputError, match="empty"):
        capture(model, x[:0])
    with pytest.raises(InputError, match="device meta"):
        capture(model, x.to("meta"))


def test_calls_with_wrong_count_or_device_name_the_problem(small) -> None:
    model, x = small
    fn = pathweave.optimize(model, x, strategy="sequential")
    with pytest.raises(InputError, match="called with 2 input"):
        fn(x, x)
    with pytest.raises(InputError, match="called with 0 input"):
        fn()
    with pytest.raises(InputError, match="meta"):
        fn(x.to("meta"))


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].sum().reshape(1) + torch.nonzero(x).shape[0]


def test_data_dependent_sizes_are_refused_by_tiles_and_run_elsewhere() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(pathweave.UnsupportedError, match="depends on the input's values"):
        pathweave.optimize(_DataDependent(), x, strategy="tiles")
    for strategy in ("sequential", "auto"):
        torch.testing.assert_close(pathweave.optimize(_DataDependent(), x, strategy=strategy)(x),
                                   _DataDependent()(x))  # fmt: skip


class _Sub(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b


@pytest.mark.parametrize("strategy", ["sequential", "lanes", "tiles"])
def test_the_same_tensor_twice_as_examples_stays_two_inputs(strategy: str) -> None:
    """torch.export takes one tensor passed twice for one input: every later call computed a - a = 0
    (found while testing the ONNX integer division with ones for both operands)."""
    x = torch.ones(3)
    fn = pathweave.optimize(_Sub(), x, x, strategy=strategy)
    torch.testing.assert_close(fn(torch.full((3,), 5.0), torch.ones(3)), torch.full((3,), 4.0))


def test_capture_restores_each_submodule_mode() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model.train()
    model[1].eval()
    capture(model, torch.randn(2, 3))
    assert model.training and model[0].training and not model[1].training


def test_buffer_mutation_is_named() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return x * 2

    with pytest.raises(UnsupportedError, match=r"updates its buffers \['calls'\]"):
        capture(Counter(), torch.randn(2))
