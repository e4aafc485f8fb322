"""Static parallelism of the zoo CNNs: structure (not input size) decides it, so small inputs serve."""

from __future__ import annotations

import pytest

from pathweave.analysis.analyze import analyze_captured

CNNS = ("googlenet", "inception_v3", "squeezenet1_0", "resnet50", "nasnet_a_mobile")


@pytest.fixture(scope="module")
def parallelism(zoo_cache) -> dict[str, float]:
    return {name: analyze_captured(zoo_cache.captured(name)).parallelism for name in CNNS}


def test_squeezenet_is_below_one(parallelism) -> None:
    # a chain of fire modules: two short branches per module do not pay for the edge costs
    assert 0.0 < parallelism["squeezenet1_0"] < 1.0


def test_nasnet_is_the_most_parallel_cnn(parallelism) -> None:
    best = max(parallelism, key=parallelism.get)
    assert best == "nasnet_a_mobile", parallelism
    assert parallelism["nasnet_a_mobile"] > 2.0


def test_multi_branch_beats_residual_chain(parallelism) -> None:
    assert parallelism["googlenet"] > 1.0 and parallelism["inception_v3"] > 1.0
    assert parallelism["resnet50"] < 1.0


def test_static_stats_do_not_depend_on_batch(zoo_cache) -> None:
    one = analyze_captured(zoo_cache.captured("squeezenet1_0")).static.to_dict()
    two = analyze_captured(zoo_cache.captured("squeezenet1_0", batch=2)).static.to_dict()
    assert one == two
