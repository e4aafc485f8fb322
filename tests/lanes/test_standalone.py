import importlib.util
import sys

import pytest
import torch
from torch import nn

from pathweave import cli
from pathweave.analysis.dag import build_dag
from pathweave.errors import UnsupportedError
from pathweave.frontend.capture import capture
from pathweave.lanes.plan import LanePlan
from pathweave.lanes.standalone import write_module
from tests.test_sequential import ConstOut


class Fork(nn.Module):
    """Two branches of different lengths joined by an add; a tuple output."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        left = torch.tanh(self.b(torch.relu(self.a(x))))
        right = torch.sigmoid(self.c(x))
        return left + right, right * 2


def _load(path):
    spec = importlib.util.spec_from_file_location(f"gen_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _two_lane_plan(captured) -> LanePlan:
    dag = build_dag(captured.gm)
    right = {n for n in dag.nodes if "linear_2" in n or "sigmoid" in n}
    lanes = (tuple(n for n in dag.nodes if n not in right), tuple(n for n in dag.nodes if n in right))
    lane_of = {n: i for i, ln in enumerate(lanes) for n in ln}
    handoffs = tuple(
        dict.fromkeys((p, lane_of[n]) for n in dag.nodes for p in dag.preds[n] if lane_of[p] != lane_of[n])
    )
    plan = LanePlan(lanes, handoffs, 2, 2, 0.0, 0.0)
    plan.verify(dag)
    return plan


def test_generated_module_runs_without_pathweave_and_matches_eager(tmp_path) -> None:
    torch.manual_seed(0)
    model = Fork().eval()
    x = torch.randn(3, 8)
    captured = capture(model, x)
    module, weights = write_module(captured, _two_lane_plan(captured), tmp_path / "fork_parallel.py")
    source = module.read_text()
    assert weights.exists() and "import pathweave" not in source and "from pathweave" not in source
    assert "def lane_0(x):" in source and "def lane_1(x):" in source
    assert ".put(" in source and "_get(_Q[" in source  # explicit hand-offs between the lanes
    assert "torch.ops.aten.linear.default(" in source  # ops by their qualified names
    gen = _load(module)
    with torch.no_grad():
        want = model(x)
    for _ in range(3):  # the worker lane keeps serving calls
        got = gen.run(x)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_generated_module_reports_a_lane_error(tmp_path) -> None:
    model = Fork().eval()
    captured = capture(model, torch.randn(3, 8))
    gen = _load(write_module(captured, _two_lane_plan(captured), tmp_path / "fork_err.py")[0])
    with pytest.raises(RuntimeError):
        gen.run(torch.randn(3, 5))  # wrong width: both lanes fail in their first linear
    assert gen.run(torch.randn(3, 8))[0].shape == (3, 8)


def test_codegen_refuses_in_place_graphs(tmp_path) -> None:
    class Inplace(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu_(x * 2) + 1

    captured = capture(Inplace(), torch.randn(4), method="fx")
    with pytest.raises(UnsupportedError, match="functional graph"):
        write_module(captured, _single_lane(captured), tmp_path / "inplace.py")


def _single_lane(captured) -> LanePlan:
    dag = build_dag(captured.gm)
    return LanePlan((dag.nodes,), (), 1, 1, 0.0, 0.0)


def test_codegen_command_zoo_model(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "squeeze_parallel.py"
    assert cli.main(["codegen", "squeezenet1_0", "-o", str(out), "--lanes", "2"]) == 0
    assert "wrote" in capsys.readouterr().out and out.with_suffix(".pt").exists()
    gen = _load(out)
    from pathweave import zoo

    entry = zoo.get("squeezenet1_0")
    model, x = entry.build(), entry.example_inputs()
    with torch.no_grad():
        torch.testing.assert_close(gen.run(*x)[0], model(*x), rtol=1e-4, atol=1e-5)
    assert "pathweave" not in {m.split(".")[0] for m in sys.modules if m.startswith("gen_")}


def test_codegen_writes_an_empty_lane_and_constant_outputs(tmp_path) -> None:
    captured = capture(ConstOut().eval(), torch.randn(3))
    dag = build_dag(captured.gm)
    module, _ = write_module(captured, LanePlan((dag.nodes, ()), (), 1, 1, 0.0, 0.0), tmp_path / "m.py")
    source = module.read_text()
    compile(source, str(module), "exec")  # valid Python: the empty lane has a body
    assert "def lane_1(x):\n    pass" in source
