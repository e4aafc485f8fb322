"""The tile graph of whole captured models: tile dependencies between every pair of connected layers
equal the brute-force ones on two small hand-built networks (NaN injected into each producer element,
the views between it and the consumer and the consumer run eagerly); on zoo models the graph verifies,
round-trips through save/load, and joins exactly the layers the fx graph joins."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

import pathweave
from pathweave.errors import InputError, PlanError, UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.tiles.build import build_tile_graph
from pathweave.tiles.graph import TileGraph
from pathweave.tiles.grid import Grid, make_grid, max_tiles
from tests.tiles.brute import brute_pairs, tile_labels


class Tiny(nn.Module):
    """conv -> bn -> relu -> maxpool -> two branches -> cat -> add -> pool -> flatten -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)
        self.a = nn.Conv2d(8, 6, 1)
        self.b = nn.Conv2d(8, 6, 3, padding=2, dilation=2, groups=2)
        self.short = nn.Conv2d(8, 12, 1)
        self.fc = nn.Linear(12 * 3 * 3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        z = torch.cat([self.a(y), self.b(y)], 1) + self.short(y)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(z, 3), 1))


class TinyAttention(nn.Module):
    """One attention block as bert's graph has it: linear -> split -> unflatten -> transpose -> matmul
    -> div -> softmax -> matmul -> transpose -> flatten -> linear -> add -> layer_norm."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(12, 36)
        self.out = nn.Linear(12, 12)
        self.norm = nn.LayerNorm(12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.unflatten(-1, (3, 4)).transpose(1, 2) for t in self.qkv(x).split(12, -1))
        attn = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1)
        return self.norm(x + self.out((attn @ v).transpose(1, 2).flatten(2)))


def _random(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def _capture(model: nn.Module, shape: tuple[int, ...]) -> torch.fx.GraphModule:
    return capture(model.double().eval(), _random(shape)).gm


@pytest.fixture(scope="module")
def tiny() -> torch.fx.GraphModule:
    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():  # running statistics that are not the identity
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return _capture(model, (1, 3, 21, 19))


def fx_layer_edges(gm: torch.fx.GraphModule, layers: set[str]) -> set[tuple[str, str]]:
    """(producer, consumer) layers the fx graph joins, through any nodes that are not layers."""
    nodes = {n.name: n for n in gm.graph.nodes}
    memo: dict[str, set[str]] = {}

    def producers(node: torch.fx.Node) -> set[str]:
        if node.name in layers:
            return {node.name}
        if node.name not in memo:
            found: set[str] = set()
            if node.op == "call_function":
                for arg in node.all_input_nodes:
                    found |= producers(arg)
            memo[node.name] = found
        return memo[node.name]

    return {(p, c) for c in layers for a in nodes[c].all_input_nodes for p in producers(a)}


def _labels(g: TileGraph, layer: int) -> np.ndarray:
    """Each element's tile number (in the whole graph) under the layer's grid."""
    grid = Grid(tuple(tuple(int(v) for v in b) for b in g.grid(layer)))
    shape = [int(n) for n in g.layer_shapes[layer][: g.layer_ndim[layer]]]
    return tile_labels(grid, shape) + int(g.layer_tile_start[layer])


def _graph_pairs(g: TileGraph, producer: int, consumer: int) -> set[tuple[int, int]]:
    lo, hi = g.layer_tile_start[producer], g.layer_tile_start[producer + 1]
    return {
        (t, int(p))
        for t in range(g.layer_tile_start[consumer], g.layer_tile_start[consumer + 1])
        for p in g.parents(t)
        if lo <= p < hi
    }


def _first(value: object) -> torch.Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value  # type: ignore[return-value,index]


def _brute_layer_pairs(
    gm: torch.fx.GraphModule, env: dict, layers: set[str], producer: str, consumer: str
) -> np.ndarray:
    """Mask of consumer elements x producer elements: NaN one producer element, rerun the nodes between
    them that are not layers (the views) and the consumer, the others keep their recorded values."""
    order = list(gm.graph.nodes)
    names = [n.name for n in order]
    start, stop = names.index(producer), names.index(consumer)
    rerun = [n for n in order[start + 1 : stop] if n.op == "call_function" and n.name not in layers]
    rerun.append(order[stop])
    base = env[order[start]]
    x = _first(base)
    mask = np.zeros((_first(env[order[stop]]).numel(), x.numel()), dtype=bool)
    for i in range(x.numel()):
        y = x.clone()
        y.view(-1)[i] = float("nan")
        local = dict(env)
        local[order[start]] = (y, *base[1:]) if isinstance(base, (tuple, list)) else y
        for n in rerun:
            args = torch.fx.node.map_arg(n.args, local.__getitem__)
            kwargs = torch.fx.node.map_arg(n.kwargs, local.__getitem__)
            local[n] = n.target(*args, **kwargs)
        mask[:, i] = torch.isnan(_first(local[order[stop]])).reshape(-1).numpy()
    return mask


def _recorded_values(gm: torch.fx.GraphModule, x: torch.Tensor) -> dict:
    env: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node):
            env[n] = super().run_node(n)
            return env[n]

    Recorder(gm).run(x)
    return env


@pytest.mark.parametrize("network", ["cnn", "attention"])
def test_small_network_dependencies_equal_brute_force(tiny: torch.fx.GraphModule, network: str) -> None:
    torch.manual_seed(0)
    gm = tiny if network == "cnn" else _capture(TinyAttention(), (1, 7, 12))
    g = build_tile_graph(gm, tiles_per_layer=24)
    g.verify()
    layers = {str(n) for n in g.layer_names}
    index = {str(n): i for i, n in enumerate(g.layer_names)}
    edges = fx_layer_edges(gm, layers)
    assert g.layer_edges() == edges
    ops = {str(op) for op in g.layer_ops}
    want_ops = {"conv2d", "relu", "max_pool2d", "cat", "add", "adaptive_avg_pool2d", "linear"}
    assert want_ops <= ops if network == "cnn" else {"linear", "matmul", "softmax", "layer_norm"} <= ops
    x = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"]
    env = _recorded_values(gm, _random(tuple(x.shape)))
    for producer, consumer in sorted(edges):
        p, c = index[producer], index[consumer]
        mask = _brute_layer_pairs(gm, env, layers, producer, consumer)
        want = brute_pairs(mask, _labels(g, c), _labels(g, p))
        assert want, f"{producer} -> {consumer}: no dependency found by brute force"
        assert _graph_pairs(g, p, c) == want, f"{producer} -> {consumer}"


# between them: batch norm + getitem, cat, clone, views of attention, split, stack, select, sum, pad, slice
ZOO = ["resnet50", "squeezenet1_0", "bert_base", "gpt2", "deepfm", "nasnet_a_mobile"]


@pytest.mark.parametrize("name", ZOO)
def test_zoo_tile_graph(zoo_cache, name: str, tmp_path) -> None:
    gm = zoo_cache.captured(name).gm
    g = build_tile_graph(gm)
    split = build_tile_graph(gm, 8)  # small models take one tile a layer by default
    assert split.num_tiles > split.num_layers == g.num_layers
    for graph in (g, split):
        graph.verify()
        assert graph.layer_edges() == fx_layer_edges(gm, {str(n) for n in graph.layer_names})
    assert sum(g.tile_counts().values()) == g.num_tiles
    g.save(tmp_path / "tiles.npz")
    assert TileGraph.load(tmp_path / "tiles.npz") == g
    assert build_tile_graph(gm) == g  # deterministic
    assert f"{g.num_tiles} tiles" in g.summary()


def test_resnet50_full_size() -> None:
    lm = pathweave.load_model("resnet50")
    gm = capture(lm.model, *lm.inputs).gm
    g = build_tile_graph(gm)
    g.verify()
    assert g.num_layers == 174  # 53 conv, 53 bn, 49 relu, 16 add, max pool, avg pool, linear
    assert g.layer_edges() == fx_layer_edges(gm, {str(n) for n in g.layer_names})


def test_tile_counts_by_policy(tiny: torch.fx.GraphModule) -> None:
    default = build_tile_graph(tiny, work_per_tile=1e4, large_gemm_tiles=False).tile_counts()
    # element-wise ops and batch norm line up with their producer, which work alone would not do
    assert default["conv2d"] == default["batch_norm"] == default["relu"] > default["max_pool2d"] > 1
    assert set(build_tile_graph(tiny, 1).tile_counts().values()) == {1}
    counts = build_tile_graph(tiny, {"conv2d": 5}, work_per_tile=1e4, large_gemm_tiles=False).tile_counts()
    assert counts["conv2d"] == counts["relu"] == 5 and counts["add"] == default["add"]
    by_rank = build_tile_graph(tiny, lambda node: 3 if len(node.meta["val"].shape) == 4 else 1).tile_counts()
    assert by_rank["linear"] == 1 and by_rank["cat"] == 3
    with pytest.raises(InputError, match="not tiled layers"):
        build_tile_graph(tiny, {"getitem": 2})
    with pytest.raises(InputError, match="int >= 1"):
        build_tile_graph(tiny, lambda node: 0)


def _pieces(graph: TileGraph, name: str) -> set[tuple[int, ...]]:
    """The shapes of a layer's tiles (channels, rows, columns; features for a linear layer)."""
    i = [str(n) for n in graph.layer_names].index(name)
    lo, hi = graph.layer_tile_start[i], graph.layer_tile_start[i + 1]
    dims = int(graph.layer_ndim[i])
    return {tuple(int(v) for v in graph.tile_hi[t, 1:dims] - graph.tile_lo[t, 1:dims]) for t in range(lo, hi)}


def test_small_1x1_layers_split_rows_and_gemv_features() -> None:
    """Under the default policy a 1x1 layer on a 14x14 map of 96 channels (MobileNetV2's projection) is
    not one tile: its tiles span at least POINTWISE_MIN_COLUMNS positions (rows of 7), while a 5x5 layer of
    the same output keeps GEMM_MIN_COLUMNS (one piece of rows). A classifier at batch 1 counts the weight
    it reads (5 MB): its features are split into pieces of at least MATMUL_MIN_FEATURES; a small one is
    one tile."""
    from pathweave.tiles import build

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pw, self.k = nn.Conv2d(576, 96, 1), nn.Conv2d(576, 96, 5, padding=2)
            self.fc, self.small = nn.Linear(1280, 1000), nn.Linear(64, 32)

        def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return self.pw(x), self.k(x), self.fc(v), self.small(v[:, :64])

    gm = capture(Head().eval(), torch.randn(1, 576, 14, 14), torch.randn(1, 1280)).gm
    graph = build_tile_graph(gm)
    names = [str(n) for n in graph.layer_names]
    convs, linears = [n for n in names if n.startswith("conv2d")], [n for n in names if "linear" in n]
    assert len(convs) == len(linears) == 2
    assert _pieces(graph, convs[0]) == {(96, 7, 14)}
    assert _pieces(graph, convs[1]) == {(96, 14, 14)}
    fc = _pieces(graph, linears[0])
    assert len(fc) > 1 and all(f >= build.MATMUL_MIN_FEATURES for (f,) in fc), fc
    assert _pieces(graph, linears[1]) == {(32,)}


def test_large_norms_softmaxes_and_copies_take_two_tiles() -> None:
    """Under the default policy a layer norm, a softmax and a transposing copy of at least
    SHARED_MIN_ELEMENTS take 2 tiles (their work counted by bytes made them one); smaller ones stay one."""
    from pathweave.tiles import build

    class Attention(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(d)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y = self.norm(x)
            return torch.softmax(y @ y.transpose(1, 2), -1), y.transpose(1, 2).reshape(1, -1)

    for tokens, d, tiles in ((256, 128, 2), (32, 64, 1)):
        assert (tokens * d >= build.SHARED_MIN_ELEMENTS) == (tiles == 2)
        gm = capture(Attention(d).eval(), torch.randn(1, tokens, d)).gm
        counts = build_tile_graph(gm).tile_counts()
        norm = [n for n in counts if "layer_norm" in n]
        soft = [n for n in counts if "softmax" in n]
        copies = [n for n in counts if n.startswith(("reshape", "view", "transpose"))]
        assert len(norm) == len(soft) == len(copies) == 1, counts
        assert counts[norm[0]] == counts[soft[0]] == counts[copies[0]] == tiles, counts


def test_make_grid_aligns_inner_boundaries_where_it_can() -> None:
    assert make_grid((1, 512, 1, 1), 6).bounds[1] == (0, 85, 170, 256, 341, 426, 512)
    assert make_grid((1, 512, 1, 1), 6, align=(1, 8, 1, 1)).bounds[1] == (0, 88, 168, 256, 344, 424, 512)
    assert make_grid((1, 12, 1, 1), 3, align=(1, 8, 1, 1)).bounds[1] == (0, 4, 8, 12)  # 8 would empty a piece


def test_make_grid_splits_positions_first() -> None:
    assert make_grid((1, 64, 56, 56), 100).splits == (1, 2, 56, 1)
    assert make_grid((1, 64, 56, 56), 7).bounds[2] == (0, 8, 16, 24, 32, 40, 48, 56)
    assert make_grid((4, 8, 5, 5), 8).splits == (4, 1, 2, 1)
    assert make_grid((1, 16, 768), 40).splits == (1, 16, 2)
    assert make_grid((1, 2, 3, 4), 1000).splits == (1, 2, 3, 1) and max_tiles((1, 2, 3, 4)) == 6
    assert make_grid((), 5).count == 1
    g = Grid(((0, 2, 5, 9), (0, 4)))
    assert g.hits(((3, 6), (0, 4))) == [1, 2] and g.hits(((0, 1), (1, 2))) == [0]


def test_verify_catches_broken_graphs(tiny: torch.fx.GraphModule) -> None:
    g = build_tile_graph(tiny, tiles_per_layer=6)
    g.verify()
    later = g.parents_indices.copy()
    later[0] = g.num_tiles - 1
    broken = [
        replace(g, parents_indices=later),
        replace(g, children_indices=g.children_indices[::-1].copy()),
        replace(g, parents_indices=g.parents_indices.astype(np.int64)),
        replace(g, tile_hi=g.tile_hi + 1),
        replace(g, layer_tile_start=g.layer_tile_start[::-1].copy()),
    ]
    for bad in broken:
        with pytest.raises(PlanError):
            bad.verify()


def test_load_rejects_other_files(tmp_path) -> None:
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(InputError, match="not a saved TileGraph"):
        TileGraph.load(tmp_path / "other.npz")


def test_unsupported_graph_raises_before_building() -> None:
    class Sorts(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(torch.relu(x), 1) + torch.sort(x, 1).values

    gm = capture(Sorts(), torch.randn(2, 5)).gm
    with pytest.raises(UnsupportedError) as info:
        build_tile_graph(gm)
    assert info.value.ops == ["cumsum", "sort"]


def test_scalar_layers_and_five_dims() -> None:
    class Reduce(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).sum() * 2

    g = build_tile_graph(capture(Reduce(), torch.randn(3, 5)).gm, 3)
    g.verify()
    assert g.tile_counts() == {"relu": 3, "sum_1": 1, "mul": 1}
    assert list(g.parents(3)) == [0, 1, 2] and list(g.parents(4)) == [3]

    class FiveDims(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x.unsqueeze(0)).sum(0)

    with pytest.raises(UnsupportedError, match="at most 4 dims"):
        build_tile_graph(capture(FiveDims(), torch.randn(1, 2, 3, 4)).gm)
