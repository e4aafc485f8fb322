"""Co-execution (ASPEN Section 5): requests of two models and many requests of one model run together in
one native ready pool, from several threads; every future checked against eager PyTorch. Also the union
of tile graphs itself, errors into futures, and shutting down."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pathweave
from pathweave.errors import ExecutionError, InputError
from pathweave.tiles.abi import S_OP, S_OUT, S_W
from pathweave.tiles.coexec import CoExecutor
from pathweave.tiles.strategy import TilesStrategy
from pathweave.tiles.union import make_part, union

TIMEOUT = 60  # seconds a future may take before the test calls it a deadlock
RTOL, ATOL_SCALE = 1e-4, 1e-5


class _Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.body = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 6 * 6, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.stem(x)))
        y = torch.relu(self.body(y) + y)
        return self.fc(F.max_pool2d(y, 2).flatten(1))


class _Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 6, 1)
        self.b = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(10 * 2 * 2, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = F.avg_pool2d(self.a(x), 2)
        z = torch.cat([a, torch.relu(self.b(x))], dim=1)
        return self.fc(F.adaptive_avg_pool2d(z, 2).flatten(1)), a


SHAPES = {"residual": (2, 3, 12, 12), "branches": (1, 3, 10, 10)}


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"residual": _Residual().eval(), "branches": _Branches().eval()}


@pytest.fixture(scope="module")
def strategies(models) -> dict[str, TilesStrategy]:
    built = {
        name: TilesStrategy(pathweave.capture(m, torch.randn(SHAPES[name])), threads=1, work_per_tile=2e4)
        for name, m in models.items()
    }
    yield built
    for s in built.values():
        s.close()


def _input(name: str, seed: int) -> torch.Tensor:
    return torch.randn(SHAPES[name], generator=torch.Generator().manual_seed(seed))


def _check(future, model: torch.nn.Module, x: torch.Tensor, outputs_close) -> None:
    with torch.no_grad():
        want = model(x)
    outputs_close(future.result(timeout=TIMEOUT), want, rtol=RTOL, atol_scale=ATOL_SCALE)


def test_union_offsets_and_shares_weights(strategies) -> None:
    a, b = strategies["residual"], strategies["branches"]
    parts = [make_part(a.graph, a.new_program()), make_part(b.graph, b.new_program()),
             make_part(a.graph, a.new_program())]  # fmt: skip
    u = union(parts)
    ga, gb = a.graph, b.graph
    assert u.tile_start.tolist() == [
        0,
        ga.num_tiles,
        ga.num_tiles + gb.num_tiles,
        2 * ga.num_tiles + gb.num_tiles,
    ]
    p_ptr, p_idx, c_ptr, c_idx, ops, cols = u.graph
    assert len(p_ptr) == u.num_tiles + 1 and p_ptr[-1] == len(p_idx) == 2 * ga.num_edges + gb.num_edges
    # part 2 is part 0 again, shifted: the same edges, no edge between parts
    s = u.tile_start[2]
    np.testing.assert_array_equal(p_idx[p_ptr[s] :] - s, ga.parents_indices)
    np.testing.assert_array_equal(c_idx[c_ptr[s] : c_ptr[-1]] - s, ga.children_indices)
    child = np.repeat(np.arange(u.num_tiles), np.diff(p_ptr))
    part_of = np.searchsorted(u.tile_start, np.arange(u.num_tiles), side="right") - 1
    assert (p_idx < child).all() and (part_of[p_idx] == part_of[child]).all()
    # every tile has its own layer row; rows of one model's two instances share weights, not outputs
    assert u.tile_layer.max() == len(u.layers) - 1 == 2 * ga.num_layers + gb.num_layers - 1
    outs = [set(u.layers[u.layer_start[k] : u.layer_start[k + 1], S_OUT].tolist()) for k in range(3)]
    assert not (outs[0] & outs[1] or outs[0] & outs[2] or outs[1] & outs[2])  # an arena per instance
    rows0, rows2 = u.layers[: ga.num_layers], u.layers[u.layer_start[2] : u.layer_start[3]]
    np.testing.assert_array_equal(rows0[:, S_W], rows2[:, S_W])
    assert (rows0[:, S_W] != 0).any() and not (rows0[:, S_OUT] == rows2[:, S_OUT]).any()
    assert u.locate(int(u.tile_start[1])) == (1, str(gb.layer_names[0]))
    assert u.scratch_floats == max(a.program.scratch_floats, b.program.scratch_floats)


def test_two_models_from_several_threads(models, strategies, outputs_close) -> None:
    errors: list[BaseException] = []

    def client(seed: int) -> None:
        try:
            for i in range(4):
                name = ("residual", "branches")[(seed + i) % 2]
                x = _input(name, 100 * seed + i)
                _check(co.submit(strategies[name], x), models[name], x, outputs_close)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    with CoExecutor(workers=2, slots=3) as co:
        threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=TIMEOUT)
        assert not any(t.is_alive() for t in threads), "a client never got its result"
    assert not errors, errors[0]
    assert co.stats["requests"] == 16 and co.stats["runs"] <= 16


def test_many_requests_of_one_model_run_together(models, strategies, outputs_close) -> None:
    with CoExecutor(workers=2, slots=4) as co:
        for rnd in range(3):  # repeated runs reuse the cached union and the instances' buffers
            xs = [_input("residual", 10 * rnd + i) for i in range(6)]
            futures = co.submit_all([(strategies["residual"], (x,)) for x in xs])
            for f, x in zip(futures, xs, strict=True):
                _check(f, models["residual"], x, outputs_close)
        # queued together: 4 in the first run (the slots), 2 in the next
        assert co.stats["largest_run"] == 4 and co.stats["requests"] == 18
        # both models in one run, outputs kept apart
        xs = [_input("residual", 7), _input("branches", 8), _input("residual", 9)]
        names = ["residual", "branches", "residual"]
        futures = co.submit_all([(strategies[n], (x,)) for n, x in zip(names, xs, strict=True)])
        for f, n, x in zip(futures, names, xs, strict=True):
            _check(f, models[n], x, outputs_close)


def test_modules_and_bad_inputs(models, strategies, outputs_close) -> None:
    with CoExecutor(workers=1) as co:
        x = _input("branches", 1)
        _check(co.submit(models["branches"], x), models["branches"], x, outputs_close)
        y = _input("branches", 2)
        _check(co.submit(models["branches"], y), models["branches"], y, outputs_close)
        assert len(co._built) == 1  # the module became a tiles strategy once
        with pytest.raises(InputError, match="captured for"):
            co.submit(strategies["branches"], torch.randn(2, 3, 10, 10)).result(timeout=TIMEOUT)
        with pytest.raises(pathweave.PathweaveError):
            co.submit("no such model", x).result(timeout=TIMEOUT)
        _check(co.submit(strategies["branches"], x), models["branches"], x, outputs_close)


def test_a_failing_kernel_fails_its_run_not_the_executor(models, strategies, outputs_close) -> None:
    a, b = strategies["residual"], strategies["branches"]
    broken = TilesStrategy(a.captured, threads=1, work_per_tile=2e4, check=False)
    program = broken.new_program()
    program.layers[1, S_OP] = 99  # no such kernel
    broken.new_program = lambda: program
    with CoExecutor(workers=2) as co:
        bad, other = co.submit_all([(broken, (_input("residual", 0),)), (b, (_input("branches", 0),))])
        with pytest.raises(ExecutionError, match="tile kernel of layer") as err:
            bad.result(timeout=TIMEOUT)
        assert err.value.node == str(broken.graph.layer_names[1])
        with pytest.raises(ExecutionError, match="not computed"):
            other.result(timeout=TIMEOUT)
        x = _input("residual", 3)
        _check(co.submit(a, x), models["residual"], x, outputs_close)
    broken.close()


def test_close_drains_or_cancels_and_refuses_new_requests(models, strategies, outputs_close) -> None:
    s = strategies["residual"]
    co = CoExecutor(workers=2, slots=1)
    xs = [_input("residual", i) for i in range(3)]
    futures = co.submit_all([(s, (x,)) for x in xs])
    co.close()  # waits: the pending requests still run
    for f, x in zip(futures, xs, strict=True):
        _check(f, models["residual"], x, outputs_close)
    with pytest.raises(ExecutionError, match="closed"):
        co.submit(s, xs[0])
    co = CoExecutor(workers=1, slots=1)
    futures = co.submit_all([(s, (x,)) for x in xs * 4])
    co.close(cancel_pending=True)
    assert all(f.done() for f in futures)
    for f in futures:
        if f.cancelled():
            with pytest.raises(CancelledError):
                f.result()
        else:
            f.result(timeout=0)


def test_zoo_models_co_executed(zoo_cache, outputs_close) -> None:
    names = ("resnet50", "squeezenet1_0")
    strats = {n: TilesStrategy(zoo_cache.captured(n), threads=1) for n in names}
    with CoExecutor(workers=2, slots=2) as co:
        jobs = [(n, torch.randn(zoo_cache.inputs(n)[0].shape, generator=torch.Generator().manual_seed(i)))
                for i, n in enumerate(names * 2)]  # fmt: skip
        futures = co.submit_all([(strats[n], (x,)) for n, x in jobs])
        for f, (n, x) in zip(futures, jobs, strict=True):
            with torch.no_grad():
                want = zoo_cache.model(n)(x)
            outputs_close(f.result(timeout=TIMEOUT), want, rtol=1e-3, atol_scale=1e-4)
        assert co.stats["largest_run"] == 4
    for s in strats.values():
        s.close()


class _Tokens(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.softmax(self.emb(ids), dim=-1))


def test_int64_ids_keep_their_type(outputs_close) -> None:
    torch.manual_seed(0)
    model = _Tokens().eval()
    ids = [torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(s)) for s in range(4)]
    with CoExecutor(workers=2) as co:
        futures = co.submit_all([(model, (x,)) for x in ids])
        for x, f in zip(ids, futures, strict=True):
            with torch.no_grad():
                outputs_close(f.result(timeout=TIMEOUT), model(x), rtol=RTOL, atol_scale=ATOL_SCALE)


def test_weights_changed_in_place_are_seen_and_bad_settings_refused(outputs_close) -> None:
    torch.manual_seed(0)
    model = _Tokens().eval()
    ids = torch.randint(0, 50, (2, 9))
    with pytest.raises(InputError, match="max_unions"):
        CoExecutor(workers=1, max_unions=0)
    with CoExecutor(workers=1) as co:
        co.submit(model, ids).result(timeout=TIMEOUT)
        with torch.no_grad():
            model.fc.weight.mul_(2.0)
            want = model(ids)
        outputs_close(co.submit(model, ids).result(timeout=TIMEOUT), want, rtol=RTOL, atol_scale=ATOL_SCALE)


def test_a_failure_outside_the_kernels_fails_its_requests_and_later_ones_still_run(
    models, strategies, outputs_close
) -> None:
    with CoExecutor(workers=1) as co:
        real = co._union
        calls = {"n": 0}

        def broken(batch):  # the first union cannot be built; the dispatcher must survive it
            calls["n"] += 1
            if calls["n"] == 1:
                raise ExecutionError("union too large")
            return real(batch)

        co._union = broken
        x = _input("residual", 1)
        with pytest.raises(ExecutionError, match="union too large"):
            co.submit(strategies["residual"], x).result(timeout=TIMEOUT)
        _check(co.submit(strategies["residual"], x), models["residual"], x, outputs_close)


@pytest.mark.parametrize("kwargs", [{"workers": 1.5}, {"slots": "a"}, {"max_unions": 0}, {"workers": True}])
def test_bad_settings_are_input_errors(kwargs: dict) -> None:
    with pytest.raises(InputError, match="CoExecutor needs"):
        CoExecutor(**kwargs)


def test_malformed_requests_are_input_errors() -> None:
    fn = pathweave.optimize(torch.nn.Linear(4, 3).eval(), torch.randn(2, 4), strategy="tiles")
    with CoExecutor(workers=1) as co:
        for bad in ([(fn,)], [fn], [(fn, torch.randn(2, 4))], [(fn, (torch.randn(2, 4),), [])]):
            with pytest.raises(InputError, match="submit_all takes"):
                co.submit_all(bad)
    with pytest.raises(pathweave.ClosedError):
        co.submit(fn, torch.randn(2, 4))
    fn.close()
