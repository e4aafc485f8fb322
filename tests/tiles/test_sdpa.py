"""tile_sdpa: scaled_dot_product_attention decomposed into tile ops runs whole in the tiles and equals
eager SDPA on CPU, edge cases included (fully masked rows give 0, -inf in float masks, NaN in q, k, v),
for inputs given at call time, not only those the build checks; tolerance rtol = atol = 1e-5."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.errors import UnsupportedError
from pathweave.tiles import sdpa as tile_sdpa
from pathweave.tiles.mixed import IslandsStrategy
from pathweave.tiles.strategy import TilesStrategy

RTOL = ATOL = 1e-5
B, H, L, S, E = 2, 3, 17, 33, 8


class _Sdpa(torch.nn.Module):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kwargs)


def _qkv(heads_kv: int = H, keys: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, E, generator=g)
    return q, torch.randn(B, heads_kv, keys, E, generator=g), torch.randn(B, heads_kv, keys, E, generator=g)


def _tiles(model: torch.nn.Module, *inputs: torch.Tensor) -> Any:
    """The model through ``optimize(strategy="tiles")``, which must be the whole-model tile program."""
    opt = pathweave.optimize(model, *inputs, strategy="tiles")
    assert isinstance(opt, TilesStrategy)
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    assert not any(n.target == sdpa for n in opt.gm.graph.nodes)
    return opt


def _same(opt: Any, model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    got, want = opt(*inputs), model(*inputs)
    assert torch.equal(got.isnan(), want.isnan())
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)


@pytest.mark.parametrize(
    "kwargs", [{}, {"scale": 0.3}, {"is_causal": True}], ids=["plain", "scaled", "causal"]
)
def test_unmasked(kwargs: dict[str, Any]) -> None:
    model, (q, k, v) = _Sdpa(**kwargs).eval(), _qkv()
    opt = _tiles(model, q, k, v)
    _same(opt, model, q, k, v)
    _same(opt, model, q * 2.0, k - 1.0, v)  # other inputs at call time


def test_bool_mask_and_fully_masked_rows() -> None:
    """A query whose keys are all masked gives 0 in eager (its safe softmax), not NaN."""
    model, (q, k, v) = _Sdpa().eval(), _qkv()
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(1)) > 0.3
    opt = _tiles(model, q, k, v, mask)
    _same(opt, model, q, k, v, mask)
    dead = mask.clone()
    dead[[0, 3, L - 1]] = False
    _same(opt, model, q, k, v, dead)
    assert opt(q, k, v, dead)[:, :, 3].abs().max() == 0
    _same(opt, model, q, k, v, torch.zeros(L, S, dtype=torch.bool))  # every row masked


def test_float_mask_with_infinities() -> None:
    model, (q, k, v) = _Sdpa().eval(), _qkv()
    mask = torch.randn(B, 1, L, S)
    opt = _tiles(model, q, k, v, mask)
    _same(opt, model, q, k, v, mask)
    inf = mask.clone()
    inf[0, 0, 4] = -math.inf  # a row all -inf: 0
    inf[1, 0, 2, ::2] = -math.inf  # some keys -inf
    inf[1, 0, 5, 1:] = -math.inf  # one key left
    inf[0, 0, 6, :3] = torch.finfo(torch.float32).min  # the rest -inf: the smallest float's keys share it
    inf[0, 0, 6, 3:] = -math.inf
    _same(opt, model, q, k, v, inf)


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_as_eager(where: str) -> None:
    model, (q, k, v) = _Sdpa().eval(), _qkv()
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[3] = False
    mask[:, 5] = False  # a NaN score under the mask stays NaN: eager adds the mask
    opt = _tiles(model, q, k, v, mask)
    qkv = {"q": q.clone(), "k": k.clone(), "v": v.clone()}
    qkv[where][1, 0, 5, 0] = math.nan
    _same(opt, model, qkv["q"], qkv["k"], qkv["v"], mask)
    _same(opt, model, qkv["q"], qkv["k"], qkv["v"], torch.ones(L, S, dtype=torch.bool))


def test_grouped_query_heads() -> None:
    model, (q, k, v) = _Sdpa(enable_gqa=True).eval(), _qkv(heads_kv=1)
    opt = _tiles(model, q, k, v)
    _same(opt, model, q, k, v)
    model3 = _Sdpa(enable_gqa=True, is_causal=True).eval()
    q6 = torch.randn(B, 6, L, E)
    k3, v3 = torch.randn(B, 3, S, E), torch.randn(B, 3, S, E)
    _same(_tiles(model3, q6, k3, v3), model3, q6, k3, v3)


def test_left_alone() -> None:
    """Dropout, float64, fewer than MIN_KEYS keys (eager's kernel gives 0 for a NaN row there) and heads
    that differ without enable_gqa stay ATen nodes; the islands still match eager."""
    q, k, v = _qkv(keys=tile_sdpa.MIN_KEYS - 1)
    model = _Sdpa().eval()
    cap = pathweave.capture(model, q, k, v)
    assert tile_sdpa.propose(cap.gm) == []
    with pytest.raises(UnsupportedError):
        TilesStrategy(cap)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = pathweave.optimize(model, q, k, v, strategy="tiles")
    assert isinstance(opt, IslandsStrategy)
    qn = q.clone()
    qn[0, 0, 0] = math.nan
    _same(opt, model, qn, k, v)
    assert tile_sdpa.propose(pathweave.capture(model, *[t.double() for t in _qkv()]).gm) == []
    gm = pathweave.capture(model, *_qkv()).gm
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert len(tile_sdpa.propose(gm)) == 1
    node.args = (*node.args[:3], None, 0.5)  # dropout (eager draws it even in eval)
    assert tile_sdpa.propose(gm) == []
    q, k, v = _qkv(heads_kv=1)
    assert tile_sdpa.propose(pathweave.capture(model, q[:, :2], k, v).gm) == []  # heads differ, no gqa


def test_distilbert_runs_whole_in_tiles() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.DistilBertConfig(dim=128, hidden_dim=256, n_layers=2, n_heads=4, vocab_size=100)
    bert = transformers.DistilBertModel(config).eval()

    class _Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=ids).last_hidden_state

    model = _Bert().eval()
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = _tiles(model, ids)
    other = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        for x in (ids, other):
            torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)


class _ViewOfTranspose(torch.nn.Module):
    """T5/BART/BEiT: ``out.transpose(1, 2).contiguous().view(...)`` after SDPA; export drops the no-op
    ``contiguous`` because ATen's SDPA output already lies as (B, L, H, D)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.o = torch.nn.Linear(128, 384), torch.nn.Linear(128, 128)
        self.register_buffer("bias", torch.randn(1, 4, 32, 32, generator=torch.Generator().manual_seed(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(1, 32, 4, 32).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        return self.o(y.transpose(1, 2).contiguous().view(1, 32, 128))


def test_a_view_of_the_transposed_output_runs() -> None:
    torch.manual_seed(0)
    model, x = _ViewOfTranspose().eval(), torch.randn(1, 32, 128)
    ep = torch.export.export(model, (x,))
    assert any(n.target is torch.ops.aten.view.default for n in ep.graph.nodes)
    fast = pathweave.optimize(ep, x, strategy="tiles")
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    assert getattr(fast, "coverage", None) is None or fast.coverage.share == 1.0  # whole, or one island
    fast.close()
