"""Resize and Upsample against ONNX Runtime on odd sizes, every coordinate mode and kernel."""

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from pathweave.errors import UnsupportedError  # noqa: E402
from pathweave.frontend.onnx import onnx_module  # noqa: E402


def _run(tmp_path, node, opset: int, x: np.ndarray, inits=(), reference: bool = False) -> None:
    """Compare with ONNX Runtime, or with onnx's reference evaluator (``reference``) where the two read
    the spec differently: align_corners and the crop modes at a fractional output length (scale times
    input length), which the reference keeps fractional and ONNX Runtime rounds down."""
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, list(x.shape))],
                          [helper.make_tensor_value_info("y", dtype, None)], list(inits))  # fmt: skip
    path = tmp_path / "r.onnx"
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.save(model, str(path))
    if reference:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    gm, _ = onnx_module(path, (torch.from_numpy(x),), crosscheck=False)
    got = gm(torch.from_numpy(x))[0].numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-4, atol=1e-4)


def _f32(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.float32), name)


@pytest.mark.parametrize("transform", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                       "half_pixel_symmetric"])  # fmt: skip
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("size", [1, 3, 17])
def test_resize_by_scales_matches_onnxruntime(tmp_path, transform: str, mode: str, size: int) -> None:
    x = np.random.default_rng(size).standard_normal((1, 2, size, size + 1)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform)  # fmt: skip
    _run(tmp_path, node, 13, x, [_f32("scales", [1, 1, 3, 0.5])])  # whole output lengths
    if transform != "pytorch_half_pixel":  # one output: the reference takes -0.5, the spec and ORT 0
        _run(tmp_path, node, 13, x, [_f32("scales", [1, 1, 2.5, 0.6])], reference=True)  # fractional


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_by_sizes_on_integers(tmp_path, nearest: str) -> None:
    x = np.arange(3 * 17, dtype=np.int32).reshape(1, 1, 3, 17)
    sizes = numpy_helper.from_array(np.array([1, 1, 7, 5], dtype=np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], nearest_mode=nearest)
    _run(tmp_path, node, 13, x, [sizes])


def test_resize_cubic_exclude_outside_and_crop(tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((1, 1, 5, 4)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic", cubic_coeff_a=-0.5,
                            exclude_outside=1)  # fmt: skip
    _run(tmp_path, node, 13, x, [_f32("scales", [1, 1, 1.7, 0.8])])
    node = helper.make_node(
        "Resize",
        ["x", "roi", "scales"],
        ["y"],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=9.0,
    )
    roi = _f32("roi", [0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4])
    _run(tmp_path, node, 13, x, [roi, _f32("scales", [1, 1, 2, 1.5])])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("op, opset", [("Upsample", 9), ("Resize", 10)])
def test_upsample_and_resize_10_are_asymmetric(tmp_path, mode: str, op: str, opset: int) -> None:
    x = np.random.default_rng(1).standard_normal((1, 3, 3, 5)).astype(np.float32)
    node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
    _run(tmp_path, node, opset, x, [_f32("scales", [1, 1, 2, 3])])


def test_linear_resize_of_integers_is_refused(tmp_path) -> None:
    """The spec rounds half to even; ONNX Runtime's uint8 kernel rounds its own way: neither is taken."""
    x = np.random.default_rng(2).integers(0, 256, (1, 1, 4, 3), dtype=np.uint8)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    with pytest.raises(UnsupportedError, match="Resize linear on torch.uint8 is not supported"):
        _run(tmp_path, node, 13, x, [_f32("scales", [1, 1, 2.0, 3.0])])
