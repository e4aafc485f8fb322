"""ONNX in: zoo exports and hand-built graphs converted to ATen ops, checked against eager and ORT."""

import json

import numpy as np
import pytest
import torch

import pathweave
from pathweave import cli, zoo
from pathweave.errors import InputError, UnsupportedError
from pathweave.frontend.capture import capture

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pathweave.bench.peers import onnx_export  # noqa: E402
from pathweave.frontend.onnx import onnx_module  # noqa: E402


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
    gm, _ = onnx_module(path, inputs, crosscheck=False)  # compared with ONNX Runtime here, exactly in dtype
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays, strict=True)})
    with torch.no_grad():
        got = gm(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, torch.from_numpy(w), rtol=1e-5, atol=1e-5)
    onnx_module(path, inputs)  # and the loader's own cross-check agrees


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


@pytest.mark.parametrize("attrs", [
    {"pads": [0, 1, 2, 1], "strides": [2, 3], "output_padding": [1, 0], "dilations": [1, 2]},
    {"strides": [2, 2], "output_shape": [18, 15], "group": 2},
    {"auto_pad": "SAME_UPPER", "strides": [3, 1]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2], "dilations": [2, 1]},
])  # fmt: skip
def test_conv_transpose_with_any_pads_output_padding_and_shape(tmp_path, attrs: dict) -> None:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 2)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3 * attrs.get("group", 1)).astype(np.float32), "b")
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)]
    model = _graph(nodes, [_vi("x", [1, 4, 9, 7])], [_vi("y", None)], [w, b])
    _check(tmp_path, model, rng.standard_normal((1, 4, 9, 7)).astype(np.float32))


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
    nodes = [helper.make_node("Unique", ["x"], ["e"]),
             helper.make_node("NonZero", ["e"], ["y"])]  # fmt: skip
    path = tmp_path / "bad.onnx"
    onnx.save(_graph(nodes, [_vi("x", [2, 2])], [_vi("y", None)]), str(path))
    with pytest.raises(UnsupportedError, match="cannot convert yet: NonZero, Unique") as info:
        capture(path)
    assert info.value.ops == ["NonZero", "Unique"]


def test_bad_onnx_paths(tmp_path) -> None:
    with pytest.raises(InputError, match="no such ONNX file"):
        capture(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf at all")
    with pytest.raises(InputError, match="is not an ONNX model"):
        capture(junk)


def _conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w"
    )
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    return _graph(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], [w])


@pytest.mark.parametrize("kind", ["empty", "truncated", "random", "corrupted", "directory"])
def test_bad_onnx_files_raise_input_errors(tmp_path, kind: str) -> None:
    good = _conv_model().SerializeToString()
    path = tmp_path / "bad.onnx"
    if kind == "directory":
        path.mkdir()
    else:
        noise = np.random.default_rng(1).bytes(300)
        data = {"empty": b"", "truncated": good[: len(good) // 2], "random": noise,
                "corrupted": good[:20] + b"\xff" * 40 + good[60:]}[kind]  # fmt: skip
        path.write_bytes(data)
    with pytest.raises(InputError, match="bad.onnx") as info:
        pathweave.optimize(path, torch.randn(1, 3, 8, 8), strategy="sequential")
    assert "empty" in str(info.value) if kind == "empty" else True


def test_wrong_inputs_name_the_input_and_what_it_expects(tmp_path) -> None:
    path = tmp_path / "conv.onnx"
    onnx.save(_conv_model(), str(path))
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(InputError, match=r"takes 1 inputs \('x': float32 \[1, 3, 8, 8\]\); 2 were given"):
        pathweave.optimize(path, x, x, strategy="sequential")
    with pytest.raises(
        InputError,
        match=r"input 0 \('x'\) must be a tensor of float32 \[1, 3, 8, 8\]; got float32 \[1, 3, 9, 8\]",
    ):
        pathweave.optimize(path, torch.randn(1, 3, 9, 8), strategy="sequential")
    with pytest.raises(InputError, match=r"got float64 \[1, 3, 8, 8\]"):
        pathweave.optimize(path, x.double(), strategy="sequential")
    with pytest.raises(InputError, match="got a ndarray"):
        onnx_module(path, (x.numpy(),))


def _external_model(tmp_path, location: str):
    model = _conv_model()
    init = model.graph.initializer[0]
    data = init.raw_data or numpy_helper.to_array(init).tobytes()
    init.ClearField("float_data")
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    init.external_data.add(key="location", value=location)
    init.external_data.add(key="length", value=str(len(data)))
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path))
    return path, data


def test_external_data_is_read_only_from_the_model_folder(tmp_path) -> None:
    path, data = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(data)
    gm, _ = onnx_module(path, (torch.randn(1, 3, 8, 8),))  # checked against ONNX Runtime too
    for location in ["/etc/passwd", "../weights.bin", "sub/../../weights.bin"]:
        path, _ = _external_model(tmp_path, location)
        with pytest.raises(InputError, match="outside the model's folder"):
            onnx_module(path, (torch.randn(1, 3, 8, 8),))
    path, _ = _external_model(tmp_path, "missing.bin")
    with pytest.raises(InputError, match="missing"):
        onnx_module(path, (torch.randn(1, 3, 8, 8),))


def test_a_model_saved_with_external_data_by_onnx_loads(tmp_path) -> None:
    """``onnx.save_model(..., save_as_external_data=True)``, one file or one per tensor, as users write it."""
    x = torch.randn(1, 3, 8, 8)
    want = onnx_module(_saved(tmp_path / "plain.onnx", _conv_model()), (x,), crosscheck=False)[0](x)
    for one_file in (True, False):
        folder = tmp_path / f"ext{one_file}"
        folder.mkdir()
        path = folder / "model.onnx"
        onnx.save_model(_conv_model(), str(path), save_as_external_data=True,
                        all_tensors_to_one_file=one_file, size_threshold=0)  # fmt: skip
        assert len(list(folder.iterdir())) == 2 and path.stat().st_size < 8 * 3 * 3 * 3 * 4
        gm, _ = onnx_module(path, (x,))  # cross-checked against ONNX Runtime too
        torch.testing.assert_close(gm(x), want, rtol=0, atol=0)


def test_a_file_over_2_gb_is_refused_before_it_is_read(tmp_path) -> None:
    """protobuf cannot parse it: the error says to keep the weights as external data (a sparse file)."""
    path = tmp_path / "big.onnx"
    with open(path, "wb") as f:
        f.write(_conv_model().SerializeToString())
        f.truncate(2**31 + 10)
    with pytest.raises(InputError, match="over 2 GB.*save_as_external_data=True"):
        pathweave.optimize(path, torch.randn(1, 3, 8, 8), strategy="sequential")


def _saved(path, model: onnx.ModelProto):
    onnx.save(model, str(path))
    return path


def test_crosscheck_switch(tmp_path, monkeypatch) -> None:
    from pathweave.frontend.onnx import crosscheck_enabled

    assert crosscheck_enabled(None) and not crosscheck_enabled(False)
    monkeypatch.setenv("PATHWEAVE_ONNX_CROSSCHECK", "0")
    assert not crosscheck_enabled(None) and crosscheck_enabled(True)


def test_a_raw_exception_in_a_converter_becomes_unsupported_naming_the_node(tmp_path, monkeypatch) -> None:
    from pathweave.frontend import onnx_ops

    def broken(n):
        raise KeyError("something")

    monkeypatch.setitem(onnx_ops.CONVERTERS, "Relu", (broken, frozenset()))
    path = tmp_path / "relu.onnx"
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="act1")]
    onnx.save(_graph(nodes, [_vi("x", [2])], [_vi("y", None)]),
              str(path))  # fmt: skip
    with pytest.raises(UnsupportedError, match="Relu node 'act1': cannot convert it \\(KeyError") as info:
        onnx_module(path, (torch.randn(2),))
    assert isinstance(info.value.__cause__, KeyError)


def test_unknown_attributes_and_non_constant_shapes_are_refused(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r", bogus=1)]
    onnx.save(_graph(nodes, [_vi("x", [2])], [_vi("y", None)]), str(path))
    with pytest.raises(UnsupportedError, match="Relu node 'r': attribute bogus is not supported"):
        onnx_module(path, (torch.randn(2),), crosscheck=False)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    onnx.save(
        _graph(nodes, [_vi("x", [2, 3]), _vi("s", [2], TensorProto.INT64)], [_vi("y", None)]), str(path)
    )
    with pytest.raises(UnsupportedError, match="Reshape node 'rs': needs a constant shape"):
        onnx_module(path, crosscheck=False)  # generated examples: no value to specialise on
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    onnx.save(_graph(nodes, [_vi("x", [64, 2]), _vi("s", [128], TensorProto.INT64)], [_vi("y", None)]),
              str(path))  # fmt: skip
    with pytest.raises(UnsupportedError, match="Reshape node 'rs': needs a constant shape"):
        onnx_module(path, (torch.randn(64, 2), torch.ones(128, dtype=torch.int64)), crosscheck=False)


def test_a_shape_given_as_a_small_graph_input_is_specialised_and_checked_per_call(tmp_path) -> None:
    """The caller's value is baked into the graph (through the ops computing the shape from it); a
    later call with another value is refused naming the input, the same one runs."""
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Mul", ["s", "two"], ["s2"]), helper.make_node("Reshape", ["x", "s2"], ["y"])]
    inputs = [_vi("x", [2, 6]), _vi("s", [2], TensorProto.INT64)]
    onnx.save(_graph(nodes, inputs, [_vi("y", None)], [_const("two", [1, 2])]), str(path))
    x, s = torch.randn(2, 6), torch.tensor([3, 2])
    fn = pathweave.optimize(path, x, s, strategy="sequential")
    torch.testing.assert_close(fn(x, s)[0], x.reshape(3, 4), rtol=0, atol=0)
    x2 = torch.randn(2, 6)
    torch.testing.assert_close(fn(x2, s.clone())[0], x2.reshape(3, 4), rtol=0, atol=0)
    with pytest.raises(InputError, match=r"input 1 \('s'\) sets Reshape's shape.*\[3, 2\].*\[2, 3\]"):
        fn(x, torch.tensor([2, 3]))


def test_semantics_onnx_keeps_without_onnxruntime(tmp_path) -> None:
    """Cases that were wrong with the cross-check off: integer Div truncates, int Pow stays int,
    1-d and SAME-padded pools, dilated average pools, LayerNormalization's extra outputs."""
    ints = [helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Pow", ["a", "f"], ["p"])]
    i32 = TensorProto.INT32
    model = _graph(ints, [_vi("a", [4], i32), _vi("b", [4], i32), _vi("f", [4])],
                   [_vi("q", None, i32), _vi("p", None, i32)])  # fmt: skip
    a, b = np.array([-7, 7, -8, 9], np.int32), np.array([2, -2, 3, 4], np.int32)
    _check(tmp_path, model, a, b, np.array([0.5, 1.0, 1.0, 2.0], np.float32))
    pools = [
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3], auto_pad="SAME_UPPER", strides=[2]),
        helper.make_node("AveragePool", ["x"], ["v"], kernel_shape=[2], dilations=[2], pads=[1, 0]),
    ]
    model = _graph(pools, [_vi("x", [1, 2, 9])], [_vi("m", None), _vi("v", None)])
    model.opset_import[0].version = 19
    _check(tmp_path, model, np.random.default_rng(2).standard_normal((1, 2, 9)).astype(np.float32))
    ln = [helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "rstd"], axis=1)]
    scale = numpy_helper.from_array(np.ones((3, 4), np.float32), "s")
    model = _graph(ln, [_vi("x", [2, 3, 4])], [_vi("y", None), _vi("mean", None), _vi("rstd", None)], [scale])
    _check(tmp_path, model, np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32))


def test_cli_analyze_an_onnx_file(tmp_path, capsys) -> None:
    _, _, path = _export(tmp_path, "squeezenet1_0")
    out = tmp_path / "a.json"
    assert cli.main(["analyze", str(path), "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["model"] == "squeezenet1_0" and d["nodes"] > 50 and d["parallelism"] < 1


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_ceil_mode_pool_whose_last_window_starts_in_the_padding(tmp_path, op: str) -> None:
    """ONNX's shape inference counts that window, the spec, ONNX Runtime and torch drop it: the pool
    runs (found by the fuzzer: it was refused as a converter bug)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    window = {"kernel_shape": [1, 2], "strides": [1, 2], "pads": [0, 1, 0, 1]}
    node = helper.make_node(op, ["x"], ["y"], ceil_mode=1, **window)
    path = tmp_path / "ceil.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 19)]), path)  # fmt: skip
    inp = torch.rand(1, 1, 3, 5)
    pool = torch.nn.functional.avg_pool2d if op == "AveragePool" else torch.nn.functional.max_pool2d
    kwargs = {"count_include_pad": False} if op == "AveragePool" else {}
    want = pool(inp, (1, 2), (1, 2), (0, 1), ceil_mode=True, **kwargs)
    got = pathweave.optimize(path, inp, strategy="sequential", crosscheck=False)(inp)[0]
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", ["Expand", "ConstantOfShape"])
def test_a_tiny_file_asking_for_a_huge_value_is_refused(tmp_path, monkeypatch, op: str) -> None:
    """A few bytes of Expand or ConstantOfShape can ask for terabytes (found by a hostile review): a
    value past MAX_VALUE_BYTES is refused before it is allocated, or right after where ONNX's shape
    inference cannot size it."""
    from pathweave.frontend import onnx as onnx_capture

    monkeypatch.setattr(onnx_capture, "MAX_VALUE_BYTES", 1 << 16)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([1 << 15], dtype=np.int64), "shape")
    if op == "Expand":
        nodes = [helper.make_node("Expand", ["x", "shape"], ["y"])]
    else:
        one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
        nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=one),
                 helper.make_node("Add", ["c", "x"], ["y"])]  # fmt: skip
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)  # fmt: skip
    with pytest.raises(UnsupportedError, match="GiB pathweave allows one value"):
        pathweave.optimize(path, torch.ones(1), strategy="sequential")


@pytest.mark.parametrize("op, values, want", [
    ("Sign", [float("nan"), -2.0, 0.0, 3.0], [float("nan"), -1.0, 0.0, 1.0]),
    ("HardSwish", [float("nan"), 3e38, -2.0, 1.0], [float("nan"), 3e38, -2.0 / 6 * 1, 1.0 * (1 / 6 + 0.5)]),
])  # fmt: skip
def test_special_values_as_onnx_defines_them(tmp_path, op: str, values: list, want: list) -> None:
    """Sign keeps NaN and HardSwish does not overflow near float's max, as the ONNX spec and ONNX
    Runtime have it (torch's kernels differ; found by a hostile review)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    path = tmp_path / "u.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 18)]), path)  # fmt: skip
    inp = torch.tensor(values)
    got = pathweave.optimize(path, inp, strategy="sequential", crosscheck=False)(inp)[0]
    torch.testing.assert_close(got, torch.tensor(want), equal_nan=True)


@pytest.mark.parametrize("op, attrs, want", [("Div", {}, [-(2**31), 3, -3]), ("Mod", {}, [0, 1, -1]),
                                             ("Mod", {"fmod": 1}, [0, 1, 1])])  # fmt: skip
def test_integer_division_by_minus_one_does_not_trap(tmp_path, op: str, attrs: dict, want: list) -> None:
    """INT_MIN / -1 traps the CPU (SIGFPE ended the process; found by a hostile review): -1 divides by
    negation, which wraps, and leaves remainder 0."""
    a = helper.make_tensor_value_info("a", TensorProto.INT32, [3])
    b = helper.make_tensor_value_info("b", TensorProto.INT32, [3])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [3])
    path = tmp_path / "div.onnx"
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    onnx.save(helper.make_model(helper.make_graph([node], "g", [a, b], [y]),
                                opset_imports=[helper.make_opsetid("", 18)]), path)  # fmt: skip
    ones = torch.ones(3, dtype=torch.int32)
    fn = pathweave.optimize(path, ones, ones, strategy="sequential", crosscheck=False)
    x = torch.tensor([-(2**31), 7, 7], dtype=torch.int32)
    got = fn(x, torch.tensor([-1, 2, -2], dtype=torch.int32))[0]
    assert got.tolist() == want


def test_an_empty_input_read_only_for_its_dtype_is_taken(tmp_path) -> None:
    """CastLike's second input gives a dtype: exporters and the ONNX tests pass an empty tensor there,
    which capture otherwise refuses (it specialises on shapes). Data inputs stay refused when empty."""
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("CastLike", ["x", "like"], ["y"])]
    inputs = [_vi("x", ["n"]), _vi("like", [0], TensorProto.DOUBLE)]
    onnx.save(_graph(nodes, inputs, [_vi("y", None, TensorProto.DOUBLE)]), str(path))
    x, like = torch.randn(3), torch.zeros(0, dtype=torch.float64)
    fn = pathweave.optimize(path, x, like, strategy="sequential")
    assert torch.equal(fn(x, like)[0], x.double())
    with pytest.raises(InputError, match="example input 0 is empty"):
        pathweave.optimize(path, torch.randn(0), like, strategy="sequential")


def test_int8_models_in_both_formats_match_onnxruntime(tmp_path) -> None:
    """QDQ (per-channel weights) and QOperator (QLinearConv with pads, QLinearMatMul, MatMulInteger)
    on odd sizes, exactly as ONNX Runtime rounds them."""
    rng = np.random.default_rng(4)
    q = lambda name, a, t=np.int8: numpy_helper.from_array(np.array(a, dtype=t), name)  # noqa: E731
    f = lambda name, a: numpy_helper.from_array(np.array(a, dtype=np.float32), name)  # noqa: E731
    inits = [
        f("xs", 0.05), q("xz", 3, np.uint8), q("w", rng.integers(-90, 90, (5, 3, 3, 3))),
        f("ws", rng.uniform(0.01, 0.03, 5)), q("wz", [0] * 5), f("ys", 0.2), q("yz", 120, np.uint8),
        q("b", rng.integers(-500, 500, 5), np.int32), q("m", rng.integers(0, 255, (30, 4)), np.uint8),
        f("ms", 0.02), q("mz", 7, np.uint8), f("os", 0.3), q("oz", 5, np.uint8),
        q("az", 4, np.uint8), q("bz", 2, np.uint8),
    ]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"],
                         pads=[1, 0, 2, 1], strides=[2, 1]),
        helper.make_node("DequantizeLinear", ["c", "ys", "yz"], ["cd"]),
        helper.make_node("Reshape", ["c", "shape"], ["flat"]),
        helper.make_node("QLinearMatMul", ["flat", "ys", "yz", "m", "ms", "mz", "os", "oz"], ["mm"]),
        helper.make_node("MatMulInteger", ["flat", "m", "az", "bz"], ["mi"]),
    ]  # fmt: skip
    inits.append(_const("shape", [5, -1]))
    outputs = [_vi("cd", None), _vi("mm", None, TensorProto.UINT8), _vi("mi", None, TensorProto.INT32)]
    model = _graph(nodes, [_vi("x", [1, 3, 9, 7])], outputs, inits)
    x = rng.standard_normal((1, 3, 9, 7)).astype(np.float32) * 4
    _check(tmp_path, model, x)  # the conv's (1, 5, 5, 6) output, flattened to (5, 30), feeds (30, 4)


def test_if_with_a_condition_known_at_capture_is_inlined(tmp_path) -> None:
    """A condition folded from shapes (or a small input the graph is specialised on) picks its branch;
    one computed from the data is refused, naming the node."""
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t", None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_vi("e", None)])
    path = tmp_path / "m.onnx"
    for source, want in (("Shape", torch.neg), ("ReduceMax", None)):
        nodes = [
            helper.make_node(source, ["x"], ["s"]),
            helper.make_node("ReduceSum", ["s"], ["n"], keepdims=0),
            helper.make_node("Greater", ["n", "three"], ["c"]),
            helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other),
        ]
        inits = [
            numpy_helper.from_array(np.array(3, dtype=np.int64 if source == "Shape" else np.float32), "three")
        ]
        onnx.save(_graph(nodes, [_vi("x", [8, 9])], [_vi("y", None)], inits), str(path))
        x = torch.randn(8, 9)  # more than the 64 elements a shape-setting input may have: data
        if want is None:
            with pytest.raises(
                UnsupportedError, match="If node 'branch': If needs a condition known at capture"
            ):
                onnx_module(path, (x,), crosscheck=False)
        else:
            gm, _ = onnx_module(path, (x,))  # 8 + 9 > 3: the then branch, and ORT agrees
            assert torch.equal(gm(x)[0], want(x))


def test_constant_of_shape_with_an_empty_shape_gives_a_scalar(tmp_path) -> None:
    """TorchScript exports of BERT with an attention mask write ConstantOfShape(Shape(a 0-d value)): the
    shape is empty and the output 0-d; it was refused (the one-element value could not expand to [])."""
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [3.5])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["c"], value=value),
        helper.make_node("Mul", ["s", "c"], ["y"]),
    ]
    _check(tmp_path, _graph(nodes, [_vi("x", [2, 3])], [_vi("y", None)]), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_training_mode_dropout_runs_only_where_it_drops_nothing(tmp_path, ratio: float) -> None:
    """The dynamo exporter writes Dropout(x, ratio, training_mode=true) for a module left in train mode; a
    ratio of 0 drops nothing (output = input, mask all true), any other ratio is random and refused."""
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])]
    inits = [_const("r", ratio, np.float32), _const("t", True, np.bool_)]
    outputs = [_vi("y", None), _vi("mask", None, TensorProto.BOOL)]
    model = _graph(nodes, [_vi("x", [2, 5])], outputs, inits)
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    if ratio == 0.0:
        _check(tmp_path, model, x)
        return
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match="Dropout node.*training_mode=true is random"):
        onnx_module(tmp_path / "m.onnx", (torch.from_numpy(x),), crosscheck=False)
