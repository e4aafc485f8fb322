"""ONNX RNN, GRU and LSTM against ONNX Runtime on odd sizes and every direction; batch-first layout
against onnx's reference evaluator (ONNX Runtime refuses layout 1)."""

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from pathweave.frontend.onnx import onnx_module  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.mark.parametrize("kind", list(GATES))
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrence_matches_onnxruntime(tmp_path, kind: str, direction: str, layout: int) -> None:
    rng = np.random.default_rng(GATES[kind])
    dirs, hidden, seq, batch, size = (2 if direction == "bidirectional" else 1), 5, 3, 3, 17
    g = GATES[kind]
    arrays = {
        "w": rng.standard_normal((dirs, g * hidden, size)) * 0.3,
        "r": rng.standard_normal((dirs, g * hidden, hidden)) * 0.3,
        "b": rng.standard_normal((dirs, 2 * g * hidden)) * 0.3,
        "h0": rng.standard_normal((batch, dirs, hidden) if layout else (dirs, batch, hidden)),
    }
    names = ["x", "w", "r", "b", "", "h0"]
    if kind == "LSTM":
        arrays["c0"] = rng.standard_normal(arrays["h0"].shape)
        arrays["p"] = rng.standard_normal((dirs, 3 * hidden)) * 0.3
        names += ["c0", "p"]
    inits = [numpy_helper.from_array(a.astype(np.float32), k) for k, a in arrays.items()]
    extra = {"linear_before_reset": 1} if kind == "GRU" and direction == "reverse" else {}
    outs = ["y", "yh", "yc"][: 3 if kind == "LSTM" else 2]
    node = helper.make_node(
        kind, names, outs, hidden_size=hidden, direction=direction, layout=layout, **extra
    )
    shape = [batch, seq, size] if layout else [seq, batch, size]
    values = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], values, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    path = tmp_path / "r.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal(shape).astype(np.float32)
    if layout:
        want = ReferenceEvaluator(model).run(None, {"x": x})
    else:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    gm, _ = onnx_module(path, (torch.from_numpy(x),), crosscheck=False)
    for got, w in zip(gm(torch.from_numpy(x)), want, strict=True):
        torch.testing.assert_close(got, torch.from_numpy(w), rtol=1e-5, atol=1e-5)
