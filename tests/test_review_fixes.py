"""Regression tests for bugs a code review found (each failed before its fix)."""

import threading

import pytest
import torch
from torch import nn

import pathweave
from pathweave.analysis.dag import build_dag
from pathweave.bench.candidate import Candidate
from pathweave.bench.harness import Result, _check
from pathweave.errors import ExecutionError, UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.lanes.mapping import plan_lanes
from pathweave.lanes.plan import LanePlan
from pathweave.lanes.standalone import write_module
from pathweave.lanes.strategy import LanesStrategy
from pathweave.passes import fuse_conv, prune
from pathweave.sequential import SequentialExecutor


def test_a_nan_output_is_wrong_not_ok() -> None:
    cand = Candidate("nan", "peer", lambda: torch.full((4,), float("nan")), threads=1)
    result = Result("nan", "peer", "ok")
    _check(cand, [torch.ones(4)], result)
    assert result.status == "WRONG"
    same = Result("nan_ok", "peer", "ok")  # NaN where eager has NaN too is right
    both = torch.tensor([float("nan"), 1.0])
    _check(Candidate("n", "peer", lambda: both.clone(), 1), [both], same)
    assert same.status == "ok"


class ConstOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor):
        return torch.relu(x), self.w * 2, x


@pytest.mark.parametrize("strategy", ["sequential", "lanes"])
def test_outputs_that_are_constants_or_inputs_are_copies(strategy: str) -> None:
    x = torch.randn(3)
    fast = pathweave.optimize(ConstOut().eval(), x, strategy=strategy)
    _, const, same = fast(x)
    _, const2, _ = fast(x)
    assert const.data_ptr() != const2.data_ptr()  # not the graph's own constant, handed out twice
    assert same.data_ptr() != x.data_ptr() and torch.equal(same, x)  # not the caller's own tensor
    torch.testing.assert_close(const2, torch.full((3,), 2.0))


def test_lanes_executor_refuses_calls_after_close() -> None:
    x = torch.randn(3)
    strat = LanesStrategy(capture(ConstOut().eval(), x), lanes=2, threads=2)
    strat.close()
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(ExecutionError, strat, x)), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and done  # raised instead of hanging


def test_capture_restores_each_submodule_mode() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model.train()
    model[1].eval()
    capture(model, torch.randn(2, 3))
    assert model.training and model[0].training and not model[1].training


def test_buffer_mutation_is_named() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return x * 2

    with pytest.raises(UnsupportedError, match=r"updates its buffers \['calls'\]"):
        capture(Counter(), torch.randn(2))


def test_plan_drops_empty_lanes() -> None:
    captured = capture(nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval(), torch.randn(2, 3))
    dag = build_dag(captured.gm)
    plan = plan_lanes(dag, lambda n: 1.0, lanes=8)
    assert len(plan.lanes) == 1 and plan.lanes[0] == dag.nodes  # a chain: one lane, no idle threads
    plan.verify(dag)


def test_codegen_writes_an_empty_lane_and_constant_outputs(tmp_path) -> None:
    captured = capture(ConstOut().eval(), torch.randn(3))
    dag = build_dag(captured.gm)
    module, _ = write_module(captured, LanePlan((dag.nodes, ()), (), 1, 1, 0.0, 0.0), tmp_path / "m.py")
    source = module.read_text()
    compile(source, str(module), "exec")  # valid Python: the empty lane has a body
    assert "def lane_1(x):\n    pass" in source


def test_fuse_conv_leaves_scaled_adds_alone() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.add(self.conv(x), x, alpha=2)

    captured = capture(Scaled().eval(), torch.randn(1, 3, 4, 4))
    assert [m.add for m in fuse_conv.propose(captured.gm)] == [None]
    ex = SequentialExecutor(captured)
    assert ex.passes and any(p.name == "fuse_conv" and p.rewrites == 1 for p in ex.passes)


def test_prune_does_not_fold_random_ops() -> None:
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(self.w)

    captured = capture(Noisy().eval(), torch.randn(3), check=False)
    assert all(m.node != "rand_like" for m in prune.propose(captured.gm))
