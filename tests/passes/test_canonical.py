"""passes.canonical: composite spellings rewritten to the ops the strategies know, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.frontend.capture import capture
from pathweave.passes import canonical
from pathweave.passes.pipeline import run_pipeline
from pathweave.passes.util import aten


class AsOps(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = x.flatten(1).reshape_as(y) + x.view(-1).view_as(y)
        return a * x.mean().expand_as(y) + x.sum().type_as(y.half()).float()


class SamePad(torch.nn.Module):
    def __init__(self, k: int, dilation: int, dims: int) -> None:
        super().__init__()
        conv = (torch.nn.Conv1d, torch.nn.Conv2d)[dims - 1]
        self.a = conv(3, 8, k, padding="same", dilation=dilation)
        self.b = conv(8, 8, k, padding="valid", groups=8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.silu(self.a(x)))


def _rewritten(model: torch.nn.Module, *x: torch.Tensor) -> torch.fx.GraphModule:
    gm = capture(model.eval(), *x).gm
    found = canonical.propose(gm)
    assert found, "nothing to rewrite: the test no longer covers the pass"
    run_pipeline(gm, (canonical,))
    canonical.verify(gm, found)
    return gm


def test_as_ops_become_plain_ops() -> None:
    x, y = torch.randn(2, 3, 4), torch.randn(2, 12)
    gm = _rewritten(AsOps(), x, y)
    targets = {n.target for n in gm.graph.nodes}
    assert not targets & {
        aten.reshape_as.default,
        aten.view_as.default,
        aten.expand_as.default,
        aten.type_as.default,
    }
    assert torch.equal(gm(x, y)[0], AsOps()(x, y))


@pytest.mark.parametrize(
    "k, dilation, dims", [(3, 1, 2), (4, 1, 2), (5, 2, 2), (2, 3, 2), (4, 1, 1), (7, 2, 1)]
)
def test_same_and_valid_padding_become_explicit(k: int, dilation: int, dims: int) -> None:
    torch.manual_seed(k)
    model = SamePad(k, dilation, dims).eval()
    x = torch.randn(1, 3, *([17] * dims))
    x[0, 0, 3] = float("nan")
    gm = _rewritten(model, x)
    assert not any(n.target in (aten.conv1d.padding, aten.conv2d.padding) for n in gm.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(gm(x)[0], model(x), rtol=0, atol=0, equal_nan=True)


def test_same_padding_runs_whole_in_tiles() -> None:
    torch.manual_seed(0)
    model, x = SamePad(4, 1, 2).eval(), torch.randn(1, 3, 33, 33)
    fast = pathweave.optimize(torch.export.export(model, (x,)), x, strategy="tiles")
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    assert getattr(fast, "coverage", None) is None or fast.coverage.share == 1.0
    fast.close()


EINSUMS = [
    ("bhlk,bhtk->bhlt", [(2, 3, 5, 4), (2, 3, 6, 4)]),  # CvT's attention scores
    ("bhlt,bhtv->bhlv", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,kj->bki", [(2, 3, 4), (5, 4)]),  # a weight shared over the batch, output permuted
    ("bi,bi->b", [(3, 7), (3, 7)]),
    ("bij,bkl->bijkl", [(2, 2, 3), (2, 1, 4)]),  # outer product
    ("abc,cd->d", [(2, 3, 4), (4, 5)]),  # indices summed in one operand only
    ("ij->ji", [(3, 4)]),
    ("ijk->k", [(3, 4, 5)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUMS)
def test_einsum_becomes_bmm(equation: str, shapes: list[tuple[int, ...]]) -> None:
    class Einsum(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return torch.einsum(equation, *xs)

    g = torch.Generator().manual_seed(len(equation))
    xs = [torch.randn(*s, generator=g) for s in shapes]
    xs[0].view(-1)[1] = float("nan")
    gm = _rewritten(Einsum(), *xs)
    assert not any(n.target is aten.einsum.default for n in gm.graph.nodes)
    torch.testing.assert_close(gm(*xs)[0], torch.einsum(equation, *xs), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("equation, shapes", [("ii->i", [(3, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
                                              ("bi,bi->b", [(1, 4), (3, 4)])])  # fmt: skip
def test_einsums_left_alone(equation: str, shapes: list[tuple[int, ...]]) -> None:
    class Einsum(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return torch.einsum(equation, *xs)

    xs = [torch.randn(*s) for s in shapes]
    gm = capture(Einsum(), *xs).gm
    assert not [m for m in canonical.propose(gm) if "einsum" in m.node]


def test_a_to_that_changes_nothing_goes() -> None:
    class Casts(torch.nn.Module):  # LlamaRMSNorm: hidden.to(float32) ... .to(input_dtype)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(torch.float32) * 2 + x.to(torch.float16).to(torch.float32)

    x = torch.randn(3, 5)
    gm = _rewritten(Casts(), x)
    kept = [n for n in gm.graph.nodes if n.target is aten.to.dtype]
    assert [n.args[1] for n in kept] == [torch.float16, torch.float32]  # the real casts stay
    assert torch.equal(gm(x)[0], Casts()(x))


class Relu6(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.conv(x)) + F.relu6(x).sum()


def test_relu6_becomes_hardtanh_and_tiles_run_it() -> None:
    """``F.relu6`` captured as ``aten.relu6`` had no tile map: the tiles refused the whole model."""
    x = torch.randn(1, 3, 9, 9) * 8
    x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    model = Relu6().eval()
    gm = _rewritten(model, x)
    assert aten.relu6.default not in {n.target for n in gm.graph.nodes}
    assert aten.hardtanh.default in {n.target for n in gm.graph.nodes}
    want = model(x)
    got = gm(x)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, want, equal_nan=True)
    fast = pathweave.optimize(model, x, strategy="tiles")
    try:
        torch.testing.assert_close(fast(x), want, equal_nan=True, rtol=1e-4, atol=1e-4)
    finally:
        fast.close()
