"""The harness's candidate selection and Ramiel's lane variants as bench candidates."""

from __future__ import annotations

import pytest
import torch

from pathweave.bench.candidate import Candidate
from pathweave.bench.harness import (
    GROUPS,
    RAMIEL_VARIANTS,
    Result,
    _check,
    _select,
    pathweave_builders,
    run_bench,
)
from pathweave.bench.peers import peer_names
from pathweave.errors import InputError

AVAILABLE = [*pathweave_builders("cpu"), *peer_names("cpu")]


def test_default_selection_leaves_out_the_ramiel_variants() -> None:
    chosen = _select(AVAILABLE, None)
    assert "pathweave:lanes" in chosen and "ort:seq" in chosen
    assert not set(RAMIEL_VARIANTS) & set(chosen)


def test_ramiel_group_expands_in_available_order() -> None:
    chosen = _select(AVAILABLE, ["ramiel"])
    assert set(chosen) == set(GROUPS["ramiel"])
    assert chosen == [a for a in AVAILABLE if a in chosen]
    assert _select(AVAILABLE, ["pathweave:lc", "eager"]) == ["pathweave:lc", "eager"]
    with pytest.raises(InputError, match="unknown bench candidates"):
        _select(AVAILABLE, ["pathweave:lc+warp"])


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_ramiel_variants_run_and_match_eager(keep_threads, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATHWEAVE_CACHE_DIR", str(tmp_path))
    names = ["pathweave:lc", "pathweave:lc+prune", "pathweave:lc+clone", "pathweave:lc+intra", "eager:1t"]
    report = run_bench("squeezenet1_0", names, rounds=1, threads=2, progress=False)
    results = {c.name: c for c in report.candidates}
    for name in names[:3] + ["eager:1t"]:
        assert results[name].status == "ok", results[name]
        assert results[name].max_abs_diff < 1e-2
    assert "Ramiel clusters" in results["pathweave:lc"].note
    intra = results["pathweave:lc+intra"]  # 2 threads: one lane of 2 threads is no lanes at all
    assert intra.status == "skipped" and "at least 4 threads" in intra.note


def test_tiles_candidate_parks_its_workers_after_each_timed_call(tiny_cnn, monkeypatch) -> None:
    """Tile workers spin for the next inference (200 ms by default); the harness has them park after each
    timed call, so that they do not slow the candidate timed next."""
    import pathweave
    from pathweave.bench import harness
    from pathweave.tiles.strategy import TilesStrategy

    strat = TilesStrategy(pathweave.capture(tiny_cnn().eval(), torch.randn(1, 3, 8, 8)), threads=2)
    parked = []
    monkeypatch.setattr(strat.runtime, "park", lambda: parked.append(True))
    cand = harness._strategy_candidate("pathweave:tiles", strat, 2)
    results = {cand.name: harness.Result(cand.name, cand.kind, "ok")}
    harness._time_interleaved([cand], results, rounds=3, progress=False)
    assert len(parked) == 1 + 3  # after the warm-up and after each round's timed call
    strat.close()


def test_a_nan_output_is_wrong_not_ok() -> None:
    cand = Candidate("nan", "peer", lambda: torch.full((4,), float("nan")), threads=1)
    result = Result("nan", "peer", "ok")
    _check(cand, [torch.ones(4)], result)
    assert result.status == "WRONG"
    same = Result("nan_ok", "peer", "ok")  # NaN where eager has NaN too is right
    both = torch.tensor([float("nan"), 1.0])
    _check(Candidate("n", "peer", lambda: both.clone(), 1), [both], same)
    assert same.status == "ok"
