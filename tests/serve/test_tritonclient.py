"""The real KServe v2 client (``tritonclient[http]``) against ``pathweave serve`` on a loopback socket."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from pathweave.serve.http import make_app

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
uvicorn = pytest.importorskip("uvicorn")
from tritonclient.utils import InferenceServerException  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(batched_runner):
    port = _free_port()
    config = uvicorn.Config(
        make_app(batched_runner, window_ms=10.0), host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def _infer(client, x: np.ndarray, binary_in: bool, binary_out: bool) -> np.ndarray:
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary_in)
    out = httpclient.InferRequestedOutput("output_0", binary_data=binary_out)
    return client.infer("net", [inp], outputs=[out]).as_numpy("output_0")


@pytest.mark.parametrize(
    ("binary_in", "binary_out"), [(False, False), (True, True), (True, False), (False, True)]
)
def test_tritonclient_gets_the_eager_answers(url, net, binary_in: bool, binary_out: bool) -> None:
    client = httpclient.InferenceServerClient(url)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("net")
    meta = client.get_model_metadata("net")
    assert meta["inputs"][0]["shape"] == [-1, 3, 9, 9]
    for n in (1, 3, 8):
        x = np.random.default_rng(n).standard_normal((n, 3, 9, 9)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(_infer(client, x, binary_in, binary_out), want, rtol=1e-4, atol=1e-5)
    client.close()


def test_tritonclient_sees_the_servers_error_messages(url) -> None:
    client = httpclient.InferenceServerClient(url)
    with pytest.raises(InferenceServerException, match=r"has shape \[1, 3, 9, 8\]"):
        _infer(client, np.zeros((1, 3, 9, 8), np.float32), True, True)
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        client.get_model_metadata("nope")
    client.close()


def test_concurrent_tritonclient_requests_each_get_their_own_answer(url, batched_runner) -> None:
    inputs = [
        np.random.default_rng(50 + i).standard_normal((1 + i % 3, 3, 9, 9)).astype(np.float32)
        for i in range(24)
    ]
    alone = [batched_runner.run([x])[0] for x in inputs]

    def one(x: np.ndarray) -> np.ndarray:
        client = httpclient.InferenceServerClient(url)
        try:
            return _infer(client, x, True, True)
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, inputs))
    for g, want in zip(got, alone, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
