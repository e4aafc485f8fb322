"""``--co-execute K``: concurrent requests of a fixed-shape tiles plan run together in a CoExecutor."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from pathweave.errors import InputError
from pathweave.serve.http import make_app
from pathweave.serve.model import CoExecRunner, load_runner

from .conftest import example

httpx = pytest.importorskip("httpx")


def _tiled() -> torch.nn.Module:
    torch.manual_seed(1)
    layers = [torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)]
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(8, 5)).eval()


def test_concurrent_requests_run_together_and_each_gets_its_answer() -> None:
    model = _tiled()
    runner = load_runner(model, example(), name="tiled", strategy="tiles", co_execute=3)
    assert isinstance(runner, CoExecRunner) and runner.max_requests == 3
    app = make_app(runner, window_ms=30.0)
    name = runner.inputs[0].name  # the graph's placeholder name, as the metadata gives it
    inputs = [np.random.default_rng(i).standard_normal((1, 3, 9, 9)).astype(np.float32) for i in range(7)]

    async def main() -> tuple[list, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            body = [
                {
                    "inputs": [
                        {
                            "name": name,
                            "shape": [1, 3, 9, 9],
                            "datatype": "FP32",
                            "data": x.ravel().tolist(),
                        }
                    ]
                }
                for x in inputs
            ]
            replies = await asyncio.gather(*(c.post("/v2/models/tiled/infer", json=b) for b in body))
            metrics = (await c.get("/metrics")).text
        await app.state.batcher.stop()
        return replies, metrics

    replies, metrics = asyncio.run(main())
    for reply, x in zip(replies, inputs, strict=True):
        assert reply.status_code == 200, reply.text
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        got = np.asarray(reply.json()["outputs"][0]["data"], np.float32).reshape(1, 5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    runs = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("pathweave_batch_requests_count")
    )
    assert runs < len(inputs), "no two requests were co-executed"
    runner.close()


def test_co_execution_needs_a_whole_tiles_plan_and_no_batching(net) -> None:
    with pytest.raises(InputError, match="co-execution runs a whole tiles plan"):
        load_runner(net, example(), strategy="sequential", co_execute=2)
    with pytest.raises(InputError, match="exclude each other"):
        load_runner(net, example(), strategy="sequential", co_execute=2, max_batch=4)
