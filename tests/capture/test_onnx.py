"""ONNX in: zoo exports and hand-built graphs converted to ATen ops, checked against eager and ORT."""

import json

import numpy as np
import pytest
import torch

from pathweave import cli, zoo
from pathweave.capture import capture
from pathweave.errors import InputError, UnsupportedError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pathweave.bench.peers import onnx_export  # noqa: E402
from pathweave.capture.onnx import onnx_module  # noqa: E402


def _export(tmp_path, name: str):
    entry = zoo.get(name)
    model, x = entry.build(), entry.example_inputs(1, small=True)
    exp = onnx_export(model, x)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(getattr(exp, "data", exp))
    return model, x, path


@pytest.mark.parametrize("name", ["googlenet", "deepfm"])
def test_zoo_export_captures_and_matches_eager(tmp_path, name: str) -> None:
    model, x, path = _export(tmp_path, name)
    captured = capture(path, *x)
    assert captured.method == "export" and captured.name == name
    with torch.no_grad():
        want = model(*x)
    # the exporter folds batch norm into the convolutions: float sums in another order
    torch.testing.assert_close(captured(*x), (want,) if isinstance(want, torch.Tensor) else want,
                               rtol=1e-3, atol=1e-4)  # fmt: skip


def _graph(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _vi(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _const(name: str, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def _check(tmp_path, model: onnx.ModelProto, *arrays: np.ndarray) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    inputs = tuple(torch.from_numpy(a) for a in arrays)
    gm, _ = onnx_module(path, inputs)  # raises CaptureError if it differs from ONNX Runtime
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays, strict=True)})
    with torch.no_grad():
        got = gm(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, torch.from_numpy(w), rtol=1e-5, atol=1e-5)


def test_asymmetric_pads_in_conv_and_pools(tmp_path) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 1, 2, 1], strides=[2, 1]),
        helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[3, 2], pads=[1, 0, 0, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    model = _graph(nodes, [_vi("x", [1, 3, 9, 7])], [_vi("y", None)], [w])
    _check(tmp_path, model, rng.standard_normal((1, 3, 9, 7)).astype(np.float32))


def test_indexing_and_shape_ops(tmp_path) -> None:
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
        helper.make_node("Slice", ["g", "starts", "ends", "axes", "steps"], ["s"]),
        helper.make_node("Split", ["s", "sizes"], ["a", "b"], axis=2),
        helper.make_node("Reshape", ["b", "shape"], ["r"]),
        helper.make_node("Unsqueeze", ["a", "uax"], ["u"]),
        helper.make_node("ReduceMean", ["u", "rax"], ["mean"], keepdims=0),
        helper.make_node("Flatten", ["r"], ["f"], axis=2),
    ]
    inits = [_const("idx", [[-1, 0], [2, 1]]), _const("starts", [0, 1]), _const("ends", [2**62, 8]),
             _const("axes", [0, 3]), _const("steps", [1, 2]), _const("sizes", [1, 1]),
             _const("shape", [0, -1, 2]), _const("uax", [0]), _const("rax", [-1])]  # fmt: skip
    model = _graph(nodes, [_vi("x", [2, 3, 4, 8])], [_vi("mean", None), _vi("f", None)], inits)
    _check(tmp_path, model, np.arange(2 * 3 * 4 * 8, dtype=np.float32).reshape(2, 3, 4, 8))


def test_gemm_transposed_scaled_pad_and_casts(tmp_path) -> None:
    rng = np.random.default_rng(1)
    b = numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "b")
    c = numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "c")
    nodes = [
        helper.make_node("Gemm", ["x", "b", "c"], ["g"], transA=1, alpha=0.5, beta=2.0),
        helper.make_node("Pad", ["g", "pads", "val"], ["p"], mode="constant"),
        helper.make_node("Cast", ["p"], ["i"], to=TensorProto.INT64),
        helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
    ]
    inits = [b, c, _const("pads", [1, 0, 0, 2]), _const("val", [1.5], np.float32)]
    model = _graph(nodes, [_vi("x", [5, 3])], [_vi("f", None)], inits)
    _check(tmp_path, model, rng.standard_normal((5, 3)).astype(np.float32))


def test_unsupported_ops_are_listed_together(tmp_path) -> None:
    nodes = [helper.make_node("Einsum", ["x", "x"], ["e"], equation="ij,jk->ik"),
             helper.make_node("NonZero", ["e"], ["y"])]  # fmt: skip
    path = tmp_path / "bad.onnx"
    onnx.save(_graph(nodes, [_vi("x", [2, 2])], [_vi("y", None)]), str(path))
    with pytest.raises(UnsupportedError, match="cannot convert yet: Einsum, NonZero") as info:
        capture(path)
    assert info.value.ops == ["Einsum", "NonZero"]


def test_bad_onnx_paths(tmp_path) -> None:
    with pytest.raises(InputError, match="no such ONNX file"):
        capture(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf at all")
    with pytest.raises(InputError, match="is not an ONNX model"):
        capture(junk)


def test_cli_analyze_an_onnx_file(tmp_path, capsys) -> None:
    _, _, path = _export(tmp_path, "squeezenet1_0")
    out = tmp_path / "a.json"
    assert cli.main(["analyze", str(path), "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["model"] == "squeezenet1_0" and d["nodes"] > 50 and d["parallelism"] < 1
