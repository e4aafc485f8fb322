"""``pathweave serve FILE``: the command line starts a server that answers, and refuses bad settings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

import pathweave
from pathweave.cli import main

from .conftest import example

ROOT = Path(pathweave.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plan(tmp_path_factory, net) -> Path:
    fast = pathweave.optimize(net, example(), strategy="sequential")
    path = pathweave.save(fast, tmp_path_factory.mktemp("cli") / "net.pw")
    fast.close()
    return path


def test_serve_refuses_batching_a_saved_plan_and_bad_options(plan: Path, capsys) -> None:
    assert main(["serve", str(plan), "--max-batch", "4"]) == 2
    assert "needs a model dynamic in batch" in capsys.readouterr().err
    assert main(["serve", str(plan), "--max-batch", "0"]) == 2
    assert "--max-batch must be >= 1" in capsys.readouterr().err
    assert main(["serve", str(plan), "--co-execute", "2"]) == 2
    assert "co-execution runs a whole tiles plan; this one is sequential" in capsys.readouterr().err


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def test_serve_answers_on_the_port_given(plan: Path, net) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pathweave", "serve", str(plan), "--port", str(port), "--name", "net",
           "--log-level", "warning"]  # fmt: skip
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                assert _get(f"http://127.0.0.1:{port}/v2/health/ready") == {"ready": True}
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        x = example()
        body = {
            "inputs": [{"name": "x", "shape": [1, 3, 9, 9], "datatype": "FP32", "data": x.ravel().tolist()}]
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/models/net/infer", json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            got = np.asarray(json.loads(reply.read())["outputs"][0]["data"], np.float32).reshape(1, 5)
        with torch.no_grad():
            np.testing.assert_allclose(got, net(x).numpy(), rtol=1e-4, atol=1e-5)
    finally:
        server.terminate()
        server.wait(timeout=30)
