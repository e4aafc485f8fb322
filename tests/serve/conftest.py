"""Small models behind the server: built once per test session (planning takes seconds)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")


class Net(torch.nn.Module):
    """A convolution, a pool and a linear layer: rows independent, so batchable."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def example() -> torch.Tensor:
    return torch.randn(1, 3, 9, 9, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="session")
def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="session")
def batched_runner(net: torch.nn.Module):
    """The net optimized dynamic in batch (lanes), batches up to 8 rows."""
    from pathweave.serve.model import load_runner

    runner = load_runner(net, example(), name="net", max_batch=8, strategy="lanes")
    yield runner
    runner.close()
