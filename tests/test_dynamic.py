"""optimize(..., dynamic=...): one plan per shape, ranges enforced, safe from many threads."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

import pathweave
from pathweave.dynamic import DynamicStrategy, parse_dynamic
from pathweave.errors import ClosedError, InputError


class Tagger(torch.nn.Module):
    """Token ids (batch, seq) and a mask (batch, seq) -> per-token scores: both dims vary in serving."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(40, 16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        return self.out(h) * mask.unsqueeze(-1)


def _inputs(b: int, s: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 40, (b, s), generator=g), (torch.rand(b, s, generator=g) > 0.2).float()


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Tagger().eval()


@pytest.fixture
def fast(model: torch.nn.Module):
    fn = pathweave.optimize(model, *_inputs(1, 8), strategy="sequential",
                            dynamic={"batch": (1, 4), "seq": (1, 32)})  # fmt: skip
    yield fn
    fn.close()


@pytest.mark.parametrize("b, s", [(1, 8), (1, 1), (3, 17), (4, 32), (2, 5)])
def test_each_shape_in_range_matches_eager(
    fast: DynamicStrategy, model: torch.nn.Module, b: int, s: int
) -> None:
    x = _inputs(b, s, seed=b * 100 + s)
    with torch.no_grad():
        torch.testing.assert_close(fast(*x), model(*x), rtol=1e-4, atol=1e-5)


def test_a_new_shape_is_logged_and_planned_once(
    fast: DynamicStrategy, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pathweave"), torch.no_grad():
        fast(*_inputs(2, 9))
        fast(*_inputs(2, 9, seed=1))
    assert [r.getMessage() for r in caplog.records if "new shape" in r.getMessage()] == [
        "Tagger: new shape batch=2, seq=9, planning sequential"
    ]
    assert fast.plans == 2


@pytest.mark.parametrize(
    "x, match",
    [
        (_inputs(5, 8), "batch=5 is outside its range 1..4"),
        (_inputs(1, 33), "seq=33 is outside its range 1..32"),
        ((_inputs(1, 8)[0], _inputs(1, 9)[1]), "'seq' has sizes \\[8, 9\\]"),
        ((_inputs(1, 8)[0].int(), _inputs(1, 8)[1]), "torch.int32"),
    ],
)
def test_off_range_or_mismatched_inputs_name_the_dim(fast: DynamicStrategy, x: tuple, match: str) -> None:
    with pytest.raises(InputError, match=match):
        fast(*x)


def test_fixed_dims_stay_fixed(model: torch.nn.Module) -> None:
    fast = pathweave.optimize(model, *_inputs(1, 8), strategy="sequential", dynamic={"batch": (1, 4)})
    with pytest.raises(InputError, match="dim 1 is 9; it is fixed at 8"):
        fast(*_inputs(1, 9))
    fast.close()


def test_named_places_and_bad_declarations() -> None:
    leaves = [torch.zeros(2, 3), torch.zeros(3)]
    (dim,) = parse_dynamic({"tokens": (1, 9, {0: -1, 1: 0})}, leaves)
    assert dim.places == ((0, 1), (1, 0))
    cases = [({"tokens": (1, 9)}, "say where it is"), ({"batch": (0, 4)}, "empty or below 1"),
             ({"batch": (1, 4), "b2": (1, 4, {0: 0})}, "both 'batch' and 'b2'"),
             ({"x": (1, 4, {5: 0})}, "input 5 has no dim 0"),
             ({"batch": 4}, "give \\(lo, hi\\)")]  # fmt: skip
    for bad, match in cases:
        with pytest.raises(InputError, match=match):
            parse_dynamic(bad, leaves)


def test_bounded_cache_evicts_and_replans(model: torch.nn.Module) -> None:
    def build(args: tuple, kw: dict, strategy: str | None, options: dict | None):
        return pathweave.optimize(model, *args, strategy="sequential")

    x = _inputs(1, 4)
    fast = DynamicStrategy(build, x, {}, parse_dynamic({"seq": (1, 16)}, list(x)), max_plans=2)
    with torch.no_grad():
        for s in (5, 6, 7, 4, 5):
            y = _inputs(1, s, seed=s)
            torch.testing.assert_close(fast(*y), model(*y), rtol=1e-4, atol=1e-5)
            assert fast.plans <= 2
    fast.close()
    with pytest.raises(ClosedError):
        fast(*x)


def test_many_threads_many_shapes(model: torch.nn.Module) -> None:
    fast = pathweave.optimize(model, *_inputs(1, 8), strategy="sequential", dynamic={"seq": (1, 32)})
    wrong: list[str] = []
    keys = [(t, i) for t in range(4) for i in range(6)]
    calls = {(t, i): _inputs(1, 1 + (t * 7 + i * 5) % 32, seed=t * 10 + i) for t, i in keys}
    with torch.no_grad():  # eager before: a capture in one thread disturbs eager modules in others (torch)
        refs = {k: model(*x) for k, x in calls.items()}

    def worker(t: int) -> None:
        for i in range(6):
            with torch.no_grad():
                if not torch.allclose(fast(*calls[t, i]), refs[t, i], rtol=1e-4, atol=1e-5):
                    wrong.append(f"thread {t} call {i}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    fast.close()
    assert wrong == []


def test_captured_graphs_cannot_be_dynamic(model: torch.nn.Module) -> None:
    captured = pathweave.capture(model, *_inputs(1, 8))
    with pytest.raises(InputError, match="fixed shapes"):
        pathweave.optimize(captured, dynamic={"batch": (1, 4)})


class _Stub(pathweave.strategy.Strategy):
    """A plan whose recipe says what auto chose (or the strategy asked for) at its shape."""

    def __init__(self, model: torch.nn.Module, args: tuple, strategy: str, auto: bool) -> None:
        self.captured = pathweave.capture(model, *args)
        self.strategy = strategy
        self.recipe = {"strategy": strategy, "options": {}, "auto": auto}
        self.auto_times_ms = {strategy: 1.0} if auto else {}
        self.guard = pathweave.strategy.CallGuard("stub", exclusive=False)

    def run_flat(self, flat: list[torch.Tensor]) -> tuple:
        return tuple(self.captured.gm(*flat))


def test_auto_chooses_again_per_size_class(model: torch.nn.Module, caplog: pytest.LogCaptureFixture) -> None:
    """Auto (stubbed: 'lanes' at batch >= 4, else 'tiles') runs again once per size class met (batch 1;
    2; 3-5; 6-8 from batch 1), each other shape builds its class's choice without timing."""
    calls: list[tuple[int, str | None]] = []

    def build(args: tuple, kw: dict, strategy: str | None, options: dict | None) -> _Stub:
        batch = args[0].shape[0]
        calls.append((batch, strategy))
        chosen = strategy or ("lanes" if batch >= 4 else "tiles")
        return _Stub(model, args, chosen, auto=strategy is None)

    dims = parse_dynamic({"batch": (1, 8)}, list(_inputs(1, 8)))
    fast = DynamicStrategy(build, _inputs(1, 8), {}, dims)
    try:
        with caplog.at_level(logging.INFO, logger="pathweave"), torch.no_grad():
            for b in (1, 2, 3, 4, 8, 7, 5, 6):
                x = _inputs(b, 8, seed=b)
                torch.testing.assert_close(fast(*x), model(*x), rtol=1e-4, atol=1e-5)
    finally:
        fast.close()
    assert calls == [(1, None), (2, None), (3, None), (4, "tiles"), (8, None), (7, "lanes"), (5, "tiles"),
                     (6, "lanes")]  # fmt: skip
    assert sum("auto chose" in r.getMessage() for r in caplog.records) == 3
    assert fast.choices[(3,)][0] == "lanes"


def test_a_fixed_strategy_is_never_chosen_again(model: torch.nn.Module) -> None:
    fast = pathweave.optimize(model, *_inputs(1, 8), strategy="sequential", dynamic={"batch": (1, 8)})
    try:
        with torch.no_grad():
            fast(*_inputs(8, 8))
        assert list(fast.choices) == [()] and fast.plans == 2
    finally:
        fast.close()
