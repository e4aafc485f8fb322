"""``TileProgram.load`` and ``read`` (tiles/program.py): inputs copied into the program's buffers and outputs
out of them with one memmove where both sides are contiguous blocks of one dtype, through NumPy otherwise
(views, negated views, tensors that require grad; a ZeroTensor or a wrapper subclass raises as before);
int64 inputs and bool outputs; an output that is the input itself or a view of it; every call returns new
tensors that later calls do not touch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import pathweave
from pathweave.tiles.strategy import TilesStrategy


class _Mixed(torch.nn.Module):
    """Float and int64 inputs; a float output, a bool output, the input itself and a transposed view."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(10, 6)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(x) + self.table(ids).sum()
        return y, y > 0.5, x, x.transpose(0, 1)


@pytest.fixture(scope="module")
def mixed() -> Iterator[TilesStrategy]:
    torch.manual_seed(0)
    x, ids = torch.randn(4, 6), torch.tensor([1, 7, 3])
    strat = TilesStrategy(pathweave.capture(_Mixed().eval(), x, ids), threads=2)
    yield strat
    strat.close()


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 6, generator=g), torch.randint(0, 10, (3,), generator=g)


def test_inputs_of_every_kind_give_eager_results(mixed: TilesStrategy) -> None:
    x, ids = _inputs(1)
    want = mixed.captured(x, ids)
    assert any(span is not None for span in mixed.program._loads)  # the memmove path is taken
    assert any(span is not None for span in mixed.program._reads)
    kinds = {
        "contiguous": (x, ids),
        "transposed copy": (x.t().contiguous().t(), ids),  # a non-contiguous view of the same values
        "negated view": (torch._neg_view(-x), ids),
        "requires grad": (x.clone().requires_grad_(), ids),
        "strided ids": (x, torch.stack([ids, ids], 1)[:, 0]),
        "storage offset": (torch.cat([torch.zeros(1, 6), x])[1:], ids),  # contiguous, 24 bytes in
    }
    for kind, args in kinds.items():
        got = mixed(*args)
        assert len(got) == len(want) == 4
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, kind
            torch.testing.assert_close(g, w, msg=kind)


def test_outputs_are_new_tensors(mixed: TilesStrategy) -> None:
    first = mixed(*_inputs(2))
    kept = [t.clone() for t in first]
    second = mixed(*_inputs(3))
    for a, b, k in zip(first, second, kept, strict=True):
        assert a.data_ptr() != b.data_ptr()
        assert torch.equal(a, k)  # the second call wrote its own tensors
    first[0].fill_(7.0)
    third = mixed(*_inputs(3))
    torch.testing.assert_close(third[0], second[0])


def test_nan_and_inf_pass_through(mixed: TilesStrategy) -> None:
    x, ids = _inputs(4)
    x[0, 0], x[1, 2], x[2, 3] = float("nan"), float("inf"), float("-inf")
    got, want = mixed(x, ids), mixed.captured(x, ids)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, equal_nan=True)


def test_tensors_without_data_at_their_pointer(mixed: TilesStrategy) -> None:
    """A ZeroTensor (autograd's) and a wrapper subclass report data_ptr() 0: no copy from address 0 (which
    crashed the process); the ZeroTensor is read as the zeros it is, the subclass raises InputError, and
    the next call works."""
    x, ids = _inputs(5)
    zeros = torch._efficientzerotensor(tuple(x.shape))
    for got, want in zip(mixed(zeros, ids), mixed.captured(torch.zeros_like(x), ids), strict=True):
        torch.testing.assert_close(got, want)
    two_tensor = pytest.importorskip("torch.testing._internal.two_tensor")
    with pytest.raises(pathweave.InputError, match="input 0 .TwoTensor. has no data"):
        mixed(two_tensor.TwoTensor(x.clone(), x.clone()), ids)
    torch.testing.assert_close(mixed(x, ids)[0], mixed.captured(x, ids)[0])
