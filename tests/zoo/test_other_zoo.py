"""NASNet-A Mobile, MobileViT-XS, DeepFM, BERT-base and GPT-2: parameter counts, small-input forward, export;
MobileViT's unfold into patches."""

from __future__ import annotations

import pytest
import torch

from pathweave import zoo

PARAM_COUNTS: dict[str, int] = {
    # Cadene pretrainedmodels nasnetamobile: 5,289,978 (the zoo's definition matches it exactly).
    "nasnet_a_mobile": 5_289_978,
    # HF MobileViTForImageClassification, apple/mobilevit-x-small config, 1000 labels (the paper: 2.3 M).
    "mobilevit_xs": 2_317_848,
    # No single reference count: it depends on the vocabularies (here 26 x 10,000 ids) and embedding dim 10.
    "deepfm": 3_337_745,
    "bert_base": 109_482_240,  # HF BertModel, bert-base-uncased, with pooler
    "gpt2": 124_439_808,  # HF GPT2LMHeadModel, LM head tied to wte
}

# Output shapes for batch 2 and the small inputs.
SMALL_OUTPUT_SHAPES: dict[str, tuple[tuple[int, ...], ...]] = {
    "nasnet_a_mobile": ((2, 1000),),
    "mobilevit_xs": ((2, 1000),),
    "deepfm": ((2, 1),),
    "bert_base": ((2, 16, 768), (2, 768)),
    "gpt2": ((2, 16, 50257),),
}


def _num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", list(PARAM_COUNTS))
def test_params_and_small_forward(name: str) -> None:
    entry = zoo.get(name)
    model = entry.build(seed=0)
    assert not model.training
    assert _num_params(model) == PARAM_COUNTS[name]
    inputs = entry.example_inputs(batch=2, small=True)
    with torch.no_grad():
        outs = _as_tuple(model(*inputs))
    assert tuple(o.shape for o in outs) == SMALL_OUTPUT_SHAPES[name]
    assert all(torch.isfinite(o).all() for o in outs)
    assert not torch.allclose(outs[0][0], outs[0][1])  # the two samples differ


def test_gpt2_head_is_tied() -> None:
    model = zoo.get("gpt2").build(seed=0)
    assert model.lm_head.weight is model.transformer.wte.weight


def test_token_inputs_are_int64() -> None:
    assert all(t.dtype == torch.int64 for t in zoo.get("bert_base").example_inputs(small=True))
    dense, sparse = zoo.get("deepfm").example_inputs(batch=3)
    assert dense.shape == (3, 13) and dense.dtype == torch.float32
    assert sparse.shape == (3, 26) and sparse.dtype == torch.int64


@pytest.mark.parametrize("name", ["deepfm", "bert_base"])
def test_exports_whole(name: str) -> None:
    entry = zoo.get(name)
    model = entry.build(seed=0)
    inputs = entry.example_inputs(batch=1, small=True)
    exported = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        expected = _as_tuple(model(*inputs))
        got = _as_tuple(exported.module()(*inputs))
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(expected, got, strict=True))


def test_mobilevit_unfold_groups_pixel_p_of_every_patch() -> None:
    """Sequence ``b * 4 + p`` holds pixel ``p`` (row-major in its 2x2 patch) of each patch of image ``b``,
    the patches in row-major order; fold undoes it."""
    from pathweave.zoo.mobilevit import PATCH, fold, unfold

    b, d, h, w = 3, 5, 6, 10
    x = torch.randn(b, d, h, w)
    seqs = unfold(x)
    assert seqs.shape == (b * PATCH * PATCH, (h // PATCH) * (w // PATCH), d)
    for img, py, px, ty, tx in [(0, 0, 0, 0, 0), (2, 1, 0, 2, 4), (1, 0, 1, 1, 3), (2, 1, 1, 2, 0)]:
        token = seqs[img * PATCH * PATCH + py * PATCH + px, ty * (w // PATCH) + tx]
        assert torch.equal(token, x[img, :, ty * PATCH + py, tx * PATCH + px])
    assert torch.equal(fold(seqs, h, w), x)
