"""The nine ONNX model-zoo "light" models shipped in the onnx wheel, with random weights, converted by
pathweave and compared with ONNX Runtime.

The wheel builds their weights with ConstantOfShape (every weight of a tensor the same value), which
would hide a wrong axis or channel order; each is replaced by a random initializer of its shape."""

from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

from pathweave.frontend.onnx import onnx_module  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]  # fmt: skip
HEAVY = {"vgg19", "zfnet512", "densenet121", "inception_v1"}  # several seconds each on 2 cores
#: the heaviest (~27 s on 2 cores; its ops are AlexNet's and ZFNet's): a soak test, out of CI's 20 minutes
SOAK = {"vgg19"}


def _marks(name: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow, pytest.mark.soak] if name in SOAK else [pytest.mark.slow]


def _random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """ConstantOfShape weights -> random initializers: N(0, 1/fan_in) for matrices and kernels (so
    activations keep their scale through the depth), U(0.5, 1.5) for vectors (positive, as variances
    must be)."""
    rng = np.random.default_rng(seed)
    shapes = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    keep, inits = [], []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            keep.append(node)
            continue
        shape = [int(d) for d in shapes[node.input[0]]]
        if len(shape) > 1:
            value = rng.standard_normal(shape) / np.sqrt(max(1, int(np.prod(shape[1:]))))
        else:
            value = rng.uniform(0.5, 1.5, shape)
        inits.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(keep)
    model.graph.initializer.extend(inits)
    return model


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) if n in HEAVY else n for n in NAMES])
def test_light_model_with_random_weights_matches_onnxruntime(tmp_path, name: str) -> None:
    model = _random_weights(onnx.load(str(LIGHT / f"light_{name}.onnx")), seed=len(name))
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    gm, inputs = onnx_module(path, crosscheck=False)  # the example input: a fixed-seed random image
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs, strict=True)}
    want = sess.run(None, feed)
    with torch.no_grad():
        got = gm(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.abs().max() > 0  # random weights: a wrong order of channels shows
        torch.testing.assert_close(g, torch.from_numpy(w), rtol=1e-3, atol=1e-4)
