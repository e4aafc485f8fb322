import torch
from torch import nn

from pathweave.analysis.dag import build_dag
from pathweave.frontend.capture import capture
from pathweave.lanes import clone
from pathweave.lanes.strategy import LanesStrategy
from pathweave.passes import prune
from pathweave.passes.pipeline import run_pipeline


class ConstSub(nn.Module):
    """exp(w).t() * 2 depends on weights only; dropout (eval) and clone return their input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.exp(self.w).t() * 2
        return self.drop(x @ scale).clone()


def test_prune_folds_constants_and_drops_identities() -> None:
    torch.manual_seed(0)
    model = ConstSub().eval()
    x = torch.randn(2, 4)
    captured = capture(model, x)
    matches = prune.propose(captured.gm)
    assert [(m.node, m.action) for m in matches] == [
        ("exp", "fold"), ("t", "fold"), ("mul", "fold"), ("dropout", "identity"), ("clone", "identity"),
    ]  # fmt: skip
    run_pipeline(captured.gm, (prune,))
    ops = [str(n.target) for n in captured.gm.graph.nodes if n.op == "call_function"]
    assert ops == ["aten.matmul.default"]
    with torch.no_grad():
        torch.testing.assert_close(captured.gm(x)[0], model(x))


def test_prune_keeps_training_dropout_and_layout_clones() -> None:
    class Keep(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clone(memory_format=torch.channels_last) + 1

    captured = capture(Keep(), torch.randn(1, 2, 3, 3))
    assert prune.propose(captured.gm) == []


class Fan(nn.Module):
    """relu(x) is read by four branches of different lengths."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        outs = []
        for i, layer in enumerate(self.layers):
            y = r
            for _ in range(i + 1):
                y = torch.tanh(layer(y))
            outs.append(y)
        return torch.stack(outs).sum(0)


def test_clone_proposes_copies_for_readers_within_budget() -> None:
    captured = capture(Fan().eval(), torch.randn(8, 64))
    matches = clone.propose(captured.gm, max_growth=1.0)
    by_node = {m.node: m.users for m in matches}
    # branch i holds i + 1 linears, so relu's readers are linear, linear_1, linear_3, linear_6
    assert by_node["relu"] == ("linear_1", "linear_3", "linear_6")  # the first reader keeps the original
    assert clone.propose(captured.gm, max_growth=0.0) == []  # no budget, no clones


def test_clone_apply_keeps_outputs_and_adds_nodes() -> None:
    torch.manual_seed(0)
    model = Fan().eval()
    x = torch.randn(8, 64)
    captured = capture(model, x)
    before = len(build_dag(captured.gm).nodes)
    origin = clone.apply(captured.gm, [m for m in clone.propose(captured.gm, 1.0) if m.node == "relu"])
    captured.gm.graph.lint()
    captured.gm.recompile()
    assert sorted(origin.values()) == ["relu"] * 3
    assert len(build_dag(captured.gm).nodes) == before + 3
    relus = captured.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.relu.default)
    assert len(relus) == 4 and all(len(r.users) == 1 for r in relus)
    with torch.no_grad():
        torch.testing.assert_close(captured.gm(x)[0], model(x))


def test_lanes_with_cloning_verify_and_match_eager() -> None:
    torch.manual_seed(0)
    model = Fan().eval()
    x = torch.randn(8, 64)
    for use_clone in (False, True):
        strat = LanesStrategy(capture(model, x), lanes=2, threads=2, clone=use_clone)
        try:
            assert use_clone or strat.cloned == 0
            with torch.no_grad():
                torch.testing.assert_close(strat(x), model(x), rtol=1e-5, atol=1e-6)
        finally:
            strat.close()


def test_prune_does_not_fold_random_ops() -> None:
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(self.w)

    captured = capture(Noisy().eval(), torch.randn(3), check=False)
    assert all(m.node != "rand_like" for m in prune.propose(captured.gm))
