"""The six built-in CNNs: torchvision parameter counts, small-input forward, seeded weights."""

from __future__ import annotations

import pytest
import torch

from pathweave import zoo

# Parameter counts of the torchvision references (googlenet and inception_v3 without auxiliary heads).
PARAM_COUNTS: dict[str, int] = {
    "googlenet": 6_624_904,
    "inception_v3": 23_834_568,
    "squeezenet1_0": 1_248_424,
    "resnet50": 25_557_032,
    "densenet121": 7_978_856,
    "vgg16_bn": 138_365_992,
}


def _num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(PARAM_COUNTS))
def test_params_and_small_forward(name: str) -> None:
    entry = zoo.get(name)
    model = entry.build(seed=0)
    assert not model.training
    assert _num_params(model) == PARAM_COUNTS[name]
    (x,) = entry.example_inputs(batch=2, small=True)
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, 1000)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", list(PARAM_COUNTS))
def test_build_is_seeded(name: str) -> None:
    entry = zoo.get(name)
    a = entry.build(seed=0).state_dict()
    b = entry.build(seed=0).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    del b
    c = entry.build(seed=1).state_dict()
    assert any(not torch.equal(a[k], c[k]) for k in a if k.endswith("weight"))
