"""Every zoo model captures whole through torch.export, matches eager, and has a shape on every tensor."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx

from pathweave import zoo
from pathweave.frontend.graph import Captured
from pathweave.frontend.shapes import TensorSpec, tensor_specs

RTOL, ATOL_SCALE = 1e-4, 1e-5


def _real_outputs(captured: Captured) -> dict[str, Any]:
    """What each node really returns when the graph runs on its example inputs."""
    seen: dict[str, Any] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            seen[n.name] = out
            return out

    with torch.no_grad():
        _Recorder(captured.gm).run(*captured.example_inputs)
    return seen


def _specs_of(value: Any) -> list[TensorSpec] | None:
    """Specs of a tensor or a tuple/list of tensors; None for anything else."""
    if isinstance(value, torch.Tensor):
        return [TensorSpec(tuple(value.shape), value.dtype)]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return [TensorSpec(tuple(v.shape), v.dtype) for v in value]
    return None


def assert_every_tensor_has_its_shape(captured: Captured) -> None:
    real = _real_outputs(captured)
    checked = 0
    for node in captured.gm.graph.nodes:
        if node.op not in ("call_function", "call_module", "call_method"):
            continue
        want = _specs_of(real[node.name])
        if want is None:
            continue
        assert tensor_specs(node) == want, f"{node.format_node()}: specs {tensor_specs(node)}, ran as {want}"
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_captures_whole_with_shapes(zoo_cache, outputs_close, name: str) -> None:
    captured = zoo_cache.captured(name)
    assert captured.method == "export"
    assert captured.name == name
    assert_every_tensor_has_its_shape(captured)
    inputs = zoo_cache.inputs(name)
    with torch.no_grad():
        got = captured(*inputs)
        want = zoo_cache.model(name)(*inputs)
    outputs_close(got, want, rtol=RTOL, atol_scale=ATOL_SCALE)


def test_zoo_capture_has_weights_as_attributes(zoo_cache) -> None:
    """Parameters become get_attr nodes: the only placeholders are the model's own inputs."""
    captured = zoo_cache.captured("resnet50")
    placeholders = [n for n in captured.gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(zoo_cache.inputs("resnet50")) == 1
    n_params = sum(1 for _ in zoo_cache.model("resnet50").parameters())
    assert sum(1 for n in captured.gm.graph.nodes if n.op == "get_attr") >= n_params


def test_captured_rejects_another_batch(zoo_cache) -> None:
    from pathweave.errors import InputError

    captured = zoo_cache.captured("squeezenet1_0")
    with pytest.raises(InputError, match=r"\(2, 3, 64, 64\).*captured for \(1, 3, 64, 64\)"):
        captured(*zoo_cache.inputs("squeezenet1_0", batch=2))
