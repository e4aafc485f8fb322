"""Epilogue fusion for the tile kernels: exact matches on small graphs, and the same results after."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.passes import fold_bn, prune
from pathweave.passes.pipeline import run_pipeline
from pathweave.tiles import fuse_epilogue as tile_fuse
from pathweave.tiles.grid import make_grid


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 1)
        self.c = torch.nn.Conv2d(4, 4, 1)
        self.fc = torch.nn.Linear(4, 6)
        self.fc2 = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))  # conv + relu
        z = torch.relu(self.b(y) + self.c(x))  # shortcut of two convs: the first takes the add
        v = F.gelu(self.fc(z.mean((2, 3))))  # linear + gelu
        return F.gelu(self.fc2(v), approximate="tanh")  # linear + GPT-2's gelu


def test_matches_and_results() -> None:
    model = _Block().eval()
    x = torch.randn(2, 4, 5, 7)
    gm = copy.deepcopy(pathweave.capture(model, x).gm)
    run_pipeline(gm, (prune, fold_bn))
    found = tile_fuse.propose(gm)
    assert [(m.layer, m.residual is not None, m.act_name) for m in found] == [
        ("conv2d", False, "relu"),
        ("conv2d_1", True, "relu"),
        ("linear", False, "gelu"),
        ("linear_1", False, "gelu_tanh"),
    ]
    run_pipeline(gm, (tile_fuse,))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count("pathweave.conv2d_act.default") == 2 and "aten.relu.default" not in targets
    assert targets.count("pathweave.linear_act.default") == 2 and "aten.gelu.default" not in targets
    with torch.no_grad():
        torch.testing.assert_close(gm(x)[0], model(x), rtol=1e-5, atol=1e-6)


def test_grid_keeps_matrix_product_tiles_large() -> None:
    small = make_grid((1, 512, 7, 7), 16, (1, 64, 19, 1))
    assert small.splits == (1, 8, 1, 1)  # no row split under 19 rows; channels in pieces of >= 64
    assert make_grid((1, 512, 7, 7), 16).splits == (1, 2, 7, 1)  # without a minimum: rows first


class _Norms(torch.nn.Module):
    """Batch norms no convolution can take: one after a concatenation only it reads, then ReLU (both fused
    into one op); one whose output a second reader also takes (not fused: the reader needs it before the
    ReLU); one then ReLU (fused); one then a scale (not an activation, its input not a concatenation)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.a, self.b, self.c, self.d = (torch.nn.BatchNorm2d(8) for _ in range(4))
        for norm in (self.a, self.b, self.c, self.d):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([self.conv(x), x], dim=1)
        u = torch.relu(self.a(y))
        v = self.b(u)
        w = torch.relu(v) + v
        return torch.relu(self.c(w)) + self.d(w) * 0.5


@pytest.mark.parametrize("decomposed", [False, True])
def test_batch_norm_then_activation(decomposed: bool) -> None:
    """Both ATen forms: batch_norm, and (decomposed) the tuple of _native_batch_norm_legit_no_training."""
    model = _Norms().eval()
    x = torch.randn(2, 4, 5, 7)
    source = torch.export.export(model, (x,)).run_decompositions({}) if decomposed else model
    gm = copy.deepcopy(pathweave.capture(source, x).gm)
    run_pipeline(gm, (prune, fold_bn))
    found = tile_fuse.propose(gm)
    assert [(m.act_name, m.cat is not None) for m in found] == [("relu", True), ("relu", False)]  # a, c
    assert all((m.residual is not None) == decomposed for m in found)  # the getitem 0 of the tuple form
    run_pipeline(gm, (tile_fuse,))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count("pathweave.cat_batch_norm_act.default") == 1 and "aten.cat.default" not in targets
    assert targets.count("pathweave.batch_norm_act.default") == 1 and targets.count("aten.relu.default") == 1
    with torch.no_grad():
        torch.testing.assert_close(gm(x)[0], model(x), rtol=1e-5, atol=1e-6)


class _SqueezeExcite(torch.nn.Module):
    """EfficientNet's squeeze-excitation: global mean, 1x1 + SiLU, 1x1 + sigmoid, the channels scaled;
    and a sigmoid after a linear, which stays apart (the linear kernels' epilogues lack it)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(c, 8, 1)
        self.b = torch.nn.Conv2d(8, c, 1)
        self.fc = torch.nn.Linear(c, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = F.adaptive_avg_pool2d(x, 1)
        y = x * torch.sigmoid(self.b(F.silu(self.a(g))))
        return y, torch.sigmoid(self.fc(g.flatten(1)))


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 7), (1, 17, 17, 17), (2, 33, 7, 9)])
def test_squeeze_excitation_gate_fused(shape: tuple[int, ...], outputs_close) -> None:  # noqa: ANN001
    """The gate's sigmoid joins its convolution's epilogue (the linear's does not); the global pool's lane
    sums and the fused gate give eager's values, NaN and +-inf included."""
    from pathweave.tiles.strategy import TilesStrategy

    torch.manual_seed(0)
    net = _SqueezeExcite(shape[1]).eval()
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2)
    try:
        ops = [str(o) for o in strat.graph.layer_ops]
        assert ops.count("conv2d_act") == 2 and ops.count("sigmoid") == 1
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            outputs_close(strat(x), net(x), rtol=1e-5, atol_scale=1e-5)
        x[0, 0, 0, 0] = float("nan")
        x[-1, -1, -1, -1] = float("inf")
        with torch.no_grad():
            for got, want in zip(strat(x), net(x), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    finally:
        strat.close()
