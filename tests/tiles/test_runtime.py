"""The native tile runtime through its Python API: every tile after its parents under 1..4 workers,
repeated runs, workers added and removed between runs, concurrent runtimes, a failing kernel.

The checking kernel computes out[t] = bias[t] + 0.5 * sum(out[parents]) in float32, parents in CSR
order; outputs start as NaN, so a tile run before one of its parents leaves a NaN or a wrong value.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from pathweave.errors import ClosedError, ExecutionError, InputError
from pathweave.tiles.abi import OP_TEST
from pathweave.tiles.runtime import TileRuntime, csr, depth_columns


def _random_graph(n: int, seed: int, window: int = 40, max_parents: int = 3) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    parents: list[list[int]] = [[]]
    for t in range(1, n):
        k = int(rng.integers(0, max_parents + 1))
        parents.append(sorted(set(rng.integers(max(0, t - window), t, size=k).tolist())))
    return parents


def _reference(parents: list[list[int]], bias: np.ndarray) -> np.ndarray:
    out = np.zeros(len(parents), np.float32)
    for t, ps in enumerate(parents):
        acc = np.float32(0.0)
        for p in ps:
            acc = np.float32(acc + out[p])
        out[t] = np.float32(bias[t] + np.float32(0.5) * acc)
    return out


def _runtime(parents: list[list[int]], workers: int, spin: int = 0, seed: int = 0):
    n = len(parents)
    bias = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    rt = TileRuntime(parents, np.full(n, OP_TEST, np.int32), workers=workers)
    out = np.full(n, np.nan, np.float32)
    rt.set_test_data(out, bias, np.full(n, spin, np.int32))
    return rt, out, _reference(parents, bias)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_every_tile_after_its_parents(workers: int) -> None:
    parents = _random_graph(3000, seed=workers)
    rt, out, want = _runtime(parents, workers)
    for _ in range(30):
        out[:] = np.nan
        rt.run()
        np.testing.assert_array_equal(out, want)
        ran = rt.ran_on()
        assert ran.min() >= 0 and ran.max() < workers
    rt.close()


def test_work_spreads_and_stays_correct_with_real_work() -> None:
    parents = [[] for _ in range(64)] + [[i, i + 1] for i in range(0, 64, 2)]  # 64 roots, 32 joins
    rt, out, want = _runtime(parents, workers=2, spin=2000)
    rt.run()
    np.testing.assert_array_equal(out, want)
    rt.close()


def test_chain_and_empty_graph() -> None:
    chain = [[]] + [[t - 1] for t in range(1, 500)]
    rt, out, want = _runtime(chain, workers=3)
    rt.run()
    np.testing.assert_array_equal(out, want)
    rt.close()
    empty = TileRuntime([], np.zeros(0, np.int32), workers=2)
    empty.run()
    empty.close()


def test_workers_added_and_removed_between_runs() -> None:
    parents = _random_graph(2000, seed=7)
    rt, out, want = _runtime(parents, workers=1)
    for n in (3, 1, 2, 4, 1):
        rt.set_workers(n)
        assert rt.workers == n
        out[:] = np.nan
        rt.run()
        np.testing.assert_array_equal(out, want)
    for bad in (0, 2.5, "2"):
        with pytest.raises(InputError, match="workers must be an int"):
            rt.set_workers(bad)
    rt.close()


def test_concurrent_runtimes_from_python_threads() -> None:
    results: list[bool] = []

    def job(seed: int) -> None:
        rt, out, want = _runtime(_random_graph(1500, seed=seed), workers=2, seed=seed)
        ok = True
        for _ in range(20):
            out[:] = np.nan
            rt.run()
            ok &= bool(np.array_equal(out, want))
        rt.close()
        results.append(ok)

    threads = [threading.Thread(target=job, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [True, True, True]


def test_a_failing_kernel_names_its_tile() -> None:
    parents = _random_graph(100, seed=1)
    ops = np.full(100, OP_TEST, np.int32)
    ops[57] = 99  # no such op
    rt = TileRuntime(parents, ops, workers=2)
    rt.set_test_data(np.zeros(100, np.float32), np.zeros(100, np.float32), np.zeros(100, np.int32))
    with pytest.raises(ExecutionError, match="tile 57 \\(op 99\\)"):
        rt.run()
    ops[57] = OP_TEST  # the runtime reads the caller's array in place: the next run succeeds
    rt.run()
    rt.close()


def test_tiles_out_of_order_are_refused() -> None:
    with pytest.raises(ExecutionError, match="topological order"):
        TileRuntime([[1], []], np.zeros(2, np.int32))


def test_csr_and_depth_columns() -> None:
    ptr, idx = csr([[], [0], [0, 1]])
    assert ptr.tolist() == [0, 0, 1, 3] and idx.tolist() == [0, 0, 1]
    # depths 0, 1, 2 on 64 columns: 0, 21, 42
    assert depth_columns([[], [0], [1]]).tolist() == [0, 21, 42]


@pytest.mark.parametrize("name", ["resnet50", "bert_base"])
def test_zoo_tile_graphs_run_in_dependency_order(name: str, zoo_cache) -> None:
    from pathweave.tiles.build import build_tile_graph

    graph = build_tile_graph(zoo_cache.captured(name).gm, 8)
    parents = [graph.parents(t).tolist() for t in range(graph.num_tiles)]
    bias = np.random.default_rng(0).standard_normal(graph.num_tiles).astype(np.float32) * 0.1
    want = _reference(parents, bias)
    rt = TileRuntime.from_graph(graph, np.full(graph.num_tiles, OP_TEST, np.int32), workers=2)
    out = np.full(graph.num_tiles, np.nan, np.float32)
    rt.set_test_data(out, bias, np.zeros(graph.num_tiles, np.int32))
    for _ in range(10):
        out[:] = np.nan
        rt.run()
        np.testing.assert_array_equal(out, want)
    rt.close()


def test_graphs_swapped_between_runs_on_the_same_engines() -> None:
    """Co-execution swaps graphs of other sizes into one runtime (growing and shrinking it); each runs
    in dependency order, with workers that may still be waking up from the run before."""
    graphs = [_random_graph(n, seed=n) for n in (300, 2500, 40, 1200)]
    rt = TileRuntime([], np.zeros(0, np.int32), workers=3)
    for rnd in range(3):
        for parents in graphs:
            n = len(parents)
            bias = np.random.default_rng(n).standard_normal(n).astype(np.float32)
            children: list[list[int]] = [[] for _ in range(n)]
            for t, ps in enumerate(parents):
                for p in ps:
                    children[p].append(t)
            rt.set_graph(*csr(parents), *csr(children), np.full(n, OP_TEST, np.int32), depth_columns(parents))
            out = np.full(n, np.nan, np.float32)
            rt.set_test_data(out, bias, np.zeros(n, np.int32))
            rt.run()
            np.testing.assert_array_equal(out, _reference(parents, bias), err_msg=f"round {rnd}, {n} tiles")
            assert rt.n == n and rt.ran_on().min() >= 0
    rt.close()


def test_a_new_graph_without_its_program_fails_loudly() -> None:
    import torch

    import pathweave
    from pathweave.errors import ExecutionError
    from pathweave.tiles.strategy import TilesStrategy
    from pathweave.tiles.union import make_part, union

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    strat = TilesStrategy(pathweave.capture(model, torch.randn(1, 3, 8, 8)), threads=2)
    bigger = union([make_part(strat.graph, strat.new_program()) for _ in range(5)])
    strat.runtime.set_graph(*bigger.graph)  # the old program's arrays are shorter than this graph
    with pytest.raises(ExecutionError, match="failed in the native runtime"):
        strat.runtime.run()
    strat.close()


def test_linger_is_set_and_checked() -> None:
    """Workers that park at once (linger 0) and ones that spin still run every tile after its parents."""
    parents = _random_graph(2000, seed=3)
    rt, out, want = _runtime(parents, workers=2, spin=200)
    try:
        assert rt.linger_ms == 200.0  # the default
        with pytest.raises(InputError):
            rt.linger_ms = -1
        with pytest.raises(InputError):
            rt.linger_ms = float("nan")
        for ms in (0.0, 0.5, 200.0):
            rt.linger_ms = ms
            assert rt.linger_ms == ms
            for _ in range(3):
                out[:] = np.nan
                rt.run()
                np.testing.assert_array_equal(out, want)
                rt.park()  # lingering workers park now; the next run wakes them
    finally:
        rt.close()


def test_runs_back_to_back_while_workers_may_still_be_leaving() -> None:
    """``run`` returns once every tile has run, not once every worker has left the engine, and the next
    run does not wait for them either: a worker still inside takes part in it. What follows at once (a
    run into fresh buffers, a new graph, other workers, close) must still find every tile of the run
    before done, in order, and nothing of it written later: tiny graphs, so workers often arrive late."""
    rt = TileRuntime([], np.zeros(0, np.int32), workers=2)
    rng = np.random.default_rng(5)
    try:
        for rnd in range(300):
            parents = _random_graph(int(rng.integers(1, 9)), seed=rnd, window=3)
            n = len(parents)
            children: list[list[int]] = [[] for _ in range(n)]
            for t, ps in enumerate(parents):
                for p in ps:
                    children[p].append(t)
            rt.set_graph(*csr(parents), *csr(children), np.full(n, OP_TEST, np.int32), depth_columns(parents))
            bias = rng.standard_normal(n).astype(np.float32)
            for _ in range(3):
                out = np.full(n, np.nan, np.float32)  # a new buffer each run: the last one is let go
                rt.set_test_data(out, bias, np.full(n, rnd % 3 * 50, np.int32))
                rt.run()
                assert rt.ran_on().min() >= 0, f"round {rnd}: a tile's worker unrecorded"
                np.testing.assert_array_equal(out, _reference(parents, bias), err_msg=f"round {rnd}")
            if rnd % 50 == 49:
                rt.set_workers(1 + rnd // 50 % 3)
    finally:
        rt.close()
    with pytest.raises(ClosedError):
        rt.run()


def _thread_cpus() -> dict[int, set[int]]:
    """Each thread of this process and the CPUs it may run on (Linux)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended
            continue
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        cpus: set[int] = set()
        for part in line.split()[1].split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        found[int(task.name)] = cpus
    return found


_LINUX_2_CPUS = (
    hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1 and Path("/proc/self/task").is_dir()
)


@pytest.mark.skipif(not _LINUX_2_CPUS, reason="needs Linux and 2 CPUs")
def test_workers_keep_off_a_pinned_callers_cpu_and_the_callers_mask_is_kept() -> None:
    """A caller pinned to one CPU (a serving thread) still finds the workers on the other CPUs, also
    when an earlier call from another CPU had put them on this one; and the caller's own mask is the
    same after each run as before (the runtime holds the caller on its CPU only during the run)."""
    mine = os.sched_getaffinity(0)
    a, b = sorted(mine)[:2]
    before = set(_thread_cpus())
    rt, out, want = _runtime(_random_graph(500, seed=9), workers=2)
    workers = [t for t in _thread_cpus() if t not in before]
    assert workers, "the runtime started no worker thread"
    try:
        for caller in (b, a, b):  # unpinned on b (workers to a), then pinned to a: workers must move
            os.sched_setaffinity(0, {caller})
            if caller == b:
                os.sched_setaffinity(0, mine)  # stays on b for the run below, but not pinned to it
            held = os.sched_getaffinity(0)
            out[:] = np.nan
            rt.run()
            np.testing.assert_array_equal(out, want)
            assert os.sched_getaffinity(0) == held
            cpus = _thread_cpus()
            if os.sched_getaffinity(0) == {a}:
                assert all(a not in cpus[t] for t in workers if t in cpus), cpus
    finally:
        os.sched_setaffinity(0, mine)
        rt.close()


@pytest.mark.parametrize("steal", [True, False])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_homes_place_tiles_and_keep_the_order(workers: int, steal: bool) -> None:
    """Tiles with a home run in dependency order; without stealing each runs on its home worker."""
    parents = _random_graph(2000, seed=11)
    rt, out, want = _runtime(parents, workers, spin=20)
    rng = np.random.default_rng(4)
    homes = rng.integers(-1 if steal else 0, 4, size=len(parents)).astype(np.int32)
    try:
        rt.set_homes(homes, steal=steal)
        for _ in range(10):
            out[:] = np.nan
            rt.run()
            np.testing.assert_array_equal(out, want)
            if not steal:
                np.testing.assert_array_equal(rt.ran_on(), homes % workers)
        rt.set_homes(None)
        out[:] = np.nan
        rt.run()
        np.testing.assert_array_equal(out, want)
        with pytest.raises(InputError):
            rt.set_homes(np.zeros(3, np.int32))
        with pytest.raises(InputError):
            rt.set_homes(np.full(len(parents), -2, np.int32))
    finally:
        rt.close()
