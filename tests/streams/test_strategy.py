"""The streams strategy (Opara): CPU-side refusals here; on CUDA (tests marked ``gpu``) the captured
multi-stream graph against eager, repeated calls, every policy, and the proof that no memory block
read by another stream is handed out again during capture."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx

import pathweave
from pathweave.analysis.dag import build_dag
from pathweave.errors import UnsupportedError
from pathweave.streams.plan import POLICIES
from pathweave.streams.strategy import owners, refuse_unsafe


class _Branches(torch.nn.Module):
    """Two branches of different length from one input, joined by an add."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.b = torch.nn.Sequential(*[torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        left, right = y.split(4, dim=1)
        return torch.cat([left * 2, right], dim=1) + self.b(y)


def test_streams_need_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(UnsupportedError, match="needs CUDA"):
        pathweave.optimize(_Branches().eval(), torch.randn(1, 8, 6, 6), strategy="streams")


def test_inplace_and_random_ops_are_refused() -> None:
    class InPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.relu_() + 1

    class Random(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(x)

    with pytest.raises(UnsupportedError, match="relu_"):
        refuse_unsafe(torch.fx.symbolic_trace(InPlace()))
    with pytest.raises(UnsupportedError, match="rand_like"):
        refuse_unsafe(torch.fx.symbolic_trace(Random()))


def test_tuple_accesses_follow_their_producer() -> None:
    captured = pathweave.capture(_Branches().eval(), torch.randn(1, 8, 6, 6))
    dag = build_dag(captured.gm)
    own = owners(captured.gm, set(dag.nodes))
    getitems = [n for n in own if n.target is operator.getitem]
    assert getitems and all(own[g] == g.args[0].name for g in getitems)
    assert set(own.values()) == set(dag.nodes)


# ------------------------------------------------------------------------------------------------ CUDA


@pytest.fixture
def exact_fp32():
    """cuDNN may use TF32 for convolutions by default; the comparisons below want plain fp32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.gpu
@pytest.mark.usefixtures("exact_fp32")
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_matches_eager_on_repeated_calls(policy: str, outputs_close) -> None:
    from pathweave.streams.strategy import StreamsStrategy

    model = _Branches().eval().cuda()
    captured = pathweave.capture(model, torch.randn(2, 8, 16, 16, device="cuda"))
    strat = StreamsStrategy(captured, policy=policy, use_cache=False)
    for seed in range(5):  # new inputs each call: the static input buffers must be refilled
        x = torch.randn(2, 8, 16, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        with torch.no_grad():
            want = model(x)
        outputs_close(strat(x), want, rtol=1e-4, atol_scale=1e-4)


@pytest.mark.gpu
@pytest.mark.usefixtures("exact_fp32")
@pytest.mark.parametrize("name", ["googlenet", "nasnet_a_mobile", "bert_base", "gpt2", "deepfm"])
def test_zoo_models_match_eager(name: str, zoo_cache, outputs_close) -> None:
    from pathweave.streams.strategy import StreamsStrategy

    model = zoo_cache.model(name).cuda()
    inputs = tuple(t.cuda() for t in zoo_cache.inputs(name))
    strat = StreamsStrategy(pathweave.capture(model, *inputs, name=name))
    assert strat.plan.streams > 1 and strat.plan.policy == "opara"  # not the single-stream fallback
    with torch.no_grad():
        want = model(*inputs)
    outputs_close(strat(*inputs), want, rtol=1e-3, atol_scale=1e-3)
    model.cpu()


@pytest.mark.gpu
def test_no_block_read_by_another_stream_is_reused_during_capture(zoo_cache) -> None:
    """A value read on a stream other than its producer's must keep its memory to the end of the capture;
    a fresh allocation at its address afterwards is the reuse race this guards against."""
    from pathweave.streams.strategy import StreamsStrategy

    model = zoo_cache.model("googlenet").cuda()
    inputs = tuple(t.cuda() for t in zoo_cache.inputs("googlenet"))
    strat = StreamsStrategy(pathweave.capture(model, *inputs, name="googlenet"), memory="reuse")
    sof = strat.plan.stream_of()
    own = owners(strat.executor.gm, set(strat.plan.order))
    cross = {a.name for n, name in own.items() for a in n.all_input_nodes
             if a in own and sof[own[a]] != sof[name]}  # fmt: skip
    log = strat.executor.allocations
    assert cross and log
    for i, (name, _, ptr) in enumerate(log):
        if name in cross:
            reused = [later for later, _, p in log[i + 1 :] if p == ptr]
            assert not reused, f"{name} (read across streams) had its block reused by {reused[0]}"
    model.cpu()


@pytest.mark.gpu
@pytest.mark.usefixtures("exact_fp32")
def test_auto_and_the_timeline_on_cuda(zoo_cache, outputs_close) -> None:
    """``optimize`` on CUDA tries both graphs and keeps one; a replay of the Opara graph uses its streams."""
    from pathweave.report.timeline import replay_spans, summary
    from pathweave.streams.strategy import StreamsStrategy

    model = zoo_cache.model("googlenet").cuda()
    inputs = tuple(t.cuda() for t in zoo_cache.inputs("googlenet"))
    fast = pathweave.optimize(model, *inputs)
    assert set(fast.auto_times_ms) == {"streams:single", "streams:opara"}
    with torch.no_grad():
        want = model(*inputs)
    outputs_close(fast(*inputs), want, rtol=1e-3, atol_scale=1e-3)
    strat = StreamsStrategy(pathweave.capture(model, *inputs, name="googlenet"), copy_outputs=False)
    spans = replay_spans(lambda: strat.run_flat(list(inputs)))
    assert summary(spans)["streams"] > 1
    model.cpu()
