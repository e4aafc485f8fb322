"""Experiment (issue 23, deliver item 2): the maintained ONNX -> PyTorch converters against pathweave's own,
on the ONNX backend node tests and the nine light models.

Not part of the package. onnx2torch and onnx2pytorch both import torchvision at import time (their NMS,
RoiAlign, DeformConv and image-decoder converters), and torchvision cannot be installed here (it pins
another torch). They are installed with ``pip install --no-deps --target DIR onnx2torch onnx2pytorch``
and imported with a stub ``torchvision`` module in ``sys.modules`` whose ops raise: only those few ops
lose by it, every other converter is theirs unchanged. Each converter's ``nn.Module`` is called eagerly
on the case's inputs (an upper bound: capturing it by pathweave's path can only refuse more) and judged
by ``tests/frontend/onnx_cases.difference``, as pathweave is (pathweave numbers: ``onnx_ops_table.py``).

Run: ``python experiments/onnx_converters.py --site DIR [--json OUT.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import types
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.frontend.onnx_cases import as_array, difference, node_cases, to_torch  # noqa: E402

#: seconds one case may take before it counts as failed
CASE_LIMIT_S = 20


def stub_torchvision() -> None:
    """A ``torchvision`` whose every attribute raises when used: their imports succeed, those ops fail."""

    def missing(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("torchvision is not installed")

    class Stub(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return missing

    for name in ("torchvision", "torchvision.ops", "torchvision.io"):
        sys.modules[name] = Stub(name)
    sys.modules["torchvision"].ops = sys.modules["torchvision.ops"]  # type: ignore[attr-defined]
    sys.modules["torchvision"].io = sys.modules["torchvision.io"]  # type: ignore[attr-defined]


def converters() -> dict[str, Any]:
    import onnx2pytorch
    import onnx2torch

    return {
        "onnx2torch": lambda m: onnx2torch.convert(m),
        "onnx2pytorch": lambda m: onnx2pytorch.ConvertModel(m, experimental=True),
    }


def _alarm(*_a: Any) -> None:
    raise TimeoutError(f"over {CASE_LIMIT_S} s")


def run_case(convert: Any, case: Any) -> str:
    inputs, outputs = case.data_sets[0]
    args = [to_torch(v) for v in inputs]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_LIMIT_S)
    try:
        with warnings.catch_warnings(), torch.no_grad(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                module = convert(case.model)
            except Exception as exc:
                return f"convert: {type(exc).__name__}"
            try:
                got = module(*args)
            except Exception as exc:
                return f"run: {type(exc).__name__}"
    finally:
        signal.alarm(0)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(outputs):
        return "wrong"
    for g, w in zip(got, outputs, strict=True):
        if difference(g, as_array(w)):
            return "wrong"
    return "pass"


def light(convert: Any) -> dict[str, str]:
    """The nine light models with random weights (as tests/frontend/test_onnx_light.py) against ORT."""
    import onnx
    import onnxruntime as ort

    from tests.frontend.test_onnx_light import LIGHT, NAMES, _random_weights

    out = {}
    for name in NAMES:
        model = _random_weights(onnx.load(str(LIGHT / f"light_{name}.onnx")), seed=len(name))
        inits = {i.name for i in model.graph.initializer}
        data = next(i for i in model.graph.input if i.name not in inits)
        shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = torch.from_numpy(sess.run(None, {data.name: x.numpy()})[0])
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = convert(model)(x)
            got = got[0] if isinstance(got, (tuple, list)) else got
            ok = torch.allclose(got, want, rtol=1e-3, atol=1e-4)
            out[name] = "pass" if ok else "wrong"
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return out


def speed(
    convert: Any, names: tuple[str, ...] = ("resnet50", "squeezenet", "inception_v2"), rounds: int = 15
) -> dict:
    """Median ms per call, interleaved rounds: pathweave sequential against the converter's module in eager
    (run under ``flock /tmp/pw-bench.lock``)."""
    import statistics
    import tempfile
    import time

    import onnx

    import pathweave
    from tests.frontend.test_onnx_light import LIGHT, _random_weights

    out = {}
    for name in names:
        model = _random_weights(onnx.load(str(LIGHT / f"light_{name}.onnx")), seed=len(name))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            onnx.save(model, str(path))
            x = torch.randn(1, 3, 224, 224)
            fns = {"pathweave": pathweave.optimize(path, x, strategy="sequential")}
            module = convert(model).eval()
            fns["converter"] = torch.no_grad()(module)
            times: dict[str, list[float]] = {k: [] for k in fns}
            for _ in range(rounds):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn(x)
                    times[k].append((time.perf_counter() - t0) * 1e3)
        out[name] = {k: round(statistics.median(v[2:]), 2) for k, v in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", required=True, help="the --target folder holding onnx2torch and onnx2pytorch")
    ap.add_argument("--json", default="")
    ap.add_argument("--speed", default="", help="a converter: time it against pathweave on light models")
    args = ap.parse_args()
    sys.path.insert(0, args.site)
    stub_torchvision()
    torch.set_num_threads(1)
    result: dict[str, Any] = {}
    if args.speed:
        os.environ["PATHWEAVE_ONNX_CROSSCHECK"] = "0"
        print(json.dumps(speed(converters()[args.speed])))
        return
    for who, convert in converters().items():
        kinds = Counter()
        for case in node_cases():
            kinds[run_case(convert, case).split(":")[0]] += 1
        print(who, dict(kinds), flush=True)
        result[who] = {"node": dict(kinds), "light": light(convert)}
        print(who, json.dumps(result[who]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
