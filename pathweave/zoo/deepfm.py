"""DeepFM for Criteo (Guo et al. 2017; field layout as DeepCTR / PaddleRec): 13 dense and 26 sparse fields,
39 in all, each a 10-dimensional embedding (the paper's size). A dense field's embedding is one learned vector
scaled by the field's value. FM first order (a weight per sparse id, a weight per dense field, a bias) plus FM
second order over the 39 embeddings, plus a DNN 400-400-400 with ReLU on the concatenated embeddings; sigmoid
of the sum.

Each sparse field has its own tables, so the 26 lookups are independent paths. Vocabularies are a fixed
10,000 ids per field (hashed ids), which keeps the model at 3.3M parameters. Dropout is left out: it is the
identity at inference.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_DENSE = 13
NUM_SPARSE = 26
EMBED_DIM = 10
VOCAB_SIZES: tuple[int, ...] = (10_000,) * NUM_SPARSE
HIDDEN: tuple[int, ...] = (400, 400, 400)


def _dnn(cin: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(cin, width), nn.ReLU()]
        cin = width
    layers.append(nn.Linear(cin, 1))
    return nn.Sequential(*layers)


class DeepFM(nn.Module):
    def __init__(self, vocab_sizes: tuple[int, ...] = VOCAB_SIZES, embed_dim: int = EMBED_DIM) -> None:
        super().__init__()
        self.sparse_embedding = nn.ModuleList(nn.Embedding(v, embed_dim) for v in vocab_sizes)
        self.sparse_linear = nn.ModuleList(nn.Embedding(v, 1) for v in vocab_sizes)
        self.dense_embedding = nn.Parameter(torch.empty(NUM_DENSE, embed_dim))
        self.dense_linear = nn.Linear(NUM_DENSE, 1)  # its bias is the global bias
        self.dnn = _dnn((NUM_DENSE + len(vocab_sizes)) * embed_dim, HIDDEN)
        for emb in [*self.sparse_embedding, *self.sparse_linear]:
            nn.init.normal_(emb.weight, std=0.01)
        nn.init.normal_(self.dense_embedding, std=0.01)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``dense`` (batch, 13) float, ``sparse`` (batch, 26) int64; returns click probability (batch, 1)."""
        sparse_vecs = [emb(sparse[:, i]) for i, emb in enumerate(self.sparse_embedding)]
        dense_vecs = dense.unsqueeze(-1) * self.dense_embedding  # (batch, 13, dim)
        fields = torch.cat([dense_vecs, torch.stack(sparse_vecs, dim=1)], dim=1)  # (batch, 39, dim)

        sparse_weights = [lin(sparse[:, i]) for i, lin in enumerate(self.sparse_linear)]
        first = self.dense_linear(dense) + torch.cat(sparse_weights, dim=1).sum(dim=1, keepdim=True)

        summed = fields.sum(dim=1)
        second = 0.5 * (summed * summed - (fields * fields).sum(dim=1)).sum(dim=1, keepdim=True)

        deep = self.dnn(fields.flatten(1))
        return torch.sigmoid(first + second + deep)


def build() -> nn.Module:
    return DeepFM()


def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]:
    # small is the same: the model is cheap already. Dense values stand for normalised counts.
    dense = torch.rand(batch, NUM_DENSE)
    sparse = torch.stack([torch.randint(0, v, (batch,)) for v in VOCAB_SIZES], dim=1)
    return dense, sparse
