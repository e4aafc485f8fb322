"""SequentialExecutor against eager PyTorch for every zoo model, on small inputs."""

from __future__ import annotations

import warnings

import pytest

from pathweave import zoo
from pathweave.sequential import SequentialExecutor

CNNS = (
    "googlenet", "inception_v3", "squeezenet1_0", "resnet50", "densenet121", "vgg16_bn", "nasnet_a_mobile",
)  # fmt: skip
#: fused kernels reorder float sums: values within RTOL * |eager| + ATOL_SCALE * max |eager|
RTOL, ATOL_SCALE = 1e-3, 1e-3


#: batch two of these runs as a soak test (``PATHWEAVE_SOAK=1``): batch one checks them in CI, the others
#: check batch two (~35 s of CI on 2 cores saved)
SOAK_BATCH_TWO = ("densenet121", "vgg16_bn", "nasnet_a_mobile")


def _params(names, soak: tuple[str, ...] = ()):
    return [pytest.param(n, marks=pytest.mark.soak) if n in soak else n for n in names]


def _check(zoo_cache, outputs_close, name: str, batch: int) -> SequentialExecutor:
    captured = zoo_cache.captured(name, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback to the plain graph would warn
        ex = SequentialExecutor(captured)
    inputs = zoo_cache.inputs(name, batch)
    outputs_close(list(ex.run_flat(list(inputs))), zoo_cache.eager(name, batch), RTOL, ATOL_SCALE)
    outputs_close(ex(*inputs), captured(*inputs), RTOL, ATOL_SCALE)
    return ex


@pytest.mark.parametrize("name", _params(zoo.MODELS))
def test_batch_one(zoo_cache, outputs_close, name: str) -> None:
    ex = _check(zoo_cache, outputs_close, name, 1)
    if name in CNNS:
        assert ex.passes, "the fast CPU path was not kept"
        rewrites = {p.name: p.rewrites for p in ex.passes}
        assert rewrites["fuse_conv"] > 0 and rewrites["channels_last"] == 1


@pytest.mark.parametrize("name", _params(CNNS, SOAK_BATCH_TWO))
def test_cnn_batch_two(zoo_cache, outputs_close, name: str) -> None:
    ex = _check(zoo_cache, outputs_close, name, 2)
    assert ex.passes and sum(p.rewrites for p in ex.passes) > 0
