"""BERT-base encoder with pooler, matching HF ``BertModel`` for the ``bert-base-uncased`` config
(Devlin et al. 2018): vocab 30522, hidden 768, 12 layers, 12 heads, intermediate 3072, erf GELU,
LayerNorm eps 1e-12, 512 positions, 2 token types; 109,482,240 parameters.

Module names follow HF, so its state dict loads (the non-persistent ``position_ids`` buffer aside). Attention
is written out (q, k, v, matmul, scale, additive mask, softmax, matmul). Dropout is left out: it is the
identity at inference. Token type ids are all zero, as HF uses when none are given.
"""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB_SIZE = 30522
HIDDEN = 768
LAYERS = 12
HEADS = 12
INTERMEDIATE = 3072
MAX_POSITIONS = 512
TYPE_VOCAB = 2
LN_EPS = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB_SIZE, HIDDEN, padding_idx=0)
        self.position_embeddings = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(TYPE_VOCAB, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.register_buffer("position_ids", torch.arange(MAX_POSITIONS).unsqueeze(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        position_ids = self.position_ids[:, : input_ids.shape[1]]
        token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (HEADS, self.head_dim)).transpose(1, 2)  # (batch, heads, seq, head_dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + mask, dim=-1)
        return torch.matmul(probs, v).transpose(1, 2).flatten(2)


class BertResidualOutput(nn.Module):
    """dense, then LayerNorm of the sum with the residual (HF BertSelfOutput and BertOutput)."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.dense = nn.Linear(cin, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self = BertSelfAttention()
        self.output = BertResidualOutput(HIDDEN)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)
        self.intermediate_act_fn = nn.GELU()  # erf form

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = BertAttention()
        self.intermediate = BertIntermediate()
        self.output = BertResidualOutput(INTERMEDIATE)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.activation = nn.Tanh()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden[:, 0]))


class BertModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings()
        self.encoder = BertEncoder()
        self.pooler = BertPooler()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embeddings(input_ids)
        # (batch, 1, 1, seq): 0 where attended, the dtype's minimum where masked, as HF does
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        hidden = self.encoder(x, mask)
        return hidden, self.pooler(hidden)


def build() -> nn.Module:
    return BertModel()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    seq = 16 if small else 128
    input_ids = torch.randint(0, VOCAB_SIZE, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    return input_ids, attention_mask
