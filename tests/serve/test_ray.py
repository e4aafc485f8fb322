"""Two Ray Serve replicas of a saved plan answer locally (loopback only); skipped without Ray."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

import pathweave

from .conftest import example

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed")
serve = pytest.importorskip("ray.serve")
httpclient = pytest.importorskip("tritonclient.http")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_url(tmp_path_factory, net):
    from pathweave.serve.ray import run

    fast = pathweave.optimize(net, example(), strategy="sequential")
    path = pathweave.save(fast, tmp_path_factory.mktemp("ray") / "net.pw")
    fast.close()
    root = str(Path(pathweave.__file__).resolve().parent.parent)  # the replicas import this pathweave
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": root}})  # fmt: skip
    port = _free_port()
    try:
        run(str(path), port=port, replicas=2, name="net", actor_options={"num_cpus": 0})
        yield f"127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_answer_correctly(ray_url, net) -> None:
    replicas = set()
    for _ in range(20):
        with urllib.request.urlopen(f"http://{ray_url}/v2/models/net", timeout=30) as reply:
            replicas.add(reply.headers["pathweave-replica"])
            assert json.loads(reply.read())["inputs"][0]["shape"] == [1, 3, 9, 9]
        if len(replicas) == 2:
            break
    assert len(replicas) == 2, f"only replicas {replicas} answered"
    client = httpclient.InferenceServerClient(ray_url, network_timeout=60)
    for seed in range(6):
        x = np.random.default_rng(seed).standard_normal((1, 3, 9, 9)).astype(np.float32)
        inp = httpclient.InferInput("x", [1, 3, 9, 9], "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(
            client.infer("net", [inp]).as_numpy("output_0"), want, rtol=1e-4, atol=1e-5
        )
    client.close()
