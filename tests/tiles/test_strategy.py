"""Strategy "tiles" (ASPEN): the native layer kernels on the tile graph against eager PyTorch, on every
kind of layer they cover (odd sizes, stride, padding, dilation, groups, ceil mode, residuals, concat),
with 1 and 2 engines, repeated runs on new inputs, workers changed between runs, two models at once."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.errors import ExecutionError, UnsupportedError
from pathweave.tiles.strategy import TilesStrategy


class _EveryKernel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 12, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(12)
        self.dil = torch.nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=2)
        self.point = torch.nn.Conv2d(12, 12, 1)
        self.wide = torch.nn.Conv2d(12, 8, (1, 3), padding=(0, 1), bias=False)
        self.fc = torch.nn.Linear(20 * 3 * 4, 10)
        self.head = torch.nn.Linear(10, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.stem(x)))  # BN folded, relu fused
        y = torch.relu(self.point(self.dil(y)) + y)  # residual fused into the 1x1 conv
        a = F.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
        b = F.avg_pool2d(self.wide(y), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        z = torch.cat([a, b], dim=1) * 0.5 - 0.25
        z = F.adaptive_avg_pool2d(z, (3, 4))
        return self.head(torch.relu(self.fc(z.flatten(1))))


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return _EveryKernel().eval()


@pytest.mark.parametrize("threads", [1, 2])
def test_every_kernel_matches_eager_on_new_inputs(
    model: torch.nn.Module, threads: int, outputs_close
) -> None:
    x = torch.randn(2, 3, 23, 29)
    strat = TilesStrategy(pathweave.capture(model, x), threads=threads, work_per_tile=2e4)
    assert strat.graph.num_tiles > strat.graph.num_layers  # layers really are cut into several tiles
    for seed in range(3):
        x = torch.randn(2, 3, 23, 29, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = model(x)
        outputs_close(strat(x), want, rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_workers_change_between_runs_and_two_models_run_at_once(
    model: torch.nn.Module, outputs_close
) -> None:
    x = torch.randn(2, 3, 23, 29)
    with torch.no_grad():
        want = model(x)
    captured = pathweave.capture(model, x)
    default = pathweave.optimize(model, x, strategy="tiles")  # the one-line API, default tiling
    assert isinstance(default, TilesStrategy)
    outputs_close(default(x), want, rtol=1e-4, atol_scale=1e-5)
    a = TilesStrategy(captured, threads=1, work_per_tile=2e4)
    b = TilesStrategy(captured, threads=2, work_per_tile=5e4)
    for n in (2, 3, 1):
        a.set_workers(n)
        outputs_close(a(x), want, rtol=1e-4, atol_scale=1e-5)
    results: dict[str, torch.Tensor] = {}

    def run(name: str, strat: TilesStrategy) -> None:
        for _ in range(20):
            results[name] = strat(x)

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("a", "b"):
        outputs_close(results[name], want, rtol=1e-4, atol_scale=1e-5)
    a.close()
    b.close()


@pytest.mark.parametrize("name", ["resnet50", "googlenet", "squeezenet1_0"])
def test_zoo_cnns_match_eager(name: str, zoo_cache, outputs_close) -> None:
    strat = TilesStrategy(zoo_cache.captured(name), threads=2)
    for seed in range(2):
        x = torch.randn(zoo_cache.inputs(name)[0].shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = zoo_cache.model(name)(x)
        outputs_close(strat(x), want, rtol=1e-3, atol_scale=1e-4)
    strat.close()


def test_layers_without_a_kernel_are_listed() -> None:
    class NoKernels(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log_softmax(torch.addcdiv(self.fc(x), x, x.abs() + 1), dim=-1)

    with pytest.raises(UnsupportedError, match="no native tile kernel") as err:
        TilesStrategy(pathweave.capture(NoKernels().eval(), torch.randn(4, 8)))
    assert {"addcdiv", "log_softmax"} <= set(err.value.ops)


def test_no_stale_im2col_across_inferences(outputs_close) -> None:
    """One 3x3 convolution in one tile on one worker: its im2col is the worker's last and first, so a
    cache not keyed by inference would hand the next call the last call's input."""
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).eval()
    strat = TilesStrategy(pathweave.capture(conv, torch.randn(1, 4, 6, 6)), threads=1, tiles_per_layer=1)
    for seed in range(3):
        x = torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), conv(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


class _Pool(torch.nn.Module):
    def __init__(self, kind: str, **kw: object) -> None:
        super().__init__()
        self.kind, self.kw = kind, kw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = F.max_pool2d if self.kind == "max" else F.avg_pool2d
        return pool(torch.relu(x) - 0.5, **self.kw)  # relu: the pool reads a layer's buffer


POOLS = [
    ("max", dict(kernel_size=3, stride=2, padding=1)),  # ResNet's stem
    ("max", dict(kernel_size=3, stride=1, padding=1)),  # GoogLeNet's inception branches: whole planes
    ("max", dict(kernel_size=5, stride=1, padding=2)),
    ("avg", dict(kernel_size=3, stride=1, padding=1)),  # Inception-v3's, one divisor
    ("max", dict(kernel_size=3, stride=2, ceil_mode=True)),  # GoogLeNet's
    ("max", dict(kernel_size=2, stride=2, ceil_mode=True)),  # GoogLeNet's last
    ("max", dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True)),
    ("max", dict(kernel_size=3, stride=2, padding=1, dilation=2)),  # not separable: the general loop
    ("avg", dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)),
    ("avg", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg", dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), divisor_override=5)),
    ("avg", dict(kernel_size=5, stride=3, padding=2, ceil_mode=True, count_include_pad=False)),
    ("max", dict(kernel_size=(5, 3), stride=1, padding=(2, 1))),  # the plane loop's 3-wide edge columns
    ("avg", dict(kernel_size=3, stride=1, padding=1, divisor_override=4)),
]


@pytest.mark.parametrize(("kind", "kw"), POOLS)
@pytest.mark.parametrize("width", [5, 17, 4200])  # 4200: wider than the separable path's row buffer
def test_pooling_matches_eager(kind: str, kw: dict, width: int, outputs_close) -> None:
    model = _Pool(kind, **kw).eval()
    height = 11 if width < 100 else 3
    x = torch.randn(2, 3, height, width)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=2e3)
    for seed in range(2):
        x = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(seed))
        outputs_close(strat(x), model(x), rtol=1e-5, atol_scale=1e-6)
    if kind == "max":  # a NaN anywhere in a window is that window's max, as in torch
        x[0, 1, 1, 3] = float("nan")
        x[0, 2, 2, 0] = x[1, 0, 1, width - 1] = float("nan")  # edge columns (3x3 windows: two taps)
        got, want = strat(x), model(x)
        assert torch.equal(got.isnan(), want.isnan()) and bool(want.isnan().any())
    strat.close()


class _WeightInput(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(torch.relu(x), w, padding=1)  # the weight is an input: never packed at build time


def test_a_weight_given_as_input_is_read_at_run_time(outputs_close) -> None:
    x, w = torch.randn(1, 8, 9, 9), torch.randn(16, 8, 3, 3)
    strat = TilesStrategy(pathweave.capture(_WeightInput(), x, w), threads=2)
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        x, w = torch.randn(1, 8, 9, 9, generator=g), torch.randn(16, 8, 3, 3, generator=g)
        outputs_close(strat(x, w), _WeightInput()(x, w), rtol=1e-4, atol_scale=1e-5)
    strat.close()


def _matches_eager(
    model: torch.nn.Module, shape: tuple[int, ...], work: float, outputs_close, seeds: int = 2
) -> None:
    """The tiles strategy of ``model`` (2 engines) against eager on ``seeds`` new inputs."""
    strat = TilesStrategy(pathweave.capture(model, torch.randn(shape)), threads=2, work_per_tile=work)
    for seed in range(seeds):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


class _LooseNorms(torch.nn.Module):
    """Batch norms that cannot fold into a convolution: after a concat (DenseNet; the copy applies it and
    the ReLU), without affine (then ReLU), and on a 2-D input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 5, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.plain = torch.nn.BatchNorm2d(8, affine=False)
        self.bn1d = torch.nn.BatchNorm1d(8)
        for norm in (self.bn, self.plain, self.bn1d):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(torch.cat([self.conv(x), x], dim=1)))  # one op: cat, batch norm, ReLU
        y = torch.relu(self.plain(y)) * 2.0  # batch norm and ReLU in one op
        return self.bn1d(F.adaptive_avg_pool2d(y, 1).flatten(1))


class _CatNorm(torch.nn.Module):
    """A concatenation along ``dim`` read only by a batch norm, then ``act``: one op (the copy applies
    both); 2-D inputs take BatchNorm1d."""

    def __init__(self, dim: int, act: str, rank: int) -> None:
        super().__init__()
        self.dim, self.act = dim, act
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1) if rank == 4 else torch.nn.Linear(4, 4)
        channels = 8 if dim == 1 else 4
        self.bn = torch.nn.BatchNorm2d(channels) if rank == 4 else torch.nn.BatchNorm1d(channels)
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(torch.cat([self.conv(x), x], dim=self.dim))
        return {"relu": torch.relu, "gelu": F.gelu, "none": lambda t: t}[self.act](y)


@pytest.mark.parametrize(("dim", "act", "shape"), [
    (1, "relu", (2, 4, 7, 9)), (0, "gelu", (2, 4, 7, 9)), (2, "none", (1, 4, 5, 6)),
    (3, "relu", (2, 4, 5, 6)), (1, "relu", (3, 4)), (0, "none", (3, 4)),
])  # fmt: skip
def test_concatenation_with_batch_norm(dim: int, act: str, shape: tuple, outputs_close) -> None:
    torch.manual_seed(dim)
    model = _CatNorm(dim, act, len(shape)).eval()
    strat = TilesStrategy(pathweave.capture(model, torch.randn(shape)), threads=2, tiles_per_layer=3)
    try:
        assert "cat_batch_norm_act" in [str(n) for n in strat.graph.layer_ops]
        for seed in range(2):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                outputs_close(strat(x), model(x), rtol=1e-5, atol_scale=1e-6)
    finally:
        strat.close()


def test_batch_norms_not_after_a_convolution(outputs_close) -> None:
    torch.manual_seed(0)
    _matches_eager(_LooseNorms().eval(), (2, 3, 11, 13), 2e4, outputs_close)


class _Shifted(torch.nn.Module):
    """NASNet's tricks: pad then slice (pooling and a residual read a strided view), padding with a value
    and cropping (negative pads)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        shifted = F.pad(y, (0, 1, 0, 1))[:, :, 1:, 1:]  # a view with rows W + 1 apart
        a = F.avg_pool2d(shifted, 3, stride=2, padding=1, count_include_pad=False)
        b = F.max_pool2d(shifted, 2)
        c = self.conv(y) + shifted  # the residual is strided: not fused, a separate add
        d = F.pad(c, (2, -1, -1, 3), value=0.5)
        return torch.cat([a.flatten(1), b.flatten(1), d.flatten(1)], dim=1)


def test_padding_and_strided_inputs(outputs_close) -> None:
    torch.manual_seed(0)
    _matches_eager(_Shifted().eval(), (2, 4, 9, 11), 2e3, outputs_close)


class _Depthwise(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6)  # depthwise, stride 1
        self.b = torch.nn.Conv2d(6, 12, 5, stride=2, padding=2, groups=6)  # multiplier 2, stride 2
        self.c = torch.nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=12, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x)) + x  # the residual goes to the epilogue
        return self.c(torch.relu(self.b(y)))


def test_depthwise_convolutions(outputs_close) -> None:
    torch.manual_seed(0)
    _matches_eager(_Depthwise().eval(), (2, 6, 13, 17), 2e3, outputs_close)


class _Reduce(torch.nn.Module):
    """DeepFM's ops: stack of embeddings, sums over one and two dims (keepdim both ways), sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.fc(x)  # [2, 7, 5]
        s = torch.stack([y, y * 2.0, torch.relu(y)], dim=1)  # [2, 3, 7, 5]
        t = torch.stack([y[:, 0], y[:, 1]], dim=2)  # strided inputs, new last-but-one dim
        a = s.sum(dim=[1, 3])
        b = s.sum(dim=2, keepdim=True)
        c = torch.sigmoid(t.sum(dim=-1))
        return a, b, c


def test_stack_sum_and_sigmoid(outputs_close) -> None:
    torch.manual_seed(0)
    _matches_eager(_Reduce().eval(), (2, 7, 6), 200, outputs_close)


class _NarrowMaps(torch.nn.Module):
    """Convolutions over 14x14 and 7x7 maps with k >= 256: the transposed micro-kernel's layers (3x3
    over 14x14 on a padded copy, over 7x7 after an im2col, and 1x1 on the input as it lies with a
    residual)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.b = torch.nn.Conv2d(64, 48, 3, stride=2, padding=1)
        self.c = torch.nn.Conv2d(48, 256, 1)
        self.d = torch.nn.Conv2d(256, 256, 1)
        self.e = torch.nn.Conv2d(256, 40, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        return self.e(torch.relu(self.d(y) + y))


class _PaddedMaps(torch.nn.Module):
    """The transposed micro-kernel without im2col, k >= 256: stride-1 windows over maps >= 28 wide on a
    zero-padded copy of the input (3x3 and 5x5, no padding, a residual, an odd width, several row tiles),
    a stride-2 window on a padded copy, one without padding and a 1x1 one on their inputs as they lie."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.b = torch.nn.Conv2d(64, 40, 5, padding=2)
        self.c = torch.nn.Conv2d(40, 48, 3)
        self.d = torch.nn.Conv2d(48, 48, 3, padding=1)
        self.e = torch.nn.Conv2d(48, 64, 3, stride=2, padding=1)
        self.g = torch.nn.Conv2d(64, 256, 1)  # k = 64: the row-vector kernels
        self.f = torch.nn.Conv2d(256, 32, 3, stride=2)
        self.h = torch.nn.Conv2d(256, 32, 1, stride=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        z = torch.relu(self.d(y) + y)
        u = torch.relu(self.g(self.e(z)))
        return z, self.f(u), self.h(u)


class _SevenByOne(torch.nn.Module):
    """Inception-v3's factorised 7x7: the 7x1 window (no column padding) on the padded path at width 17,
    the 1x7 one (padding 3 of 17 columns) "narrow", on an im2col (289 positions)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(48, 64, (7, 1), padding=(3, 0))
        self.b = torch.nn.Conv2d(64, 64, (1, 7), padding=(0, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize(("model", "shape", "layouts", "row_tiles", "tiles"), [
    (_NarrowMaps, (1, 32, 14, 14), {"narrow": 2, "padded": 2}, 1, None),  # d, e; a, b; c: k = 48
    (_PaddedMaps, (1, 32, 30, 33), {"padded": 7}, 3, None),
    (_SevenByOne, (1, 48, 17, 17), {"padded": 1, "narrow": 1}, 1, None),
    # tiles asked for: channel tiles start inside the 16-row panels; two images
    (_NarrowMaps, (2, 32, 14, 14), {"narrow": 2, "padded": 2}, 1, 300),
    (_PaddedMaps, (2, 32, 30, 33), {"padded": 7}, 3, 300),
])  # fmt: skip
def test_transposed_kernel_layers_on_every_instruction_set(
    model: type, shape: tuple, layouts: dict, row_tiles: int, tiles: int | None, outputs_close, monkeypatch
) -> None:
    from pathweave.tiles import blocked, conv_layout
    from pathweave.tiles import runtime as tile_runtime
    from pathweave.tiles.abi import PACKS, S_WPACK_T

    monkeypatch.setattr(conv_layout, "PADDED_WIDTH_PER_PAD", 14)  # a 3x3 window over 7x7 on "narrow" (im2col)
    monkeypatch.setattr(blocked, "BLOCKED_ISAS", ())  # 1x1 layers on the transposed kernel, not tile_gemm_b.c
    monkeypatch.setattr(blocked, "WINDOW_ISAS", ())  # windows too (test_blocked.py tests that kernel)
    torch.manual_seed(0)
    net = model().eval()
    # winograd_min_channels=10**9: their 3x3 layers, not Winograd's
    strat = TilesStrategy(pathweave.capture(net, torch.randn(shape)), threads=2, work_per_tile=2e5,
                          tiles_per_layer=tiles, winograd_min_channels=10**9)  # fmt: skip
    kinds = strat.program.layers[:, S_WPACK_T].tolist()
    if tiles:
        g = strat.graph
        assert any(int(lo) % 16 for lo in g.tile_lo[:, 1])  # some channel tile starts inside a panel
    assert {k: kinds.count(PACKS[k]) for k in layouts} == layouts
    assert len(strat.graph.grid(0)[2]) > row_tiles  # the first layer's row tiles
    chosen = tile_runtime.gemm_isa()
    try:
        for isa in tile_runtime.runnable_gemm_isas():  # the weights stay packed; each level its own kernels
            tile_runtime.use_gemm_isa(isa)
            x = torch.randn(shape, generator=torch.Generator().manual_seed(len(isa)))
            with torch.no_grad():
                outputs_close(strat(x), net(x), rtol=1e-4, atol_scale=1e-5)
    finally:
        tile_runtime.use_gemm_isa(chosen)
        strat.close()


def test_few_output_channels_keep_the_packed_kernels(outputs_close, monkeypatch) -> None:  # noqa: ANN001
    from pathweave.tiles import blocked
    from pathweave.tiles.abi import S_WPACK, S_WPACK_T

    monkeypatch.setattr(blocked, "BLOCKED_ISAS", ())  # the row-vector kernel's panels, not tile_gemm_b.c

    model = torch.nn.Sequential(torch.nn.Conv2d(64, 12, 3, padding=1), torch.nn.Conv2d(12, 256, 1),
                                torch.nn.Conv2d(256, 8, 1)).eval()  # fmt: skip
    x = torch.randn(1, 64, 28, 28)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2)
    rows = strat.program.layers
    assert (rows[:, S_WPACK] != 0).all() and not rows[:, S_WPACK_T].any()  # panels of 8, not OpenBLAS
    with torch.no_grad():
        outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_a_failing_tile_names_its_node() -> None:
    """An embedding id out of range fails in the native kernel: the error names the embedding node, and
    the next call with valid ids is right."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4).eval()
    fn = pathweave.optimize(emb, torch.tensor([[1, 2]]), strategy="tiles")
    with pytest.raises(ExecutionError, match="embedding") as info:
        fn(torch.tensor([[3, 11]]))
    assert info.value.node == "embedding"
    ids = torch.tensor([[3, 9]])
    torch.testing.assert_close(fn(ids), emb(ids).detach())


class _TransposedView(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).transpose(1, 2).contiguous().view(x.shape[0], -1).relu()


@pytest.mark.parametrize("strategy", ["tiles", "auto"])
def test_view_after_contiguous_copy_runs(strategy: str) -> None:
    """A ``view`` that needs the ``contiguous`` copy before it (multi-head attention's) raised torch's
    RuntimeError out of ``optimize`` (found by a hostile review)."""
    torch.manual_seed(0)
    model, x = _TransposedView().eval(), torch.randn(2, 4, 8)
    torch.testing.assert_close(pathweave.optimize(model, x, strategy=strategy)(x), model(x).detach())


def test_inputs_with_neg_bit_or_other_layouts() -> None:
    model, x = torch.nn.Linear(4, 3).eval(), torch.randn(2, 4)
    fn = pathweave.optimize(model, x, strategy="tiles")
    torch.testing.assert_close(fn(torch._neg_view(-x)), model(x).detach())
    for bad in (x.to_sparse(), x.to_mkldnn()):
        with pytest.raises(pathweave.InputError, match="layout"):
            fn(bad)


class _RepeatedRelus(torch.nn.Module):
    """A NASNet cell's habit: every branch applies its own relu (and pad and pool) to the same input."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, k, padding=k // 2, groups=g)
                                         for k, g in ((3, 8), (5, 8), (1, 1)))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pools = [
            F.avg_pool2d(F.pad(torch.relu(x), (1, 1, 1, 1)), 3, 1, count_include_pad=False) for _ in range(2)
        ]
        return sum((conv(torch.relu(x)) for conv in self.convs), pools[0] + pools[1])


@pytest.mark.parametrize("shape", [(1, 8, 1, 1), (1, 8, 17, 33), (2, 8, 3, 17)])
def test_repeated_branches_run_once_and_match_eager(shape: tuple[int, ...], outputs_close) -> None:
    model = _RepeatedRelus().eval()
    x = torch.randn(shape)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=2e3)
    ops = [str(op) for op in strat.graph.layer_ops]
    assert ops.count("relu") == 1 and ops.count("avg_pool2d") == 1, ops
    for seed in range(2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        x[0, 1, 0, 0] = float("nan")
        got, want = strat(x), model(x)
        assert torch.equal(got.isnan(), want.isnan())
        outputs_close(got.nan_to_num(), want.nan_to_num(), rtol=1e-4, atol_scale=1e-5)
    strat.close()
