"""Zoo families as ONNX files from both torch exporters, run by the CPU strategies (issue 23).

The whole grid (every family x both exporters x sequential, lanes, tiles, auto) is
experiments/onnx_zoo_families.py (~15 minutes); here three families whose exports are quick, each
exporter, with the strategies rotating so that every strategy runs a file of each exporter.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import pathweave
from pathweave import zoo

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

from pathweave.bench.peers import _export_to  # noqa: E402

CASES = [
    ("squeezenet1_0", True, "tiles"),
    ("squeezenet1_0", False, "sequential"),
    ("unet", True, "lanes"),
    ("unet", False, "tiles"),
    ("deepfm", True, "sequential"),
    ("deepfm", False, "auto"),
    ("mobilenet_v2", True, "auto"),
    ("mobilenet_v2", False, "lanes"),
]


@pytest.mark.parametrize(("name", "dynamo", "strategy"), CASES)
def test_zoo_family_exported_runs_and_matches_the_model(
    tmp_path, name: str, dynamo: bool, strategy: str
) -> None:
    entry = zoo.get(name)
    model, inputs = entry.build().eval(), entry.example_inputs(1, small=True)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _export_to(model, inputs, str(path), dynamo)
        fn = pathweave.optimize(str(path), *inputs, strategy=strategy)
    try:
        with torch.no_grad():
            want = model(*inputs)
        got = fn(*inputs)
        got = got[0] if isinstance(got, (tuple, list)) else got
        # the exporters fold batch norms into convolutions: float sums in another order
        scale = float(want.abs().max()) or 1.0
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4 * scale)
    finally:
        fn.close()
