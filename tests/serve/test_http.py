"""The HTTP layer through FastAPI's TestClient: routes, batching, and every bad request answered."""

from __future__ import annotations

import asyncio
import gzip
import json

import numpy as np
import pytest
import torch

from pathweave.errors import ExecutionError, InputError
from pathweave.serve.http import make_app
from pathweave.serve.model import PathweaveRunner, Runner, load_runner
from pathweave.serve.protocol import TensorMeta

from .conftest import example

fastapi_testclient = pytest.importorskip("fastapi.testclient")


def _req(x: np.ndarray, name: str = "x", datatype: str = "FP32") -> dict:
    return {
        "inputs": [{"name": name, "shape": list(x.shape), "datatype": datatype, "data": x.ravel().tolist()}]
    }


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 9, 9)).astype(np.float32)


@pytest.fixture(scope="module")
def client(batched_runner):
    with fastapi_testclient.TestClient(make_app(batched_runner, window_ms=5.0, max_body=1 << 20)) as c:
        yield c


def test_health_and_metadata(client) -> None:
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    meta = client.get("/v2/models/net").json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 9, 9]}]
    assert meta["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 5]}]
    assert client.get("/v2/models/net/versions/1/ready").json() == {"name": "net", "ready": True}
    assert client.get("/v2/models/other").status_code == 404


def test_infer_matches_eager_at_every_batch_size(client, net) -> None:
    for n in range(1, 9):
        x = _rows(n, n)
        reply = client.post("/v2/models/net/infer", json=_req(x) | {"id": f"r{n}"})
        assert reply.status_code == 200, reply.text
        doc = reply.json()
        assert doc["id"] == f"r{n}" and doc["outputs"][0]["shape"] == [n, 5]
        got = np.asarray(doc["outputs"][0]["data"], np.float32).reshape(n, 5)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(batched_runner) -> None:
    """Requests sent at once run as batches; each answer equals that request run alone."""
    import httpx

    app = make_app(batched_runner, window_ms=20.0)
    sizes = [1, 2, 1, 3, 1, 1, 2, 1, 4, 1, 1, 2]
    inputs = [_rows(n, 100 + i) for i, n in enumerate(sizes)]
    alone = [batched_runner.run([x])[0] for x in inputs]

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            replies = await asyncio.gather(*(c.post("/v2/models/net/infer", json=_req(x)) for x in inputs))
            metrics = await c.get("/metrics")
        await app.state.batcher.stop()
        return [*replies, metrics]

    *replies, metrics = asyncio.run(main())
    for reply, want in zip(replies, alone, strict=True):
        assert reply.status_code == 200, reply.text
        got = np.asarray(reply.json()["outputs"][0]["data"], np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    runs = _metric(metrics.text, "pathweave_batch_requests_count")
    assert runs < len(inputs), "no two requests ran in one batch"
    assert _metric(metrics.text, "pathweave_batch_rows_sum") == sum(sizes)


def _metric(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(name) and labels in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in /metrics")


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not JSON"),
        (json.dumps(_req(np.zeros((1, 3, 9, 9), np.float32), name="y")).encode(), 400, "missing ['x']"),
        (json.dumps(_req(np.zeros((1, 3, 9, 8), np.float32))).encode(), 400, "has shape [1, 3, 9, 8]"),
        (json.dumps(_req(np.zeros((1, 3, 9), np.float32))).encode(), 400, "has shape [1, 3, 9]"),
        (json.dumps(_req(np.zeros((9, 3, 9, 9), np.float32))).encode(), 400, "batch size 9"),
        (json.dumps(_req(np.zeros((0, 3, 9, 9), np.float32))).encode(), 400, "batch size 0"),
        (json.dumps(_req(np.zeros((1, 3, 9, 9), np.float64), datatype="FP64")).encode(), 400, "is FP64"),
        (json.dumps(_req(np.zeros((1, 3, 9, 9), np.float32), datatype="BYTES")).encode(), 400, "'BYTES'"),
        (b"\0" * ((1 << 20) + 1), 413, "over the limit"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message_and_the_server_stays_up(client, body, status, says) -> None:
    reply = client.post("/v2/models/net/infer", content=body)
    assert reply.status_code == status
    assert says in reply.json()["error"]
    assert client.post("/v2/models/net/infer", json=_req(_rows(1, 0))).status_code == 200


def test_bodies_over_the_limit_are_refused_without_a_content_length_and_when_inflated(client) -> None:
    def chunks():
        for _ in range(40):
            yield b" " * 32768

    reply = client.post("/v2/models/net/infer", content=chunks())  # chunked: no Content-Length
    assert reply.status_code == 413
    bomb = gzip.compress(b" " * (2 << 20))  # ~2 KiB that inflate to 2 MiB
    reply = client.post("/v2/models/net/infer", content=bomb, headers={"Content-Encoding": "gzip"})
    assert reply.status_code == 413 and "inflates" in reply.json()["error"]
    ok = gzip.compress(json.dumps(_req(_rows(1, 0))).encode())
    assert (
        client.post("/v2/models/net/infer", content=ok, headers={"Content-Encoding": "gzip"}).status_code
        == 200
    )
    assert (
        client.post("/v2/models/net/infer", content=b"x", headers={"Content-Encoding": "br"}).status_code
        == 415
    )


def test_unknown_model_route_and_method_get_json_errors(client) -> None:
    assert client.post("/v2/models/other/infer", json=_req(_rows(1, 0))).status_code == 404
    assert "error" in client.get("/v2/nowhere").json()
    assert client.get("/v2/models/net/infer").status_code == 405


class _Failing(Runner):
    """A model that fails on a negative first value, as a pathweave or as any other error."""

    name, label = "bad", "stub"
    inputs = [TensorMeta("x", "FP32", (-1, 2))]
    outputs = [TensorMeta("output_0", "FP32", (-1, 2))]
    max_batch = 4

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if (inputs[0][:, 0] < -1).any():
            raise ZeroDivisionError("boom")
        if (inputs[0][:, 0] < 0).any():
            raise ExecutionError("node add_3 (aten.add.Tensor) raised: bad value", node="add_3")
        return [inputs[0] * 2]


def test_model_errors_are_500_with_pathweave_text_and_only_for_the_failing_request() -> None:
    with fastapi_testclient.TestClient(make_app(_Failing())) as c:
        reply = c.post("/v2/models/bad/infer", json=_req(np.array([[-0.5, 1]], np.float32)))
        assert reply.status_code == 500
        assert reply.json()["error"] == "ExecutionError: node add_3 (aten.add.Tensor) raised: bad value"
        reply = c.post("/v2/models/bad/infer", json=_req(np.array([[-5, 1]], np.float32)))
        assert reply.status_code == 500 and "ZeroDivisionError: boom" in reply.json()["error"]
        ok = c.post("/v2/models/bad/infer", json=_req(np.array([[1, 2]], np.float32)))
        assert ok.json()["outputs"][0]["data"] == [2, 4]
        text = c.get("/metrics").text
    assert _metric(text, "pathweave_errors_total", 'kind="model"') == 2
    assert _metric(text, "pathweave_requests_total", 'route="infer",status="500"') == 2
    assert _metric(text, "pathweave_infer_latency_seconds_count") == 1


def test_a_failing_request_in_a_batch_fails_alone() -> None:
    import httpx

    app = make_app(_Failing(), window_ms=50.0)
    values = [1.0, -0.5, 2.0, 3.0]

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            got = await asyncio.gather(
                *(c.post("/v2/models/bad/infer", json=_req(np.array([[v, 0]], np.float32))) for v in values)
            )
        await app.state.batcher.stop()
        return got

    replies = asyncio.run(main())
    assert [r.status_code for r in replies] == [200, 500, 200, 200]
    assert [r.json()["outputs"][0]["data"][0] for r in replies if r.status_code == 200] == [2, 4, 6]


def test_batching_is_refused_for_a_model_whose_rows_are_not_independent() -> None:
    class Centered(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x - x.mean(dim=0, keepdim=True)

    with pytest.raises(InputError, match="rows are not independent"):
        load_runner(Centered(), torch.randn(1, 4), max_batch=4, strategy="sequential")


def test_a_saved_plan_is_served_at_its_shape_and_refuses_batching(tmp_path, net) -> None:
    import pathweave

    fast = pathweave.optimize(net, example(), strategy="sequential")
    path = pathweave.save(fast, tmp_path / "net.pw")
    fast.close()
    with pytest.raises(InputError, match="needs a model dynamic in batch"):
        load_runner(str(path), max_batch=4)
    runner = load_runner(str(path))
    assert isinstance(runner, PathweaveRunner) and runner.max_batch == 1
    assert runner.inputs[0].shape == (1, 3, 9, 9)
    with fastapi_testclient.TestClient(make_app(runner)) as c:
        x = example().numpy()
        reply = c.post(f"/v2/models/{runner.name}/infer", json=_req(x))
        assert reply.status_code == 200
        with torch.no_grad():
            want = net(example()).numpy()
        np.testing.assert_allclose(
            np.asarray(reply.json()["outputs"][0]["data"]).reshape(1, 5), want, rtol=1e-4
        )
        assert c.post(f"/v2/models/{runner.name}/infer", json=_req(_rows(2, 0))).status_code == 400
    runner.close()


def test_the_python_entry_builds_the_same_app(net) -> None:
    import pathweave.serve

    app = pathweave.serve.app(
        net, example(), name="entry", max_batch=2, strategy="sequential", max_body=20000
    )
    with fastapi_testclient.TestClient(app) as c:
        assert c.get("/v2/models/entry").json()["inputs"][0]["shape"] == [-1, 3, 9, 9]
        assert c.post("/v2/models/entry/infer", content=b" " * 20001).status_code == 413
        reply = c.post("/v2/models/entry/infer", json=_req(_rows(2, 7)))
        assert reply.status_code == 200, reply.text
        with torch.no_grad():
            want = net(torch.from_numpy(_rows(2, 7))).numpy()
        np.testing.assert_allclose(
            np.asarray(reply.json()["outputs"][0]["data"]).reshape(2, 5), want, rtol=1e-4
        )
    app.state.runner.close()


def test_batching_is_refused_for_a_model_with_an_output_without_a_batch_dim() -> None:
    class Total(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x.sum()

    with pytest.raises(InputError, match=r"outputs \[1\] have no batch dim 0"):
        load_runner(Total(), torch.randn(1, 4), max_batch=2, strategy="sequential")
