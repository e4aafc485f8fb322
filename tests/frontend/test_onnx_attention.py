"""ONNX Attention against torch's scaled_dot_product_attention on odd sizes."""

import dataclasses
import math

import pytest
import torch

from pathweave.frontend.onnx_attention import Settings, attention


def _settings(root: float, causal: bool = False, q_heads=None, kv_heads=None) -> tuple:
    return dataclasses.astuple(Settings(root, causal, q_heads, kv_heads, 0.0, 0, -1, -1, None))


@pytest.mark.parametrize("length_q, length_kv", [(1, 1), (3, 17), (17, 33)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_with_a_cache_and_grouped_heads(length_q: int, length_kv: int, causal: bool) -> None:
    g = torch.Generator().manual_seed(length_q * 100 + length_kv)
    q = torch.randn(2, 6, length_q, 8, generator=g)
    past = length_kv - length_q
    k, v = torch.randn(2, 3, length_q, 8, generator=g), torch.randn(2, 3, length_q, 5, generator=g)
    past_k, past_v = torch.randn(2, 3, past, 8, generator=g), torch.randn(2, 3, past, 5, generator=g)
    y, present_k, present_v, _ = attention(q, k, v, None, past_k, past_v, None,
                                           *_settings(math.sqrt(1 / math.sqrt(8)), causal))  # fmt: skip
    full_k = torch.cat([past_k, k], 2).repeat_interleave(2, 1)
    full_v = torch.cat([past_v, v], 2).repeat_interleave(2, 1)
    mask = None  # causal frontier aligned to the end of the cache (bottom right)
    if causal:
        mask = torch.arange(length_kv)[None, :] <= torch.arange(length_q)[:, None] + past
    want = torch.nn.functional.scaled_dot_product_attention(q, full_k, full_v, attn_mask=mask)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(present_k, torch.cat([past_k, k], 2)) and present_v.shape == (2, 3, length_kv, 5)


def test_three_d_inputs_and_a_fully_masked_row_gives_zeros() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 3, 12, generator=g),
        torch.randn(1, 5, 6, generator=g),
        torch.randn(1, 5, 6, generator=g),
    )
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 sees nothing
    y, *_ = attention(q, k, v, mask, None, None, None, *_settings(math.sqrt(0.25), False, 4, 2))
    assert y.shape == (1, 3, 12) and torch.equal(y[0, 1], torch.zeros(12)) and not y.isnan().any()
    heads = lambda t, h: t.reshape(1, t.shape[1], h, -1).transpose(1, 2)  # noqa: E731
    want = torch.nn.functional.scaled_dot_product_attention(
        heads(q, 4), heads(k, 2).repeat_interleave(2, 1), heads(v, 2).repeat_interleave(2, 1), scale=0.25
    )
    torch.testing.assert_close(y[0, [0, 2]], want.transpose(1, 2).reshape(1, 3, 12)[0, [0, 2]])
