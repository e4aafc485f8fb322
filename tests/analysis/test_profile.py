"""Measured statistics: one profiling run, node times cached under the user's cache dir."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from pathweave.analysis.analyze import analyze_captured
from pathweave.analysis.profile import measure_node_times
from pathweave.frontend.capture import capture
from pathweave.machine import cache_dir
from pathweave.meta import TIME_US


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) + self.b(x)


@pytest.fixture
def captured():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return capture(Net().eval(), torch.randn(1, 3, 16, 16))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    return tmp_path


def test_measured_stats_exist_and_are_positive(captured, cache) -> None:
    analysis = analyze_captured(captured, measure=True, use_cache=False)
    m = analysis.measured
    assert m is not None and m.unit == "us"
    assert m.nodes == analysis.static.nodes == 4  # conv, relu, conv, add
    assert m.edges == analysis.static.edges
    assert m.total_work > 0 and m.critical_path > 0
    assert m.critical_path <= m.total_work  # measured edges cost nothing
    assert m.parallelism >= 1.0
    assert "measured" in analysis.to_dict()
    assert list(cache.iterdir()) == []  # use_cache=False writes nothing
    timed = [n for n in captured.gm.graph.nodes if TIME_US in n.meta]
    assert {n.name for n in timed} >= {"conv2d", "relu", "conv2d_1", "add"}
    assert all(n.meta[TIME_US] > 0 for n in timed)


def test_profile_cache_is_written_and_reused(captured, cache) -> None:
    first = measure_node_times(captured, repeats=1)
    files = list((cache / "profiles").glob("*.json"))
    assert len(files) == 1 and files[0].name.startswith(captured.graph_hash())
    assert json.loads(files[0].read_text()) == pytest.approx(first)
    # a second call reads the file instead of profiling: plant values only the file can provide
    planted = {name: 1000.0 + i for i, name in enumerate(first)}
    files[0].write_text(json.dumps(planted))
    assert measure_node_times(captured, repeats=1) == planted
    stats = analyze_captured(captured, measure=True).measured
    assert stats.total_work == pytest.approx(sum(planted[n] for n in ("conv2d", "relu", "conv2d_1", "add")))
    # a corrupt cache file is re-profiled, not trusted
    files[0].write_text("{not json")
    again = measure_node_times(captured, repeats=1)
    assert set(again) == set(first) and again != planted
