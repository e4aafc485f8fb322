"""Tile islands: models the tiles cannot run whole run as islands with ATen between them, and match eager."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from torch import nn

import pathweave
from pathweave.errors import ExecutionError, PlanError
from pathweave.passes.pipeline import run_pipeline
from pathweave.tiles.islands import IslandPlan, propose
from pathweave.tiles.mixed import IslandsStrategy, build_tiles
from pathweave.tiles.ops import TILE_OPS
from pathweave.tiles.rows import NoKernel
from pathweave.tiles.strategy import PASSES, TilesStrategy


class ActCNN(nn.Module):
    def __init__(self, act: type[nn.Module]) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), act(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), act(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class WhereMask(nn.Module):
    """A mask from addcmul, which has no kernel (the comparison and where have: the model is cut)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(torch.where(torch.addcmul(h, h, h) > 0, h, torch.zeros_like(h)))


class UpsampleLeaky(nn.Module):
    """(Was a GroupNorm, which the tiles now run: test_reduce covers it.)"""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(4, 16, 3, padding=1), nn.Conv2d(16, 8, 3, padding=1)
        self.up, self.act = nn.Upsample(scale_factor=2, mode="nearest"), nn.LeakyReLU(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(self.act(self.up(self.c1(x))))


class IndexArithmetic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(50, 32), nn.Linear(32, 32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb((ids * 3 + 1) % 50))


def _cases() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    g = torch.Generator().manual_seed(0)
    return {
        "silu_cnn": (ActCNN(nn.SiLU), (torch.randn(1, 3, 16, 16, generator=g),)),
        "hardswish_cnn": (ActCNN(nn.Hardswish), (torch.randn(1, 3, 16, 16, generator=g),)),
        "prenorm_encoder": (
            nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True),
            (torch.randn(1, 8, 32, generator=g),),
        ),
        "where_mask": (WhereMask(), (torch.randn(4, 32, generator=g),)),
        "upsample_leaky": (UpsampleLeaky(), (torch.randn(1, 4, 8, 8, generator=g),)),
        "index_arithmetic": (IndexArithmetic(), (torch.randint(0, 50, (1, 6), generator=g),)),
    }


@pytest.fixture
def pool_graph_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The global pool as a graph-only op (no kernel binder): the CNNs are cut into the same islands
    whatever kernels the tiles gain (SiLU and Hardswish, refused whole once, now fuse into the convs)."""
    op = TILE_OPS["adaptive_avg_pool2d"]
    monkeypatch.setitem(TILE_OPS, "adaptive_avg_pool2d", dataclasses.replace(op, bind=None))


def _islands(model: nn.Module, inputs: tuple, **options: object) -> IslandsStrategy:
    """The model under the row ``tiles`` with every island kept (no minimum size), warnings recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        captured = pathweave.capture(model.eval(), *inputs)
        strat = build_tiles(captured, threads=2, min_island_flops=0, **options)
    assert isinstance(strat, IslandsStrategy)
    strat.caught = [str(w.message) for w in caught]
    return strat


@pytest.mark.parametrize("name", list(_cases()))
def test_models_refused_whole_run_as_islands(name: str, outputs_close) -> None:
    """(Where a later tile op makes one of these models whole, ``test_strategy`` covers it instead.)"""
    model, inputs = _cases()[name]
    try:
        TilesStrategy(pathweave.capture(model.eval(), *inputs)).close()
        pytest.skip(f"the tiles now run {name} whole")
    except pathweave.UnsupportedError:
        pass
    strat = _islands(model, inputs)
    try:
        for seed in range(2):
            x = inputs if seed == 0 else tuple(_like(t, seed) for t in inputs)
            with torch.no_grad():
                outputs_close(strat(*x), model(*x), rtol=1e-3, atol_scale=1e-4)
        cov = strat.coverage
        assert 0.0 <= cov.share <= 1.0 and cov.outside, cov
        assert cov.islands == len(strat.islands) == len(strat.plan.islands)
        assert any(cov.line() in w for w in strat.caught), strat.caught
        assert cov.line() in strat.summary()
    finally:
        strat.close()


def _like(t: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if t.is_floating_point():
        return torch.randn(t.shape, generator=g)
    return torch.randint(0, 50, t.shape, generator=g)


@pytest.mark.usefixtures("pool_graph_only")
def test_cnn_coverage_names_the_outside_ops() -> None:
    model, inputs = _cases()["silu_cnn"]
    strat = _islands(model, inputs)
    try:
        assert strat.coverage.islands == 2 and 0.99 < strat.coverage.share < 1.0
        assert strat.coverage.outside == {"adaptive_avg_pool2d": 1}
    finally:
        strat.close()


def test_small_islands_run_in_aten() -> None:
    model, inputs = _cases()["where_mask"]
    with pytest.warns(UserWarning, match="0 island"):
        strat = build_tiles(pathweave.capture(model.eval(), *inputs), min_island_flops=10**12)
    try:
        assert strat.coverage.share == 0.0 and strat.coverage.islands == 0
        assert strat.coverage.outside["linear"] == 2
        with torch.no_grad():
            torch.testing.assert_close(strat(*inputs), model(*inputs))
    finally:
        strat.close()


def test_a_model_the_tiles_run_whole_is_one_program() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()
    x = torch.randn(1, 3, 12, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no coverage warning: nothing is left out
        strat = pathweave.optimize(model, x, strategy="tiles")
    try:
        assert type(strat) is TilesStrategy
        assert strat.coverage.share == 1.0 and strat.coverage.islands == 1 and not strat.coverage.outside
    finally:
        strat.close()


@pytest.mark.usefixtures("pool_graph_only")
def test_nan_propagates_through_islands() -> None:
    model, inputs = _cases()["silu_cnn"]
    strat = _islands(model, inputs)
    try:
        x = inputs[0].clone()
        x[0, 1, 3, 5] = float("nan")
        with torch.no_grad():
            want = model(x)
        got = strat(x)
        assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    finally:
        strat.close()


def _rewritten(name: str) -> torch.fx.GraphModule:
    model, inputs = _cases()[name]
    gm = copy.deepcopy(pathweave.capture(model.eval(), *inputs).gm)
    run_pipeline(gm, PASSES)
    return gm


@pytest.mark.usefixtures("pool_graph_only")
def test_the_plan_is_pure_printable_and_verified() -> None:
    gm = _rewritten("silu_cnn")
    before = gm.code
    plan = propose(gm, min_flops=0)
    assert gm.code == before  # proposing rewrites nothing
    assert plan.format() == propose(gm, min_flops=0).format()
    assert "island_1" in plan.format() and "adaptive_avg_pool2d" in plan.format()
    plan.verify(gm)
    twice = IslandPlan((plan.islands[0], plan.islands[0]), plan.outside, plan.outside_ops, plan.total_flops)
    with pytest.raises(PlanError, match="in two islands"):
        twice.verify(gm)


@pytest.mark.usefixtures("pool_graph_only")
def test_an_island_a_binder_refuses_shrinks(monkeypatch: pytest.MonkeyPatch, outputs_close) -> None:
    """A binder that refuses a layer at build time: the layer leaves its island (named in a warning),
    the rest of the model stays tiles."""

    def refuse(layer: object) -> int:
        raise NoKernel("refused for the test")

    monkeypatch.setitem(TILE_OPS, "linear", dataclasses.replace(TILE_OPS["linear"], bind=refuse))
    model, inputs = _cases()["silu_cnn"]
    strat = _islands(model, inputs)
    try:
        refusal = [w for w in strat.caught if "failed to build" in w and "refused for the test" in w]
        assert refusal and "nodes linear leave it" in refusal[0]
        assert strat.coverage.outside == {"adaptive_avg_pool2d": 1, "linear": 1}
        assert strat.coverage.islands == 1
        with torch.no_grad():
            outputs_close(strat(*inputs), model(*inputs), rtol=1e-3, atol_scale=1e-4)
    finally:
        strat.close()


def test_an_island_that_disagrees_runs_in_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    def disagree(self: TilesStrategy) -> None:
        raise ExecutionError("the tile kernels disagree with PyTorch (test)")

    monkeypatch.setattr(TilesStrategy, "check", disagree)
    model, inputs = _cases()["upsample_leaky"]
    strat = _islands(model, inputs)
    try:
        assert strat.coverage.islands == 0 and strat.coverage.share == 0.0
        assert any("disagree" in w for w in strat.caught)
        with torch.no_grad():
            torch.testing.assert_close(strat(*inputs), model(*inputs))
    finally:
        strat.close()


@pytest.mark.usefixtures("pool_graph_only")
def test_quiesce_and_workers() -> None:
    model, inputs = _cases()["silu_cnn"]
    strat = _islands(model, inputs)
    try:
        strat.quiesce()
        strat.set_workers(1)
        assert all(i.tiles.runtime.workers == 1 for i in strat.islands)
        with torch.no_grad():
            torch.testing.assert_close(strat(*inputs), model(*inputs), rtol=1e-3, atol=1e-4)
    finally:
        strat.close()
    with pytest.raises(pathweave.ClosedError):
        strat(*inputs)


def test_an_aten_segment_error_names_its_node() -> None:
    class Gather(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(128, 128), nn.Linear(128, 128)

        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return self.b(torch.cumsum(self.a(x), -1).index_select(1, idx))

    model, x, idx = Gather().eval(), torch.randn(8, 64, 128), torch.arange(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = pathweave.optimize(model, x, idx, strategy="tiles")
    assert isinstance(fn, IslandsStrategy)
    with pytest.raises(ExecutionError, match="node %index_select"):
        fn(x, torch.full((64,), 1000))
    with torch.no_grad():
        torch.testing.assert_close(fn(x, idx), model(x, idx), rtol=1e-4, atol=1e-4)  # and it still runs
