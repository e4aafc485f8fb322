"""native/tile_reduce.c's kernels (bind_reduce.py) against eager PyTorch: reductions over first, middle,
last and several dims with keepdim both ways, group norm over any groups, roll along any dims; odd sizes
(1, 3, 17, 33), strided and channels_last inputs, tiles cut anywhere, NaN and +-inf as eager gives them."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import pytest
import torch

import pathweave
from pathweave.tiles.mixed import build_tiles
from pathweave.tiles.ops import TILE_OPS
from pathweave.tiles.strategy import TilesStrategy

Fn = Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]]
#: a float32 sum in another order: a few ulps of the largest partial sum
RTOL, ATOL = 1e-5, 1e-5


class _Apply(torch.nn.Module):
    def __init__(self, fn: Fn, layout: str = "contiguous") -> None:
        super().__init__()
        self.fn, self.layout = fn, layout

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.layout == "transposed":  # the kernel reads x through its strides
            x = x.transpose(0, -1)
        return self.fn(x * 1.0)


def _input(shape: tuple[int, ...], seed: int = 0, specials: tuple[float, ...] = ()) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    flat = x.view(-1)
    for i, v in enumerate(specials):  # spread over the tensor, so that several slices get one
        flat[(i * 7919) % flat.numel()] = v
    return x


def _check(fn: Fn, x: torch.Tensor, exact: bool = False, layout: str = "contiguous", **options) -> None:
    """``fn`` run whole as tiles (a layer left to ATen would warn) matches eager, NaN where eager's are."""
    model = _Apply(fn, layout).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # eager's var / std of one value (NaN, as the kernel gives) warns
        warnings.filterwarnings("ignore", message=".*degrees of freedom")
        strat = pathweave.optimize(model, x, strategy="tiles", options=options)
        assert isinstance(strat, TilesStrategy)
        got, want = strat(x), model(x)
    try:
        rtol, atol = (0.0, 0.0) if exact else (RTOL, ATOL)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    finally:
        strat.close()


def _reductions(op: Callable[..., torch.Tensor], nd: int) -> Fn:
    """``op`` over the first, a middle, the last, two and all dims, keepdim both ways, in one model."""
    dims = [0, nd // 2, -1, (0, nd - 1), tuple(range(nd))] if nd > 1 else [0, -1]
    return lambda x: tuple(op(x, d, keepdim=k) for d in dims for k in (False, True))


OPS: dict[str, tuple[Callable[..., torch.Tensor], bool]] = {  # op, exact
    "sum": (torch.sum, False),
    "mean": (torch.mean, False),
    "amax": (torch.amax, True),
    "amin": (torch.amin, True),
    "var": (lambda x, d, keepdim: torch.var(x, d, keepdim=keepdim), False),
    "var_correction_0": (lambda x, d, keepdim: torch.var(x, d, keepdim=keepdim, correction=0), False),
    "std": (lambda x, d, keepdim: torch.std(x, d, keepdim=keepdim), False),
    "std_correction_0": (lambda x, d, keepdim: torch.std(x, d, keepdim=keepdim, correction=0), False),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", [(1,), (3, 17), (2, 3, 33), (3, 1, 17, 5)])
def test_reductions_match_eager(name: str, shape: tuple[int, ...]) -> None:
    op, exact = OPS[name]
    _check(_reductions(op, len(shape)), _input(shape), exact)


@pytest.mark.parametrize("name", sorted(OPS))
def test_reductions_of_strided_and_channels_last_inputs(name: str) -> None:
    op, exact = OPS[name]
    _check(_reductions(op, 4), _input((33, 3, 1, 17)), exact, layout="transposed")
    _check(_reductions(op, 4), _input((1, 17, 3, 5)).to(memory_format=torch.channels_last), exact)


@pytest.mark.parametrize("name", sorted(OPS))
def test_reductions_propagate_nan_and_inf_as_eager(name: str) -> None:
    op, exact = OPS[name]
    x = _input((3, 17, 5), specials=(math.nan, math.inf, -math.inf, math.inf, -math.inf, math.nan))
    x[2, :, 4] = math.inf  # a whole slice of +inf: sum inf, var NaN
    x[1, 3, :] = -math.inf
    _check(_reductions(op, 3), x, exact)


def test_reductions_in_small_tiles() -> None:
    """One output value per tile: every tile reduces its slices whole (the column path over part of a row)."""
    fn = lambda x: (x.mean(1), x.amax(1, keepdim=True), x.var(0), x.sum((1, 3)))  # noqa: E731
    _check(fn, _input((3, 17, 5, 33)), tiles_per_layer=40)


def test_a_sum_with_a_dtype_stays_in_aten() -> None:
    model = _Apply(lambda x: x.sum(1, dtype=torch.float64).float()).eval()
    with pytest.warns(UserWarning, match="sum"):
        fn = pathweave.optimize(model, _input((3, 17)), strategy="tiles")
    x = _input((3, 17), seed=1)
    torch.testing.assert_close(fn(x), model(x))


GROUP_NORMS = [  # shape, groups, affine
    ((1, 3, 1, 1), 1, True),
    ((2, 3, 17, 5), 3, True),
    ((1, 6, 17, 33), 2, False),
    ((3, 6, 7), 3, True),  # (N, C, L)
    ((17, 6), 2, True),  # (N, C)
]


def _group_norm(shape: tuple[int, ...], groups: int, affine: bool) -> torch.nn.GroupNorm:
    torch.manual_seed(sum(shape) + groups)
    gn = torch.nn.GroupNorm(groups, shape[1], eps=1e-3, affine=affine)
    if affine:
        torch.nn.init.normal_(gn.weight)
        torch.nn.init.normal_(gn.bias)
    return gn


@pytest.mark.parametrize(("shape", "groups", "affine"), GROUP_NORMS)
def test_group_norm_matches_eager(shape: tuple[int, ...], groups: int, affine: bool) -> None:
    gn = _group_norm(shape, groups, affine)
    _check(gn, _input(shape))


def test_group_norm_of_channels_last_input_and_tiles_that_split_groups() -> None:
    gn = _group_norm((2, 6, 17, 5), 2, True)
    _check(gn, _input((2, 6, 17, 5)).to(memory_format=torch.channels_last))
    _check(gn, _input((2, 6, 17, 5)), tiles_per_layer=24)  # groups of 3 channels in pieces of 1


def test_group_norm_propagates_nan_and_inf_as_eager() -> None:
    gn = _group_norm((2, 6, 3, 5), 3, True)
    x = _input((2, 6, 3, 5))
    x[0, 0, 1, 2] = math.nan  # group 0 of image 0 all NaN
    x[1, 3, 0, 0] = math.inf  # group 1 of image 1 all NaN
    _check(gn, x)


ROLLS: dict[str, Fn] = {
    "one_dim": lambda x: torch.roll(x, 1, 0),
    "swin": lambda x: torch.roll(x, shifts=(-3, -3), dims=(1, 2)),
    "last_dim_back": lambda x: torch.roll(x, shifts=5, dims=-1),
    "larger_than_dim": lambda x: torch.roll(x, shifts=(40, -35), dims=(-1, 1)),
    "same_dim_twice": lambda x: torch.roll(x, shifts=(2, 5), dims=(2, 2)),
}


@pytest.mark.parametrize("name", sorted(ROLLS))
def test_roll_matches_eager_exactly(name: str) -> None:
    x = _input((3, 17, 5, 33), specials=(math.nan, math.inf, -math.inf))
    _check(ROLLS[name], x, exact=True)
    _check(ROLLS[name], _input((33, 5, 17, 3)), exact=True, layout="transposed")
    _check(ROLLS[name], x, exact=True, tiles_per_layer=37)  # pieces that wrap around


def test_roll_of_the_flattened_tensor_stays_in_aten() -> None:
    model = _Apply(lambda x: torch.roll(x, 4)).eval()
    with pytest.warns(UserWarning, match="roll"):
        fn = pathweave.optimize(model, _input((3, 17)), strategy="tiles")
    x = _input((3, 17), seed=1)
    torch.testing.assert_close(fn(x), model(x))


# ---- in models: islands before and after -----------------------------------------------------------------


class _GroupNormBlock(torch.nn.Module):
    """A U-Net residual block: conv, GroupNorm, SiLU, conv, GroupNorm without affine, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 8, 3, padding=1)
        self.n1, self.n2 = torch.nn.GroupNorm(4, 16), torch.nn.GroupNorm(2, 8, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.n2(self.c2(torch.nn.functional.silu(self.n1(self.c1(x)))))


class _Attention(torch.nn.Module):
    """Squeeze-excitation (x.mean over positions) and CBAM's spatial gate (x.amax, x.mean over channels)
    between convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 8, 3, padding=1)
        self.fc1, self.fc2 = torch.nn.Conv2d(16, 4, 1), torch.nn.Conv2d(4, 16, 1)
        self.gate = torch.nn.Conv2d(2, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.c1(x))
        x = x * torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))
        pooled = torch.cat([x.amax(1, keepdim=True), x.mean(1, keepdim=True)], 1)
        return self.c2(x * torch.sigmoid(self.gate(pooled)))


class _ShiftedWindows(torch.nn.Module):
    """Swin's shifted windows: roll back, partition into windows, mix in each, merge, roll forward."""

    def __init__(self, channels: int = 16, window: int = 4) -> None:
        super().__init__()
        self.window, self.norm = window, torch.nn.LayerNorm(channels)
        self.mix = torch.nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        k, s = self.window, self.window // 2
        shifted = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
        win = shifted.view(b, h // k, k, w // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, k * k, c)
        win = self.mix(self.norm(win))
        out = win.view(b, h // k, w // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return x + torch.roll(out, shifts=(s, s), dims=(1, 2))


def _rms_model() -> torch.nn.Module:
    """linear, transformers' LlamaRMSNorm (to float32, pow 2, mean, add eps, rsqrt, mul, to, mul weight),
    linear."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    torch.manual_seed(0)
    norm = llama.LlamaRMSNorm(32, eps=1e-6)
    torch.nn.init.normal_(norm.weight)
    return torch.nn.Sequential(torch.nn.Linear(17, 32), norm, torch.nn.Linear(32, 17))


#: the rows these models needed and the tiles lacked before: None removes the row (no range map), a
#: name leaves its map without a kernel
BEFORE = {"group_norm": None, "mean": "graph only", "amax": "graph only", "roll": None}


def _island_count(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Islands of the row ``tiles`` (every one kept); 1 for a model run whole. Matches eager on two inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the coverage line of a model cut into islands
        strat = build_tiles(pathweave.capture(model.eval(), x), threads=2, min_island_flops=0)
    try:
        for seed in range(2):
            xs = x if seed == 0 else _input(tuple(x.shape), seed)
            with torch.no_grad():
                torch.testing.assert_close(strat(xs), model(xs), rtol=1e-4, atol=1e-4)
        return 1 if isinstance(strat, TilesStrategy) else len(strat.islands)
    finally:
        strat.close()


@pytest.mark.parametrize("name", ["group_norm", "rms_norm", "mean_amax", "shifted_windows"])
def test_models_run_in_fewer_islands(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model, x = {
        "group_norm": lambda: (_GroupNormBlock(), _input((1, 8, 17, 9))),
        "rms_norm": lambda: (_rms_model(), _input((3, 5, 17))),
        "mean_amax": lambda: (_Attention(), _input((1, 3, 17, 13))),
        "shifted_windows": lambda: (_ShiftedWindows(), _input((1, 8, 12, 16))),
    }[name]()
    after = _island_count(model, x)
    assert after == 1
    for op, before in BEFORE.items():
        if before is None:
            monkeypatch.delitem(TILE_OPS, op)
        else:
            monkeypatch.setitem(TILE_OPS, op, dataclasses.replace(TILE_OPS[op], bind=None))
    assert _island_count(model, x) > after


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


def test_a_small_llama_is_one_island_with_only_its_mask_arithmetic_outside() -> None:
    """Hidden 256, 2 layers, 4 heads, 2 kv heads: every RMSNorm runs in the tiles; what stays in ATen is
    the integer arithmetic that makes the causal mask."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128, use_cache=False,
    )  # fmt: skip
    model = _Logits(transformers.LlamaForCausalLM(config)).eval()
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the coverage line
        strat = build_tiles(pathweave.capture(model, ids), threads=2)
    try:
        cov = getattr(strat, "coverage", None)  # None: run whole
        if cov is not None:
            assert cov.islands == 1 and not {"mean", "pow", "rsqrt", "mul", "to"} & set(cov.outside), cov
        with torch.no_grad():
            torch.testing.assert_close(strat(ids), model(ids), rtol=1e-4, atol=1e-4)
    finally:
        strat.close()


# ---- comparisons and logic into bool -----------------------------------------------------------------------

COMPARES: dict[str, Fn] = {
    "eq_ne_tensor": lambda x: (x == x.roll(1, -1), x != x[..., :1]),
    "lt_le_gt_ge_number": lambda x: (x < 0.1, x <= -1.0, x > 0.1, x >= 3.0),
    "lt_broadcast": lambda x: torch.lt(x, x.mean(0)),
    "logic_of_floats": lambda x: (
        torch.logical_and(x, x - 1.0),
        torch.logical_or(torch.relu(x), x.roll(1, 0)),
        torch.logical_not(x),
    ),
    "logic_of_bools": lambda x: ((x > 0) & (x < 2), (x > 0) | (x == 0), (x > 0) ^ (x > 1), ~(x > 0)),
    "where_inside": lambda x: (
        torch.where((x > 0) & ~(x > 2), x, -x) + x.masked_fill(x.isnan() | (x < -1), 5.0)
    ),
}


@pytest.mark.parametrize("name", sorted(COMPARES))
def test_comparisons_write_bool_as_eager(name: str) -> None:
    """NaN compares false (ne true) and counts as true in the logic ops; -0 equals 0; +-inf order."""
    x = _input((3, 17, 33), specials=(math.nan, math.inf, -math.inf, 0.0, -0.0, 0.1, 1.0, 2.0, math.nan))
    _check(COMPARES[name], x, exact=True)
    _check(COMPARES[name], _input((33, 17, 3), specials=(math.nan, 0.0)), exact=True, layout="transposed")
    _check(COMPARES[name], _input((1,)), exact=True)


def test_a_comparison_of_int64_stays_outside_the_islands() -> None:
    """The islands leave a comparison of integers to ATen before any binder sees it (``TileOp.takes``)."""

    class _Positions(torch.nn.Module):
        def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            return torch.where((ids > 2).unsqueeze(-1), torch.relu(x), x * 2.0)

    model, x, ids = _Positions().eval(), _input((3, 5, 17)), torch.arange(15).reshape(3, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strat = build_tiles(pathweave.capture(model, x, ids), threads=2, min_island_flops=0)
    try:
        assert strat.coverage.outside == {"gt": 1}, strat.coverage
        assert not any("failed to build" in str(w.message) for w in caught)
        torch.testing.assert_close(strat(x, ids), model(x, ids))
    finally:
        strat.close()
