"""Range maps against brute force: for each op, on small odd-sized inputs, the tile pairs derived by
interval arithmetic equal those found by perturbing every input element (tile_brute). Three tilings per
case: every position its own tile (element exactness, per dim) and two uneven random grids.

Where a map is a bounding box by design, the case's expectation says so and the test asserts a superset:
``s`` (a view that merges and splits dims, nearest downsampling, an embedding's table rows and where's x
and y, which depend on values known at run time) or ``f`` (flatten/unflatten: exact when tiles cover
whole trailing rows, as on the fine grid; an uneven grid need not)."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import pytest
import torch
import torch.fx

from pathweave.errors import UnsupportedError
from pathweave.tiles import ranges as tr
from pathweave.tiles.maps import shape
from pathweave.tiles.nodes import plan_nodes
from tests.tiles.brute import (
    brute_pairs,
    dependency_mask,
    derived_pairs,
    fine_grid,
    tile_labels,
    uneven_grid,
)

aten = torch.ops.aten
EXACT, SUPERSET, FINE_ONLY = "exact", "superset", "fine_only"


def _t(*dims: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(dims, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + sum(dims)))


def _mask(*dims: int) -> torch.Tensor:
    return torch.rand(dims, generator=torch.Generator().manual_seed(7)) > 0.5


def op_graph(target: Any, args: tuple, pick: int | None = None):
    """One ATen op whose tensor arguments (also inside a list) are placeholders; ``pick`` adds a getitem.
    Returns the graph, the node whose maps are tested, the tensors and the eager function of them."""
    graph = torch.fx.Graph()
    tensors: list[torch.Tensor] = []

    def to_node(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            ph = graph.placeholder(f"x{len(tensors)}")
            ph.meta["val"] = v
            tensors.append(v)
            return ph
        if isinstance(v, list) and any(isinstance(e, torch.Tensor) for e in v):
            return [to_node(e) for e in v]
        return v

    node = graph.call_function(target, tuple(to_node(a) for a in args))

    def fn(*xs: torch.Tensor) -> torch.Tensor:
        it = iter(xs)
        swap = lambda v: next(it) if isinstance(v, torch.Tensor) else v  # noqa: E731
        real = [[swap(e) for e in a] if isinstance(a, list) else swap(a) for a in args]
        out = target(*real)
        if isinstance(out, (tuple, list)):
            return out[pick if pick is not None else 0]
        return out

    node.meta["val"] = target(*args)
    if pick is not None:
        item = graph.call_function(operator.getitem, (node, pick))
        item.meta["val"] = node.meta["val"][pick]
        node = item
    graph.output(node)
    return torch.fx.GraphModule(torch.nn.Module(), graph), node, tensors, fn


def check(target: Any, args: tuple, which: int, expect: str, pick: int | None = None) -> None:
    gm, node, tensors, fn = op_graph(target, args, pick)
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"][which]
    maps = [m for src, m in plan_nodes(gm)[node].sources if src is ph]
    assert len(maps) == 1, f"{len(maps)} maps for input {which}"
    mask = dependency_mask(fn, tensors, which)
    assert mask.any(), "a case without dependencies tests nothing"
    out_shape, in_shape = shape(node), tuple(tensors[which].shape)
    grids = [
        ("fine", fine_grid(out_shape), fine_grid(in_shape)),
        ("uneven", uneven_grid(out_shape, 1), uneven_grid(in_shape, 2)),
        ("uneven", uneven_grid(out_shape, 3), fine_grid(in_shape)),
    ]
    for kind, out_grid, in_grid in grids:
        brute = brute_pairs(mask, tile_labels(out_grid, out_shape), tile_labels(in_grid, in_shape))
        derived = derived_pairs(maps[0], out_grid, in_grid)
        assert brute <= derived, f"{kind} grid: missed dependencies {sorted(brute - derived)[:5]}"
        if expect == EXACT or (expect == FINE_ONLY and kind == "fine"):
            assert derived == brute, f"{kind} grid: extra dependencies {sorted(derived - brute)[:5]}"


CASES: list[tuple] = [
    # convolutions: stride, padding, dilation, groups, gaps (1x1 stride 2, stride > kernel), padding only
    ("conv_s2_p1", aten.conv2d.default, lambda: (_t(1, 4, 9, 11), _t(6, 4, 3, 3), _t(6), [2, 2], [1, 1]),
     "0 1 2"),
    ("conv_dil2_groups2", aten.conv2d.default,
     lambda: (_t(2, 4, 10, 9), _t(6, 2, 3, 3), None, [1, 1], [2, 2], [2, 2], 2), "0"),
    ("conv_1x1_s2", aten.conv2d.default, lambda: (_t(1, 3, 9, 10), _t(5, 3, 1, 1), None, [2, 2]), "0"),
    ("conv_s3_k2", aten.conv2d.default, lambda: (_t(1, 2, 11, 10), _t(3, 2, 2, 2), None, [3, 3], [1, 1]),
     "0"),
    ("conv_rect_mixed", aten.conv2d.default,
     lambda: (_t(1, 2, 8, 9), _t(4, 2, 3, 2), None, [1, 2], [0, 1], [2, 1]), "0"),
    ("conv_border_reads_padding", aten.conv2d.default,
     lambda: (_t(1, 2, 5, 5), _t(2, 2, 3, 3), None, [1, 1], [3, 3]), "0"),
    ("conv_same_even_kernel", aten.conv2d.padding,
     lambda: (_t(1, 2, 7, 8), _t(3, 2, 4, 3), None, [1, 1], "same", [2, 1]), "0"),
    ("conv1d", aten.conv1d.default, lambda: (_t(1, 3, 13), _t(4, 3, 3), None, [2], [1]), "0"),
    ("depthwise", aten.conv2d.default,
     lambda: (_t(1, 4, 7, 7), _t(4, 1, 3, 3), None, [2, 2], [1, 1], [1, 1], 4), "0"),
    ("convolution", aten.convolution.default,
     lambda: (_t(1, 3, 7, 6), _t(4, 3, 3, 3), _t(4), [2, 2], [1, 1], [1, 1], False, [0, 0], 1), "0 2"),
    # pooling: ceil_mode, dilation, default stride
    ("maxpool_k3s2p1_ceil", aten.max_pool2d.default,
     lambda: (_t(1, 3, 10, 9), [3, 3], [2, 2], [1, 1], [1, 1], True), "0"),
    ("maxpool_dilated", aten.max_pool2d.default, lambda: (_t(1, 2, 11, 10), [2, 3], [1, 2], [1, 1], [2, 2]),
     "0"),
    ("maxpool_default_stride_ceil", aten.max_pool2d.default,
     lambda: (_t(1, 2, 7, 9), [2, 2], [], [0, 0], [1, 1], True), "0"),
    ("maxpool_with_indices", aten.max_pool2d_with_indices.default, lambda: (_t(1, 2, 8, 7), [3, 3], [2, 2]),
     "0"),
    ("avgpool_ceil_nopad_count", aten.avg_pool2d.default,
     lambda: (_t(1, 3, 10, 9), [3, 3], [2, 2], [1, 1], True, False), "0"),
    ("avgpool_k2", aten.avg_pool2d.default, lambda: (_t(1, 2, 7, 8), [2, 2]), "0"),
    ("adaptive_4x3", aten.adaptive_avg_pool2d.default, lambda: (_t(1, 3, 10, 7), [4, 3]), "0"),
    ("adaptive_1x1", aten.adaptive_avg_pool2d.default, lambda: (_t(1, 3, 5, 7), [1, 1]), "0"),
    ("adaptive_grow", aten.adaptive_avg_pool2d.default, lambda: (_t(1, 2, 3, 5), [7, 7]), "0"),
    ("upsample_size", aten.upsample_nearest2d.vec, lambda: (_t(1, 2, 5, 4), [12, 9], None), "0"),
    ("upsample_scale2", aten.upsample_nearest2d.vec, lambda: (_t(1, 2, 5, 3), None, [2.0, 2.0]), "0"),
    ("upsample_shrink", aten.upsample_nearest2d.vec, lambda: (_t(1, 2, 9, 8), [4, 3], None), "0s"),
    # normalisations and element-wise ops
    ("bn_no_training", aten._native_batch_norm_legit_no_training.default,
     lambda: (_t(1, 4, 5, 7), _t(4), _t(4), _t(4), _t(4).abs() + 1, 0.1, 1e-5), "0 1"),
    ("bn_training", aten.batch_norm.default,
     lambda: (_t(2, 3, 4, 5), _t(3), _t(3), _t(3), _t(3).abs() + 1, True, 0.1, 1e-5, False), "0"),
    ("bn_eval", aten.batch_norm.default,
     lambda: (_t(2, 3, 4, 5), _t(3), _t(3), _t(3), _t(3).abs() + 1, False, 0.1, 1e-5, False), "0 3"),
    ("relu", aten.relu.default, lambda: (_t(2, 3, 5),), "0"),
    ("gelu", aten.gelu.default, lambda: (_t(3, 5),), "0"),
    ("add_broadcast", aten.add.Tensor, lambda: (_t(2, 1, 5, 1), _t(3, 1, 6)), "0 1"),
    ("mul_scalar", aten.mul.Tensor, lambda: (_t(2, 3, 4), 2.5), "0"),
    ("to_other", aten.to.other, lambda: (_t(3, 4), torch.zeros(5, dtype=torch.float32)), "0"),
    ("div_broadcast", aten.div.Tensor, lambda: (_t(3, 4, 5), _t(4, 1)), "0 1"),
    # where reads a value of x or y only where the condition picks it; which one is known at run time
    ("where", aten.where.self, lambda: (_mask(1, 5, 1), _t(3, 5, 4), _t(4)), "0 1s 2s"),
    ("where_scalar_other", aten.where.ScalarOther, lambda: (_mask(3, 4), _t(3, 4), -1.0), "0 1s"),
    ("layer_norm_last", aten.layer_norm.default, lambda: (_t(2, 5, 6), [6], _t(6), _t(6)), "0 1"),
    ("layer_norm_last2", aten.layer_norm.default, lambda: (_t(2, 5, 6), [5, 6]), "0"),
    ("native_layer_norm", aten.native_layer_norm.default, lambda: (_t(3, 4), [4], None, None, 1e-5), "0"),
    ("softmax_last", aten.softmax.int, lambda: (_t(2, 3, 5), -1), "0"),
    ("softmax_mid", aten.softmax.int, lambda: (_t(2, 3, 5), 1), "0"),
    ("log_softmax", aten._log_softmax.default, lambda: (_t(4, 3, 2), 0, False), "0"),
    ("sum_keepdim", aten.sum.dim_IntList, lambda: (_t(2, 3, 5), [1], True), "0"),
    ("sum_drop_two", aten.sum.dim_IntList, lambda: (_t(2, 3, 5), [0, 2]), "0"),
    ("mean_last", aten.mean.dim, lambda: (_t(3, 4, 5), [-1]), "0"),
    ("amax_outer_keepdim", aten.amax.default, lambda: (_t(2, 3, 5), [0, 2], True), "0"),
    ("var_middle", aten.var.correction, lambda: (_t(3, 4, 5), [1]), "0"),
    ("group_norm", aten.group_norm.default, lambda: (_t(2, 6, 3, 4), 3, _t(6), _t(6)), "0 1 2"),
    ("group_norm_3d", aten.group_norm.default, lambda: (_t(1, 4, 5), 2), "0"),
    ("native_group_norm", aten.native_group_norm.default,
     lambda: (_t(2, 6, 3, 2), None, None, 2, 6, 6, 3, 1e-5), "0"),
    # a tile whose rolled range wraps around reads the whole dim
    ("roll_two_dims", aten.roll.default, lambda: (_t(2, 5, 6, 3), [1, -2], [1, 2]), "0f"),
    ("roll_same_dim_twice", aten.roll.default, lambda: (_t(4, 7), [3, 6], [1, -1]), "0f"),
    ("roll_flattened", aten.roll.default, lambda: (_t(3, 4), [2]), "0s"),
    # contractions
    ("linear_3d", aten.linear.default, lambda: (_t(2, 5, 7), _t(6, 7), _t(6)), "0 1 2"),
    ("linear_2d", aten.linear.default, lambda: (_t(3, 7), _t(4, 7)), "0"),
    ("matmul_4d", aten.matmul.default, lambda: (_t(1, 3, 5, 4), _t(1, 3, 4, 6)), "0 1"),
    ("matmul_broadcast", aten.matmul.default, lambda: (_t(2, 1, 5, 4), _t(3, 4, 6)), "0 1"),
    ("matmul_1d_left", aten.matmul.default, lambda: (_t(4), _t(2, 4, 3)), "0 1"),
    ("matmul_1d_right", aten.matmul.default, lambda: (_t(2, 5, 4), _t(4)), "0 1"),
    ("addmm", aten.addmm.default, lambda: (_t(3), _t(5, 4), _t(4, 3)), "0 1 2"),
    ("bmm", aten.bmm.default, lambda: (_t(2, 5, 4), _t(2, 4, 3)), "0 1"),
    ("embedding", aten.embedding.default,
     lambda: (_t(10, 6), torch.randint(0, 10, (2, 5), generator=torch.Generator().manual_seed(3))), "1 0s"),
    # joining and padding
    ("cat_channels", aten.cat.default, lambda: ([_t(1, 2, 5, 3), _t(1, 3, 5, 3), _t(1, 4, 5, 3)], 1),
     "0 1 2"),
    ("cat_last", aten.cat.default, lambda: ([_t(2, 3), _t(2, 5)], -1), "0 1"),
    ("stack", aten.stack.default, lambda: ([_t(3, 4), _t(3, 4), _t(3, 4)], 1), "0 2"),
    ("pad", aten.pad.default, lambda: (_t(1, 2, 5, 4), [1, 2, 0, 1]), "0"),
    ("pad_crop", aten.constant_pad_nd.default, lambda: (_t(1, 2, 5, 4), [-1, 2, 1, -2], 0.0), "0"),
    # views
    ("slice_step2", aten.slice.Tensor, lambda: (_t(2, 3, 11), 2, 1, 10, 2), "0"),
    ("slice_negative_start", aten.slice.Tensor, lambda: (_t(5, 4), 0, -3), "0"),
    ("select", aten.select.int, lambda: (_t(3, 4, 5), 1, -2), "0"),
    ("narrow", aten.narrow.default, lambda: (_t(3, 7), 1, 2, 4), "0"),
    ("transpose", aten.transpose.int, lambda: (_t(2, 3, 4), 0, -1), "0"),
    ("permute", aten.permute.default, lambda: (_t(2, 3, 4, 5), [2, 0, 3, 1]), "0"),
    ("t", aten.t.default, lambda: (_t(3, 5),), "0"),
    ("unsqueeze", aten.unsqueeze.default, lambda: (_t(3, 4), 1), "0"),
    ("squeeze_dims", aten.squeeze.dims, lambda: (_t(3, 1, 4, 1), [1, 3]), "0"),
    ("squeeze_all", aten.squeeze.default, lambda: (_t(1, 3, 1),), "0"),
    ("expand", aten.expand.default, lambda: (_t(3, 1, 4), [2, 3, 5, 4]), "0"),
    ("clone", aten.clone.default, lambda: (_t(3, 4),), "0"),
    ("dropout_eval", aten.dropout.default, lambda: (_t(3, 4), 0.5, False), "0"),
    ("flatten_trailing", aten.flatten.using_ints, lambda: (_t(2, 3, 4, 5), 2), "0f"),
    ("view_keeps_dims", aten.view.default, lambda: (_t(2, 3, 4), [2, 3, 4]), "0"),
    ("view_merge_and_split", aten.view.default, lambda: (_t(2, 6, 5), [3, 4, 5]), "0s"),
    ("unflatten", aten.unflatten.int, lambda: (_t(2, 12, 3), 1, [3, 4]), "0f"),
    ("split_last_piece", aten.split.Tensor, lambda: (_t(3, 10), 4, 1), "0", 2),
    ("split_with_sizes", aten.split_with_sizes.default, lambda: (_t(7, 3), [2, 4, 1]), "0", 1),
    ("chunk", aten.chunk.default, lambda: (_t(3, 10), 3, 1), "0", 1),
    ("unbind", aten.unbind.int, lambda: (_t(3, 4, 2), 1), "0", 2),
]  # fmt: skip


def _params() -> list:
    """One test per checked input: ``"0 1s 2f"`` = input 0 exact, 1 a superset, 2 exact on the fine grid."""
    kinds = {"": EXACT, "s": SUPERSET, "f": FINE_ONLY}
    params = []
    for name, target, make, checks, *pick in CASES:
        for check_ in checks.split():
            which, expect = int(check_[0]), kinds[check_[1:]]
            test_id = f"{name}-in{which}"
            params.append(pytest.param(target, make, which, expect, pick[0] if pick else None, id=test_id))
    return params


@pytest.mark.parametrize(("target", "make", "which", "expect", "pick"), _params())
def test_range_map_matches_brute_force(target, make, which, expect, pick) -> None:
    check(target, make(), which, expect, pick)


def test_max_pool_propagates_nan() -> None:
    """The brute force relies on it: a NaN in a max pool's window makes that output NaN."""
    x = torch.zeros(1, 1, 3, 3, dtype=torch.float64)
    x[0, 0, 1, 1] = float("nan")
    assert torch.isnan(aten.max_pool2d.default(x, [3, 3], [1, 1], [1, 1])).all()


def _window_members(w: tr.Window) -> set[int]:
    pts = {o * w.stride + j * w.dilation + w.offset for o in range(w.lo, w.hi) for j in range(w.taps)}
    return {p for p in pts if w.clip_lo <= p < w.clip_hi}


def test_window_hits_and_contiguity_match_enumeration() -> None:
    for lo, n, stride, taps, dilation, offset in itertools.product(
        range(2), range(1, 4), range(1, 4), range(1, 4), range(1, 4), (-2, 0)
    ):
        w = tr.Window(lo, lo + n, stride, taps, dilation, offset, 0, 9)
        members = _window_members(w)
        for a, b in itertools.combinations(range(-1, 11), 2):
            assert w.hits(a, b) == any(a <= p < b for p in members), (w, a, b)
        made = tr.window(lo, lo + n, stride, taps, dilation, offset, 0, 9)
        if not members:
            assert made is None
        elif isinstance(made, tr.Window):  # a window may have no gaps left after clipping
            assert _window_members(made) == members
        else:
            assert set(range(*made)) == members, (w, made)


def test_affine_and_clip_keep_the_positions() -> None:
    w = tr.Window(1, 4, 3, 2, 1, -1, 0, 20)
    moved = tr.affine(w, 2, 5)
    assert _window_members(moved) == {2 * p + 5 for p in _window_members(w)}
    clipped = tr.clip(w, 3, 9)
    assert _window_members(clipped) == {p for p in _window_members(w) if 3 <= p < 9}
    assert tr.clip(w, 4, 5) is None  # 4 falls in a gap
    assert tr.affine((2, 5), 3, 1) == tr.Window(2, 5, 3, 1, 1, 1, 7, 14)
    assert tr.clip((2, 5), 4, 9) == (4, 5)


def test_reshape_groups() -> None:
    assert tr.reshape_groups((1, 2048, 1, 1), (1, 2048)) == [([0], [0]), ([1, 2, 3], [1])]
    assert tr.reshape_groups((2, 6, 5), (3, 4, 5)) == [([0, 1], [0, 1]), ([2], [2])]
    assert tr.reshape_groups((1, 16, 768), (1, 16, 12, 64)) == [([0], [0]), ([1], [1]), ([2], [2, 3])]


def test_flatten_of_whole_rows_is_exact() -> None:
    """A range over whole trailing rows of a flatten maps to those rows and the trailing dims whole."""
    assert tr.reshape_input(((0, 1), (15, 45)), (1, 4, 3, 5), (1, 60)) == ((0, 1), (1, 3), (0, 3), (0, 5))
    assert tr.reshape_input(((0, 1), (16, 19)), (1, 4, 3, 5), (1, 60)) == ((0, 1), (1, 2), (0, 1), (1, 4))


def test_unsupported_ops_are_all_named_at_once() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.zeros(3, 4)
    a = graph.call_function(aten.cumsum.default, (x, 1))
    a.meta["val"] = torch.zeros(3, 4)
    b = graph.call_function(aten.relu.default, (a,))
    b.meta["val"] = torch.zeros(3, 4)
    c = graph.call_function(aten.sort.default, (b,))
    c.meta["val"] = (torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.long))
    graph.output((c,))
    with pytest.raises(UnsupportedError) as info:
        plan_nodes(torch.fx.GraphModule(torch.nn.Module(), graph))
    assert info.value.ops == ["cumsum", "sort"]
    assert a.format_node() in str(info.value) and c.format_node() in str(info.value)
