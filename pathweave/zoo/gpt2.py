"""GPT-2 124M language model, matching HF ``GPT2LMHeadModel`` for the ``gpt2`` config (Radford et al. 2019):
vocab 50257, 1024 positions, width 768, 12 pre-LayerNorm blocks of 12 heads, tanh-approximated GELU
("gelu_new"), final ``ln_f``, LM head tied to ``wte``; 124,439,808 parameters (the tied matrix counted once).

First iteration only: no past key/values. The causal mask is a non-persistent bool buffer per attention layer,
sliced to the static sequence length. Module names follow HF; the projections are ``nn.Linear`` where HF
uses its transposed ``Conv1D`` (same parameter count; transpose those weights to load an HF state dict).
Dropout is left out: it is the identity at inference.
"""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB_SIZE = 50257
N_POSITIONS = 1024
N_EMBD = 768
N_LAYER = 12
N_HEAD = 12
LN_EPS = 1e-5


class GPT2Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head_dim = N_EMBD // N_HEAD
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        causal = torch.tril(torch.ones(N_POSITIONS, N_POSITIONS, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, N_POSITIONS, N_POSITIONS), persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (N_HEAD, self.head_dim)).transpose(1, 2)  # (batch, heads, seq, head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        q, k, v = (self._heads(t) for t in self.c_attn(x).split(N_EMBD, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = self.bias[:, :, :seq, :seq]
        scores = torch.where(causal, scores, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        return self.c_proj(torch.matmul(probs, v).transpose(1, 2).flatten(2))


class GPT2MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.act = nn.GELU(approximate="tanh")  # "gelu_new"
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=LN_EPS)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=LN_EPS)
        self.mlp = GPT2MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB_SIZE, N_EMBD)
        self.wpe = nn.Embedding(N_POSITIONS, N_EMBD)
        self.h = nn.ModuleList(GPT2Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD, eps=LN_EPS)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = nn.Linear(N_EMBD, VOCAB_SIZE, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(input_ids))


def build() -> nn.Module:
    return GPT2LMHeadModel()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    seq = 16 if small else 128
    return (torch.randint(0, VOCAB_SIZE, (batch, seq), dtype=torch.int64),)
