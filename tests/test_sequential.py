"""SequentialExecutor on small graphs: outputs, input checks, errors that name the node, fx graphs."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.fx
from torch import nn

import pathweave
from pathweave.errors import ExecutionError, InputError
from pathweave.frontend.capture import capture
from pathweave.sequential import SequentialExecutor

RTOL = 1e-4


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=RTOL, atol=RTOL * want.abs().max().item())


class Embedder(nn.Module):
    """Ids -> embedding -> mean -> linear: ids out of range fail inside the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids).mean(1))


class Tree(nn.Module):
    """Nested outputs: a dict holding a tensor and a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        c = torch.relu(self.conv(x))
        return {"conv": c, "pair": (c.mean((2, 3)) + y, y * 2)}


def flip_if_negative(x: torch.Tensor) -> torch.Tensor:
    if x.sum() < 0:  # data-dependent: export rejects it, so capture falls back to fx
        return -x
    return x


torch.fx.wrap("flip_if_negative")


class FxOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(flip_if_negative(torch.relu(self.conv(x))).mean((2, 3)))


def _seeded(cls: type[nn.Module]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return cls().eval()


def test_nested_outputs_and_new_inputs() -> None:
    model = _seeded(Tree)
    x, y = torch.randn(2, 3, 8, 8), torch.randn(2, 4)
    ex = SequentialExecutor(capture(model, x, y))
    assert any(p.rewrites for p in ex.passes)  # the fast CPU path ran and was kept
    for args in ((x, y), (torch.randn(2, 3, 8, 8), torch.randn(2, 4))):
        got = ex(*args)
        with torch.no_grad():
            want = model(*args)
        assert set(got) == {"conv", "pair"} and isinstance(got["pair"], tuple) and len(got["pair"]) == 2
        _close(got["conv"], want["conv"])
        _close(got["pair"][0], want["pair"][0])
        _close(got["pair"][1], want["pair"][1])


def test_plain_path_without_fast() -> None:
    model = _seeded(Tree)
    x, y = torch.randn(1, 3, 8, 8), torch.randn(1, 4)
    ex = SequentialExecutor(capture(model, x, y), fast=False)
    assert ex.passes == []
    assert ex.gm.code == capture(model, x, y).gm.code
    with torch.no_grad():
        _close(ex(x, y)["conv"], model(x, y)["conv"])


def test_wrong_input_shape_is_input_error() -> None:
    model = _seeded(Tree)
    ex = SequentialExecutor(capture(model, torch.randn(1, 3, 8, 8), torch.randn(1, 4)))
    with pytest.raises(InputError, match=r"input 0 has shape \(1, 3, 9, 9\)"):
        ex(torch.randn(1, 3, 9, 9), torch.randn(1, 4))


def test_error_in_graph_names_the_node_and_executor_recovers() -> None:
    model = _seeded(Embedder)
    ids = torch.tensor([[1, 2, 3], [4, 5, 9]])
    ex = SequentialExecutor(capture(model, ids))
    with pytest.raises(ExecutionError) as info:
        ex(torch.tensor([[1, 2, 3], [4, 5, 10]]))  # 10 is past the vocabulary
    err = info.value
    assert err.node == "embedding"
    assert "node %embedding" in str(err) and "IndexError" in str(err)
    assert isinstance(err.__cause__, IndexError)
    # the executor is still usable
    other = torch.tensor([[0, 0, 7], [8, 6, 1]])
    with torch.no_grad():
        _close(ex(other), model(other))
        _close(ex(ids), model(ids))


def test_broken_buffer_names_the_node() -> None:
    model = _seeded(Embedder)
    ids = torch.tensor([[1, 2, 3]])
    ex = SequentialExecutor(capture(model, ids), fast=False)
    weight = next(n for n in ex.gm.graph.nodes if n.op == "get_attr" and "fc_weight" in str(n.target))
    good = getattr(ex.gm, weight.target)
    setattr(ex.gm, weight.target, torch.zeros(3, 5))  # 5 inputs where the graph feeds 4
    with pytest.raises(ExecutionError, match=r"node %linear.*raised RuntimeError") as info:
        ex(ids)
    assert info.value.node == "linear"
    setattr(ex.gm, weight.target, good)
    with torch.no_grad():
        _close(ex(ids), model(ids))


def test_fx_captured_graph_runs() -> None:
    model = _seeded(FxOnly)
    x = torch.randn(2, 3, 8, 8)
    captured = capture(model, x)
    assert captured.method == "fx"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning
        ex = SequentialExecutor(captured)
    for arg in (x, -torch.rand(2, 3, 8, 8)):
        with torch.no_grad():
            _close(ex(arg), model(arg))


def test_flatten_after_pooled_map() -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 4, 3),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((2, 2)),
            nn.Flatten(),
            nn.Linear(16, 2),
        ).eval()  # the in-place relu makes capture functionalize: flatten becomes aten.view
        x = torch.randn(1, 3, 8, 8)
    ex = SequentialExecutor(capture(model, x))
    with torch.no_grad():
        _close(ex(x), model(x))


class ConstOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor):
        return torch.relu(x), self.w * 2, x


@pytest.mark.parametrize("strategy", ["sequential", "lanes"])
def test_outputs_that_are_constants_or_inputs_are_copies(strategy: str) -> None:
    x = torch.randn(3)
    fast = pathweave.optimize(ConstOut().eval(), x, strategy=strategy)
    _, const, same = fast(x)
    _, const2, _ = fast(x)
    assert const.data_ptr() != const2.data_ptr()  # not the graph's own constant, handed out twice
    assert same.data_ptr() != x.data_ptr() and torch.equal(same, x)  # not the caller's own tensor
    torch.testing.assert_close(const2, torch.full((3,), 2.0))
