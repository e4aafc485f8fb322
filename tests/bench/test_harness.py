"""The harness's candidate selection and Ramiel's lane variants as bench candidates."""

from __future__ import annotations

import pytest
import torch

from pathweave.bench.harness import GROUPS, RAMIEL_VARIANTS, _select, pathweave_builders, run_bench
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
