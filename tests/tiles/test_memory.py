"""Activation buffers by liveness: the arena is smaller than one buffer per layer, outputs are never
reused, every overwrite waits for the reads of the old value (checked by ``verify`` on the tile graph,
which fails when the added edges are taken away), and models run through reused memory match eager."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.errors import InputError, PlanError, UnsupportedError
from pathweave.tiles import strategy as tiles_strategy
from pathweave.tiles.abi import S_NAUX
from pathweave.tiles.memory import concat_slots, plan_buffers
from pathweave.tiles.program import output_layers
from pathweave.tiles.strategy import TilesStrategy


class _Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c = torch.nn.Conv2d(16, 16, 1)
        self.d = torch.nn.Conv2d(32, 16, 3, stride=2, padding=1)
        self.e = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.a(x))
        z = torch.relu(self.b(y)) * 0.5
        w = torch.cat([self.c(z) + y, z], dim=1)
        v = torch.relu(self.e(torch.relu(self.d(w))))
        v = torch.relu(self.e(v)) + v
        return self.fc(F.adaptive_avg_pool2d(v, 1).flatten(1)), w  # w: an early output, never reused


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Branches().eval()


@pytest.mark.parametrize("distance", [1, 3])
def test_reused_memory_matches_eager(model: torch.nn.Module, distance: int, outputs_close) -> None:
    x = torch.randn(2, 3, 19, 23)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=3e4, buffer_distance=distance)
    plan = strat.buffers
    assert plan is not None and plan.arena_floats < plan.separate_floats
    separate = TilesStrategy(strat.captured, threads=2, work_per_tile=3e4, buffer_distance=None, check=False)
    plan.verify(separate.graph, output_layers(strat.gm, separate.graph))
    for seed in range(20):  # many runs on two engines: a missing edge would show as a wrong result
        x = torch.randn(2, 3, 19, 23, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close(), separate.close()


def test_verify_catches_an_overwrite_without_its_edges(model: torch.nn.Module) -> None:
    x = torch.randn(1, 3, 19, 23)
    strat = TilesStrategy(pathweave.capture(model, x), threads=1, work_per_tile=3e4, buffer_distance=None)
    keep = output_layers(strat.gm, strat.graph)
    plan = plan_buffers(strat.graph, keep, distance=1)
    assert plan.added_edges > 0
    plan.verify(strat.graph, keep)
    with pytest.raises(PlanError, match="without waiting"):
        replace(plan, graph=strat.graph).verify(strat.graph, keep)  # the same memory, no added edges
    outputs = sorted(keep)
    assert all(
        not (
            plan.offsets[o] < plan.offsets[b] + plan.sizes[b]
            and plan.offsets[b] < plan.offsets[o] + plan.sizes[o]
        )
        for o in outputs
        for b in range(o + 1, strat.graph.num_layers)
    )  # no later layer takes an output's memory
    with pytest.raises(PlanError, match="still read"):
        replace(plan, offsets=plan.offsets * 0).verify(strat.graph, keep)  # everything on top of everything
    strat.close()


def test_inplace_proposals_that_do_not_hold_are_dropped(model: torch.nn.Module) -> None:
    """Over a layer still read later, over a layer from a concatenation's slot: dropped; a layer out of
    range: refused; a plan that claims one anyway: refused by verify."""
    x = torch.randn(1, 3, 19, 23)
    strat = TilesStrategy(pathweave.capture(model, x), threads=1, work_per_tile=3e4, buffer_distance=None)
    graph, keep = strat.graph, output_layers(strat.gm, strat.graph)
    names = [str(n) for n in graph.layer_names]
    slots = concat_slots(strat.gm, graph)
    in_slot = next(iter(slots))  # c(z) + y, written into the concatenation, y its residual
    plan = plan_buffers(graph, keep, 1, slots, inplace={1: 0, in_slot: 0})  # 0 (y) is read by both
    assert plan.inplace == {} and names[in_slot] != names[1]
    plan.verify()
    with pytest.raises(InputError, match="in-place proposal"):
        plan_buffers(graph, keep, 1, slots, inplace={graph.num_layers: 0})
    with pytest.raises(PlanError, match="cannot be written over"):
        replace(plan, inplace={1: 0}).verify()
    strat.close()


class _Concats(torch.nn.Module):
    """Concatenations the planner writes in place and ones it must copy: nested, a branch read by two
    concatenations and by a later layer, the graph's input in a slot, and the same layer twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 5, 1)
        self.c = torch.nn.Conv2d(8, 6, 3, padding=1)
        self.d = torch.nn.Conv2d(13, 7, 1)
        self.e = torch.nn.Conv2d(26, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = torch.relu(self.a(x)), self.b(x)
        inner = torch.cat([a, b], 1)  # 13 channels: a and b written in place
        c = self.c(a)
        outer = torch.cat([inner, torch.relu(self.d(inner)), c], 1)  # 26: inner nested in outer's slot
        y = self.e(outer) + torch.relu(self.e(outer))
        # b and c already placed, x an input, c twice: copies; read after outer's last reader, so outer's
        # block (holding b and c) must live as long as they are read
        again = torch.cat([b, c, x, c], 1)
        return y, torch.relu(again) * 2.0


def _cat_records(strat: TilesStrategy) -> list[int]:
    layers = [i for i, op in enumerate(strat.graph.layer_ops) if op == "cat"]
    return [int(strat.program.layers[i, S_NAUX]) for i in layers]


def _close_with_nan(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    for g, w in zip(got, want, strict=True):
        scale = w[w.isfinite()].abs().max().item()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)


def test_concatenations_written_in_place() -> None:
    torch.manual_seed(0)
    model = _Concats().eval()
    x = torch.randn(1, 3, 11, 13)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=2e4, buffer_distance=1)
    plan = strat.buffers
    assert plan is not None and len(plan.slots) == 5  # a, b in inner; inner, relu(d), c in outer
    assert _cat_records(strat) == [0, 0, 4]  # the third copies all four of its inputs
    plan.verify()
    with pytest.raises(PlanError, match="still read"):
        replace(plan, slots={}).verify()  # the same memory, the sharing not declared
    for seed in range(20):  # two engines, memory reused at distance 1: a missing edge shows as a wrong value
        x = torch.randn(1, 3, 11, 13, generator=torch.Generator().manual_seed(seed))
        x[0, seed % 3, seed % 11, seed % 13] = (float("nan"), float("inf"), -float("inf"))[seed % 3]
        with torch.no_grad():
            _close_with_nan(strat(x), model(x))
    strat.close()


def test_concatenations_copied_where_a_slot_is_not_contiguous(outputs_close) -> None:
    torch.manual_seed(0)
    model = _Concats().eval()
    x = torch.randn(2, 3, 11, 13)  # batch 2: a channel slot is two runs, so every input is copied
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=2e4, buffer_distance=1)
    assert strat.buffers is not None and not strat.buffers.slots
    assert _cat_records(strat) == [2, 3, 4]
    with torch.no_grad():
        outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_verify_catches_a_layer_outside_its_slot() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 11, 13)
    strat = TilesStrategy(pathweave.capture(_Concats().eval(), x), threads=1, work_per_tile=2e4)
    plan = strat.buffers
    assert plan is not None and plan.slots
    layer = next(iter(plan.slots))
    offsets = plan.offsets.copy()
    offsets[layer] += 16
    with pytest.raises(PlanError, match="not inside its slot"):
        replace(plan, offsets=offsets).verify()
    strat.close()


class _BoolThenFloat(torch.nn.Module):
    """A bool layer (the comparison) whose float block a later float layer takes at distance 1."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.where(x > 0, x, x * 0.5)
        return w, torch.tanh(x) * 2.0 + 1.0


def test_a_bool_layers_bytes_are_ordered_before_reuse() -> None:
    """A bool layer writes one byte per value at the start of its float block: the planner must order a
    later layer's tiles after the bool tiles that write those bytes (it once compared element indices,
    so tiles of the later layer over the first quarter of the block raced the comparison's last tiles)."""
    model = _BoolThenFloat().eval()
    x = torch.randn(1, 32, 5, 16, generator=torch.Generator().manual_seed(0))
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=500, buffer_distance=1)
    plan = strat.buffers
    assert plan is not None and 1 in plan.itemsizes.tolist()
    plan.verify()
    keep = output_layers(strat.gm, plan.source)
    blind = plan_buffers(plan.source, keep, distance=1, slots=plan.slots)  # every element 4 bytes
    with pytest.raises(PlanError, match="without waiting"):
        replace(blind, itemsizes=plan.itemsizes).verify()
    for seed in range(20):
        x = torch.randn(1, 32, 5, 16, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            for got, want in zip(strat(x), model(x), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    strat.close()


class _CatOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 6, 1)
        self.c = torch.nn.Conv2d(10, 5, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = torch.relu(self.a(x)), self.b(x)
        both = torch.cat([a, b], 1)
        return both, a, torch.relu(self.c(both)) + 1.0  # the block holds two outputs: never reused


def test_a_concatenation_and_its_slot_layers_as_outputs(outputs_close) -> None:
    torch.manual_seed(0)
    model = _CatOut().eval()
    x = torch.randn(1, 3, 9, 7)
    strat = TilesStrategy(pathweave.capture(model, x), threads=2, work_per_tile=500, buffer_distance=1)
    plan = strat.buffers
    assert plan is not None and len(plan.slots) == 2 and _cat_records(strat) == [0]
    for seed in range(10):
        x = torch.randn(1, 3, 9, 7, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            outputs_close(strat(x), model(x), rtol=1e-4, atol_scale=1e-5)
    strat.close()


def test_a_layer_at_the_wrong_slot_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that put a layer at another input's slot would make the concatenation copy over it: the
    binder refuses the layer instead of running that copy."""

    def swapped(gm: torch.fx.GraphModule, graph: object) -> dict[int, tuple[int, int]]:
        slots = concat_slots(gm, graph)  # type: ignore[arg-type]
        (a, (cat, _)), (b, (_, at_b)) = list(slots.items())[:2]
        return {a: (cat, at_b)}  # a at b's slot; b copied there too

    monkeypatch.setattr(tiles_strategy, "concat_slots", swapped)
    x = torch.randn(1, 3, 9, 7)
    with pytest.raises(UnsupportedError, match="copies another input"):
        TilesStrategy(pathweave.capture(_CatOut().eval(), x), threads=1, buffer_distance=1)
