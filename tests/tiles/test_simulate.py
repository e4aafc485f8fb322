"""The scheduling simulator: hand-computed makespans on a chain, a fan-out and a diamond; the order the
native runtime runs tiles on one worker; the bounds on random graphs; costs read back from synthetic
traces; one small model end to end (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pathweave.errors import InputError
from pathweave.tiles.abi import OP_TEST
from pathweave.tiles.profile import TracedRun
from pathweave.tiles.runtime import TileRuntime
from pathweave.tiles.simulate import (
    TaskCosts,
    TaskGraph,
    calibrate,
    costs_from_traces,
    critical_path_ns,
    critical_tasks,
    format_simulation,
    parse_cores,
    replay_error,
    simulate_barrier,
    simulate_runtime,
    simulation_report,
    slowdown,
    work_ns,
)
from pathweave.tiles.strategy import TilesStrategy


def _costs(kernels: list[float], overhead: float = 0.0, wake: float = 0.0) -> TaskCosts:
    return TaskCosts(np.asarray(kernels, dtype=np.float64), overhead, wake)


def test_a_chain_stays_on_one_worker() -> None:
    chain = TaskGraph.from_parents([[], [0], [1]])
    costs = _costs([1, 2, 3], overhead=0.5, wake=10)
    for workers in (1, 2, 4):  # each task keeps its child: 6 of kernels + 2 overheads, never a wake-up
        schedule = simulate_runtime(chain, costs, workers)
        assert schedule.makespan_ns == 7.0 and schedule.worker.tolist() == [0, 0, 0]
        assert schedule.steals == 0
    assert simulate_barrier(chain, costs, 1) == 7.0
    assert simulate_barrier(chain, costs, 2) == 6 + 2 * (0.5 + 10)  # a barrier after each of 2 layers
    assert critical_path_ns(chain, costs) == 6.0 and critical_tasks(chain, costs) == [0, 1, 2]


def test_a_fan_out_is_stolen_deepest_first() -> None:
    # root 0 (1 ns) -> 4 children (4 ns each); layers: the root, then the children
    fan = TaskGraph.from_parents([[], [0], [0], [0], [0]], layer_start=[0, 1, 5])
    costs = _costs([1, 4, 4, 4, 4], overhead=0.5, wake=1)
    assert simulate_runtime(fan, costs, 1).makespan_ns == 1 + 16 + 4 * 0.5
    # 2 workers: worker 0 keeps child 1 (1.5 - 5.5), pushes 2, 3, 4; worker 1 arrives at 1 (its wake-up)
    # and steals the last pushed, 4 (1 - 5), then 3 at 5.5 (9.5); worker 0 pops 2 at 6 (10)
    two = simulate_runtime(fan, costs, 2)
    assert two.makespan_ns == 10.0
    assert two.worker.tolist() == [0, 0, 0, 1, 1] and two.start_ns.tolist() == [0, 1.5, 6, 5.5, 1]
    assert two.steals == 2
    four = simulate_runtime(fan, costs, 4)  # workers 1, 2, 3 each steal one child at 1
    assert four.makespan_ns == 5.5 and four.worker.tolist() == [0, 0, 3, 2, 1] and four.steals == 3
    # barrier: the root, a barrier (overhead + wake-up), the children dealt to the free workers
    assert simulate_barrier(fan, costs, 4) == 1 + 0.5 + 1 + 4
    assert simulate_barrier(fan, costs, 2) == 1 + 0.5 + 1 + 4 + 0.5 + 4


def test_a_diamond_pays_a_wake_up_on_its_critical_path() -> None:
    diamond = TaskGraph.from_parents([[], [0], [0], [1, 2]], layer_start=[0, 1, 3, 4])
    costs = _costs([1, 2, 3, 1], wake=0.5)
    # worker 0: 0 (0 - 1), keeps 1 (1 - 3); worker 1, waiting since 0.5, steals 2 at 1.5 (4.5) and keeps 3
    schedule = simulate_runtime(diamond, costs, 2)
    assert schedule.makespan_ns == 5.5 and schedule.worker.tolist() == [0, 0, 1, 1]
    assert critical_path_ns(diamond, costs) == 5.0 and critical_tasks(diamond, costs) == [0, 2, 3]
    assert simulate_runtime(diamond, costs, 1).makespan_ns == 7.0
    assert simulate_barrier(diamond, costs, 2) == 1 + 0.5 + 3 + 0.5 + 1


def test_one_worker_runs_the_native_runtimes_order() -> None:
    rng = np.random.default_rng(3)
    parents: list[list[int]] = [[]]
    for t in range(1, 400):  # several roots, fan-outs and joins
        k = int(rng.integers(0, 4))
        parents.append(sorted(set(rng.integers(max(0, t - 30), t, size=k).tolist())))
    rt = TileRuntime(parents, np.full(len(parents), OP_TEST, np.int32), workers=1)
    rt.set_test_data(np.zeros(len(parents), np.float32), np.zeros(len(parents)), np.zeros(len(parents)))
    with rt.tracing() as times:
        rt.run()
        native = np.argsort(times[:, 0], kind="stable")
    rt.close()
    graph = TaskGraph.from_parents(parents)
    schedule = simulate_runtime(graph, _costs([1.0] * len(parents), overhead=0.25), 1)
    np.testing.assert_array_equal(np.argsort(schedule.start_ns, kind="stable"), native)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_schedule_beats_the_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, parents = [0], []
    for layer in range(12):  # layers of 1..6 tasks, each reading 0..3 tasks of the last 2 layers
        lo = starts[max(0, layer - 2)]
        for _ in range(int(rng.integers(1, 7))):
            k = int(rng.integers(0, 4)) if starts[-1] else 0
            parents.append(sorted(set(rng.integers(lo, starts[-1], size=k).tolist())) if starts[-1] else [])
        starts.append(len(parents))
    graph = TaskGraph.from_parents(parents, starts)
    costs = TaskCosts(rng.uniform(1, 100, len(parents)), overhead_ns=2.0, wake_ns=5.0)
    serial = work_ns(costs) + (len(parents) - 1) * 2.0
    assert simulate_runtime(graph, costs, 1).makespan_ns == pytest.approx(serial)
    assert simulate_barrier(graph, costs, 1) == pytest.approx(serial)
    for workers in (2, 3, 8, 64):
        bound = max(critical_path_ns(graph, costs), work_ns(costs) / workers)
        schedule = simulate_runtime(graph, costs, workers)
        assert schedule.makespan_ns >= bound and simulate_barrier(graph, costs, workers) >= bound
        ends = schedule.start_ns + costs.kernel_ns
        for t, ps in enumerate(parents):  # every task after its parents
            assert all(schedule.start_ns[t] >= ends[p] for p in ps)


def test_costs_read_back_from_traces() -> None:
    diamond = TaskGraph.from_parents([[], [0], [0], [1, 2]])
    # 1 worker: kernels of 10, 20, 30, 40 ns, 5 ns between tiles, called 7 ns before the first, returned
    # 3 after the last: overhead 5, fixed 10
    one = TracedRun(np.array([[100, 110], [115, 135], [140, 170], [175, 215]]), np.zeros(4, int), 93, 218)
    # 2 workers: worker 1 waits from the start; tile 2 becomes ready at 110 and starts there at 114
    two = TracedRun(
        np.array([[100, 110], [115, 135], [114, 144], [149, 189]]), np.array([0, 0, 1, 1]), 90, 200
    )
    costs = costs_from_traces(diamond, [one], [two])
    np.testing.assert_array_equal(costs.kernel_ns, [10, 20, 30, 40])
    assert costs.overhead_ns == 5.0 and costs.fixed_ns == 10.0 and costs.wake_ns == 4.0
    assert costs_from_traces(diamond, [one], []).wake_ns == 0.0
    # the 2-worker run is what the policy does with these costs: worker 1 steals tile 2 a wake-up after
    # tile 0 ends, keeps tile 3; the kernels took as long as on 1 worker
    assert replay_error(diamond, costs, [two]) == 0.0 and slowdown([one], [two]) == 1.0
    doubled = np.stack([two.times[:, 0], 2 * two.times[:, 1] - two.times[:, 0]], axis=1)
    slower = TracedRun(doubled, two.workers, 0, 0)  # every kernel twice as long
    assert slowdown([one], [slower]) == 2.0 and slowdown([one], []) == 1.0
    # paired: the median of each pair's ratio, not a ratio of medians
    assert slowdown([one, slower], [slower, slower]) == 1.5
    with pytest.raises(InputError):
        costs_from_traces(diamond, [], [two])


def test_bad_input_is_refused() -> None:
    with pytest.raises(InputError, match="earlier"):
        TaskGraph.from_parents([[], [1]])
    with pytest.raises(InputError, match="earlier layer"):
        TaskGraph.from_parents([[], [0]], layer_start=[0, 2])
    chain = TaskGraph.from_parents([[], [0]])
    with pytest.raises(InputError, match="workers"):
        simulate_runtime(chain, _costs([1, 1]), 0)
    with pytest.raises(InputError, match="kernel_ns"):
        simulate_barrier(chain, _costs([1]), 1)
    assert parse_cores("4,64") == [1, 2, 4, 64]
    with pytest.raises(InputError):
        parse_cores("two")


def test_the_command_refuses_bad_options_before_building(capsys: pytest.CaptureFixture[str]) -> None:
    from pathweave.cli import main

    assert main(["simulate", "googlenet", "--cores", "two"]) == 2
    assert main(["simulate", "googlenet", "--rounds", "0"]) == 2
    assert main(["simulate", "googlenet", "--barrier-us", "-1"]) == 2
    assert main(["simulate", "googlenet", "--plot", "curves.txt"]) == 2
    assert capsys.readouterr().err.count("pathweave: error:") == 4


def test_calibration_in_turns_with_the_timed_runs(branches: TilesStrategy) -> None:
    """Traced and timed runs taken round by round, as many of each as asked; the worker count restored."""
    branches.set_workers(1)
    try:
        cal, measured = calibrate(branches, runs=3, rounds=2)
        assert set(measured) == {1, 2} and all(ms > 0 for ms in measured.values())
        assert cal.slowdown > 0 and cal.costs.kernel_ns.shape == (branches.graph.num_tiles,)
        assert branches.threads == 1
        assert calibrate(branches, runs=1, rounds=0)[1] == {}
        for runs, rounds in ((0, 1), (1, -1)):
            with pytest.raises(InputError):
                calibrate(branches, runs=runs, rounds=rounds)
    finally:
        branches.set_workers(2)


def test_a_model_end_to_end(branches: TilesStrategy, tmp_path: Path) -> None:
    d = simulation_report(branches, [1, 2, 8], rounds=2, runs=2, show_progress=False)
    assert [r["cores"] for r in d["rows"]] == [1, 2, 8] and d["tiles"] == branches.graph.num_tiles
    assert branches.threads == 2
    for r in d["rows"]:
        floor = max(r["critical_path_ms"], r["work_bound_ms"])
        assert r["runtime_ms"] >= floor and r["barrier_ms"] >= floor
        assert r["no_contention_ms"] <= r["runtime_ms"] or d["costs"]["slowdown_2"] < 1
        assert ("measured_ms" in r) == (r["cores"] <= 2)
    assert d["costs"]["work_ms"] > 0 and d["costs"]["overhead_ns"] >= 0
    path = d["critical_path"]
    assert 1 <= path["layers"] <= path["tiles"] and set(path["costliest_ms"]) <= set(
        branches.graph.layer_names
    )
    text = format_simulation(d)
    assert "assumptions:" in text and "runtime ms" in text
    pytest.importorskip("matplotlib")
    from pathweave.report.plot import plot_scaling

    path = plot_scaling(d["rows"], tmp_path / "curves.png", "test")
    assert path.stat().st_size > 0
