"""Strategy "tiles" on transformers: the kernels of ``tile_program_seq`` (embedding with int64 ids, layer
norm, softmax, GELU in both forms, matmul on strided and packed views, addmm / baddbmm, where and
masked_fill with bool masks, int64 -> float32, the copy of a reshape that cannot view) against eager
PyTorch, at odd sizes, with 1 and 2 engines and tiles that split rows; then BERT-base and GPT-2."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.tiles.abi import (
    GEMM_PACK,
    GEMM_ROWS,
    GEMM_TRANS,
    K_MATMUL,
    S_OP,
    SQ_LAYOUT_A,
    SQ_LAYOUT_B,
)
from pathweave.tiles.strategy import TilesStrategy

VOCAB, SEQ, HEADS, HEAD_DIM, BATCH = 29, 11, 3, 13, 2
WIDTH = HEADS * HEAD_DIM


class _TinyTransformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Embedding(SEQ, WIDTH)
        self.ln1 = torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.ln2 = torch.nn.LayerNorm(WIDTH, elementwise_affine=False)
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.down = torch.nn.Parameter(torch.randn(WIDTH, WIDTH) / WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.rel = torch.nn.Parameter(torch.randn(HEADS, SEQ, SEQ) * 0.1)
        self.head = torch.nn.Linear(WIDTH, 7)
        self.register_buffer("causal", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)), persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)  # strided: (batch, heads, seq, head_dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        positions = torch.arange(ids.shape[1]).unsqueeze(0)  # folded into a constant with its embedding
        x = self.ln1(self.tok(ids) + self.pos(positions))
        q, k, v = (self._heads(t) for t in self.qkv(x).split(WIDTH, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)  # B read transposed in place
        scores = torch.where(self.causal, scores + self.rel, torch.finfo(scores.dtype).min)
        scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * -1e4  # int64 -> float32
        scores = scores.masked_fill(pad[:, None, None, :], -1e4)  # a bool graph input
        probs = torch.softmax(scores, dim=-1)
        attn = torch.matmul(probs, v).transpose(1, 2).flatten(2)  # a copy layer
        x = x + self.proj(attn)
        h = self.up(self.ln2(x))
        h = torch.cat([F.gelu(h[..., :WIDTH]), F.gelu(h[..., WIDTH:], approximate="tanh")], dim=-1)
        x = x + torch.matmul(h[..., ::2], self.down)  # A with a column stride of 2: packed
        # fused epilogues (two linears of different inputs: passes.dedupe computes repeats once)
        x = x + F.gelu(self.mix(x), approximate="tanh") - 0.5 * F.gelu(self.proj(x))
        flat = x.flatten(0, 1)
        mixed = torch.addmm(self.head.bias, flat, self.head.weight.t(), beta=0.5, alpha=2.0)
        p = probs.flatten(0, 1)
        mixed_p = torch.baddbmm(p, p, p.transpose(1, 2), beta=0.25, alpha=0.5)
        heads = torch.bmm(mixed_p, v.flatten(0, 1))  # v's batch and head dims do not merge: a copy
        first = self.head(x[:, 0])  # a linear over a strided input: the matmul kernel
        return mixed, heads, first


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    mask = (torch.rand(BATCH, SEQ, generator=g) > 0.2).long()
    pad = torch.rand(BATCH, SEQ, generator=g) > 0.8
    pad[:, 0] = False  # one key per row stays visible
    return ids, mask, pad


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return _TinyTransformer().eval()


@pytest.mark.parametrize(
    ("threads", "tiling"),
    [(1, {"work_per_tile": 2e3}), (2, {"work_per_tile": 2e3}), (2, {"tiles_per_layer": 64})],
)
def test_every_transformer_kernel_matches_eager(
    tiny: torch.nn.Module, threads: int, tiling: dict, outputs_close
) -> None:
    strat = TilesStrategy(pathweave.capture(tiny, *_inputs(0)), threads=threads, **tiling)
    ops = set(strat.graph.layer_ops)
    assert {"embedding", "layer_norm", "softmax", "matmul", "where", "masked_fill", "to", "gelu"} <= ops
    assert {"flatten", "addmm", "baddbmm", "bmm", "matmul_add", "linear_act"} <= ops
    assert strat.graph.num_tiles > 2 * strat.graph.num_layers
    gemms = strat.program.layers[strat.program.layers[:, S_OP] == K_MATMUL]
    layouts = {int(v) for v in gemms[:, [SQ_LAYOUT_A, SQ_LAYOUT_B]].ravel()}
    assert layouts == {GEMM_ROWS, GEMM_TRANS, GEMM_PACK}  # in place, transposed in place, packed
    for seed in range(3):
        inputs = _inputs(seed)
        with torch.no_grad():
            want = tiny(*inputs)
        outputs_close(strat(*inputs), want, rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_norm_and_softmax_tiles_span_the_reduced_dim(tiny: torch.nn.Module) -> None:
    strat = TilesStrategy(pathweave.capture(tiny, *_inputs(0)), threads=1, work_per_tile=1e2, check=False)
    g = strat.graph
    for layer, op in enumerate(g.layer_ops):
        if op in ("layer_norm", "softmax"):
            last = int(g.layer_ndim[layer]) - 1
            assert len(g.grid(layer)[last]) == 2, f"{g.layer_names[layer]} splits the dim it reduces"
            assert g.tile_counts()[str(g.layer_names[layer])] > 1  # split along the other dims
    strat.close()


def test_an_index_outside_the_table_fails_loudly(tiny: torch.nn.Module) -> None:
    strat = TilesStrategy(pathweave.capture(tiny, *_inputs(0)), threads=1)
    ids, mask, pad = _inputs(1)
    ids[1, 3] = VOCAB
    with pytest.raises(pathweave.PathweaveError, match="embedding.*failed in tile"):
        strat(ids, mask, pad)
    strat.close()


@pytest.mark.parametrize("name", ["bert_base", "gpt2"])
def test_zoo_transformers_match_eager(name: str, zoo_cache, outputs_close) -> None:
    strat = TilesStrategy(zoo_cache.captured(name), threads=2)
    example = zoo_cache.inputs(name)
    ids = torch.randint(0, 30000, example[0].shape, generator=torch.Generator().manual_seed(7))
    inputs = (ids, *example[1:])
    with torch.no_grad():
        want = zoo_cache.model(name)(*inputs)
    outputs_close(strat(*inputs), want, rtol=1e-3, atol_scale=1e-4)
    strat.close()
