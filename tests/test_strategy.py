"""The strategy table: every row builds on this device (or skips saying why), and ``optimize`` reads it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import pathweave
from pathweave.errors import InputError
from pathweave.frontend.capture import capture
from pathweave.strategy import AUTO, STRATEGIES, Strategy, entry


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x)) + torch.sigmoid(self.b(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


@pytest.fixture(scope="module")
def model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Branches().eval(), torch.randn(1, 3, 10, 10)


def _devices() -> list[tuple[str, str]]:
    return [(name, d) for name, row in STRATEGIES.items() for d in sorted(row.devices)]


@pytest.mark.parametrize(("name", "device"), _devices())
def test_every_row_builds_or_skips_with_a_reason(name: str, device: str, model) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{name} on CUDA: no CUDA here")
    net, x = model
    fast = pathweave.optimize(net, x.to(device), strategy=name, device=device)
    try:
        assert isinstance(fast, Strategy) and fast.strategy in (name, "sequential")
        with torch.no_grad():
            want = net.to(device)(x.to(device))
        torch.testing.assert_close(fast(x.to(device)), want, rtol=1e-4, atol=1e-4)
    finally:
        fast.close()
        net.to("cpu")
    with pytest.raises(pathweave.ClosedError):
        fast(x.to(device))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_builder_loads(name: str) -> None:
    assert callable(STRATEGIES[name].load())


def test_auto_names_rows_of_the_table() -> None:
    assert {n for rows in AUTO.values() for n, _ in rows} <= set(STRATEGIES)
    for kind, rows in AUTO.items():
        assert all(kind in STRATEGIES[n].devices for n, _ in rows), kind


def test_unknown_strategy_and_wrong_device_are_input_errors(model) -> None:
    net, x = model
    with pytest.raises(InputError, match="unknown strategy 'nope'; choose one of auto, sequential"):
        entry("nope")
    with pytest.raises(InputError, match="strategy 'streams' runs on CUDA, not cpu"):
        pathweave.optimize(net, x, strategy="streams", device="cpu")


def test_options_reach_the_builder_and_misspelt_ones_are_named(model) -> None:
    net, x = model
    captured = capture(net, x)
    fast = pathweave.optimize(captured, strategy="sequential", options={"fast": False})
    assert fast.passes == []  # the plain graph: no rewrites
    fast.close()
    with pytest.raises(InputError, match="strategy 'sequential' has no option 'fats'; its options: .*fast"):
        pathweave.optimize(captured, strategy="sequential", options={"fats": False})
    with pytest.raises(InputError, match="strategy 'tiles' has no option 'tiles_per_leyer'"):
        pathweave.optimize(captured, strategy="tiles", options={"tiles_per_leyer": 2})
    with pytest.raises(InputError, match="auto: options are one dict per strategy it tries"):
        pathweave.optimize(captured, options={"winograd_min_channels": 1})


def test_auto_passes_each_strategy_its_options(model, monkeypatch) -> None:
    from pathweave import auto

    seen: dict[str, dict] = {}
    built = auto.build

    def recorded(name: str, captured, context, options, stacks) -> Strategy:
        seen[name] = options
        return built(name, captured, context, options, stacks)

    monkeypatch.setattr(auto, "build", recorded)
    net, x = model
    fast = pathweave.optimize(net, x, options={"sequential": {"fast": False}, "lanes": {"lanes": 1}})
    fast.close()
    assert seen["sequential"] == {"fast": False} and seen["lanes"] == {"lanes": 1}
    assert seen["tiles"] == {}
