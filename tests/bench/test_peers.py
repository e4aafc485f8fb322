"""The peer builders: each CPU peer builds and matches eager, or says why it cannot (``Skip``)."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from pathweave.bench import peers
from pathweave.bench.candidate import Candidate, Skip, flatten_outputs
from pathweave.errors import InputError

THREADS = 2
CPU_FAST = ["eager:1t", "eager", "eager:cl", "ort:seq", "ort:par", "openvino"]
CPU_COMPILE = ["compile", "compile:freezing"]
CUDA_ONLY = ["cuda:eager", "cuda:graph", "cuda:compile-ro"]


class SmallCNN(nn.Module):
    """conv/bn/relu/maxpool twice, two branches concatenated, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.left = nn.Sequential(nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.cat([self.left(x), self.right(x)], dim=1)
        return self.head(nn.functional.max_pool2d(x, 2).flatten(1))


@pytest.fixture(scope="module")
def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = SmallCNN().eval()
        for bn in (model.stem[1], model.left[1]):  # non-trivial running stats, so folding is exercised
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        inputs = (torch.randn(1, 3, 32, 32),)
    with torch.inference_mode():
        reference = flatten_outputs(model(*inputs))
    return model, inputs, reference


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _check(name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]) -> Candidate:
    model, inputs, reference = cnn
    before = _snapshot(model)
    try:
        candidate = peers.PEERS[name](model, inputs, THREADS, "cpu")
    except Skip as skip:
        assert str(skip), "a Skip must say why"
        pytest.skip(f"{name}: {skip}")
    assert candidate.name == name and candidate.kind == "peer"
    assert candidate.threads == (1 if name == "eager:1t" else THREADS)
    assert candidate.note
    torch.set_num_threads(candidate.threads)
    try:
        outputs = flatten_outputs(candidate.run())
    finally:
        torch.set_num_threads(THREADS)
    assert len(outputs) == len(reference)
    for got, want in zip(outputs, reference, strict=True):
        assert got.shape == want.shape
        scale = max(1.0, want.abs().max().item())
        assert (got.float() - want.float()).abs().max().item() <= 1e-3 * scale, name
    after = _snapshot(model)  # the caller's model is never changed
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.device.type == "cpu" for p in model.parameters())
    return candidate


@pytest.mark.parametrize("name", CPU_FAST)
def test_cpu_peer_matches_eager(
    name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]], tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _check(name, cnn)
    assert not os.listdir(tmp_path), "exports must go to a temporary directory, not the cwd"


@pytest.mark.slow  # torch.compile: tens of seconds on 2 cores with a cold inductor cache
@pytest.mark.parametrize("name", CPU_COMPILE)
def test_compile_peer_matches_eager(
    name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]
) -> None:
    candidate = _check(name, cnn)
    assert candidate.extra["build_s"] > 0
    if name == "compile:freezing":
        assert candidate.extra["frozen_graphs"] >= 1, "freezing must be on while inductor compiles"


def test_onnx_export_is_shared(cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]) -> None:
    pytest.importorskip("onnxruntime")
    model, inputs, _ = cnn
    try:
        first = peers.onnx_export(model, inputs)
    except Skip as skip:
        pytest.skip(str(skip))
    assert peers.onnx_export(model, inputs) is first
    assert first.data and first.exporter in ("dynamo", "legacy") and first.opset > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_peers_skip_without_cuda(
    name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]
) -> None:
    model, inputs, _ = cnn
    for device in ("cuda", "cpu"):
        with pytest.raises(Skip):
            peers.PEERS[name](model, inputs, THREADS, device)


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_peers_skip_on_cpu_device(
    name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]
) -> None:
    model, inputs, _ = cnn
    with pytest.raises(Skip):
        peers.PEERS[name](model, inputs, THREADS, "cpu")


@pytest.mark.parametrize("name", ["eager:1t", "eager", "compile", "compile:freezing", "openvino", "ort:par"])
def test_cpu_only_peers_skip_on_cuda(
    name: str, cnn: tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]
) -> None:
    model, inputs, _ = cnn
    with pytest.raises(Skip):
        peers.PEERS[name](model, inputs, THREADS, "cuda")


def test_peer_names() -> None:
    cpu, cuda = peers.peer_names("cpu"), peers.peer_names("cuda")
    assert cpu == [n for n in peers.PEERS if n in cpu], "registry order"
    assert set(CPU_FAST + CPU_COMPILE) == set(cpu)
    assert not [n for n in cpu if n.startswith("cuda")]
    assert set(CUDA_ONLY) <= set(cuda) <= set(peers.PEERS)
    assert all(callable(b) for b in peers.PEERS.values())
    with pytest.raises(InputError):
        peers.peer_names("tpu")
